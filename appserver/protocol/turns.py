"""Wire models for turns, items, the input queue and approvals."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from appserver.protocol.base import OpenWireModel, WireModel
from appserver.protocol.threads import Item, Turn

# --- input parts ---------------------------------------------------------------


class TextPart(WireModel):
    type: Literal["text"]
    text: str


class FileRefPart(WireModel):
    type: Literal["fileRef"]
    path: str
    display_path: str | None = None


class LocalImagePart(WireModel):
    type: Literal["localImage"]
    path: str
    mime_type: str | None = None
    file_name: str | None = None


class ImageUrlPart(WireModel):
    type: Literal["image"]
    url: str


class SkillRefPart(WireModel):
    type: Literal["skillRef"]
    name: str


class CommandRefPart(WireModel):
    type: Literal["commandRef"]
    name: str
    args_text: str | None = None
    raw_text: str | None = None


InputPart = Annotated[
    TextPart | FileRefPart | LocalImagePart | ImageUrlPart | SkillRefPart | CommandRefPart,
    Field(discriminator="type"),
]


class SenderContext(WireModel):
    sender_id: str
    sender_name: str | None = None
    sender_role: str | None = None
    group_id: str | None = None


class ChatMessage(OpenWireModel):
    """A client-supplied history message (``historyMode: "client"``).

    Accepts ``{role, content: str}`` and Microsoft.Extensions.AI's
    ``{role, contents: [{"$type": "text", text}]}``.
    """

    role: str
    content: str | None = None
    contents: list[dict[str, Any]] | None = None

    def text(self) -> str:
        if self.content is not None:
            return self.content
        return "".join(
            str(part.get("text", "")) for part in self.contents or [] if isinstance(part, dict)
        )


class _HasInput(WireModel):
    input: list[InputPart]

    @field_validator("input")
    @classmethod
    def _non_empty(cls, parts: list[Any]) -> list[Any]:
        if not parts:
            raise ValueError("'input' must contain at least one part")
        return parts


# --- queue ---------------------------------------------------------------------


class QueuedTurnInput(WireModel):
    id: str
    thread_id: str
    native_input_parts: list[dict[str, Any]]
    materialized_input_parts: list[dict[str, Any]] = Field(default_factory=list)
    display_text: str
    sender: SenderContext | None = None
    status: Literal["queued", "guidancePending"] = "queued"
    created_at: str
    ready_after_turn_id: str | None = None


# --- params and results ---------------------------------------------------------


class TurnStartParams(_HasInput):
    thread_id: str
    sender: SenderContext | None = None
    messages: list[ChatMessage] | None = None


class TurnResult(WireModel):
    turn: Turn


class TurnInterruptParams(WireModel):
    thread_id: str
    turn_id: str


class TurnEnqueueParams(_HasInput):
    thread_id: str
    sender: SenderContext | None = None


class TurnEnqueueResult(WireModel):
    queued_input: QueuedTurnInput
    queued_inputs: list[QueuedTurnInput]


class TurnQueueRemoveParams(WireModel):
    thread_id: str
    queued_input_id: str


class QueuedInputsResult(WireModel):
    queued_inputs: list[QueuedTurnInput]


class TurnSteerParams(WireModel):
    thread_id: str
    expected_turn_id: str
    queued_input_id: str
    sender: SenderContext | None = None


class TurnSteerResult(WireModel):
    turn_id: str
    queued_inputs: list[QueuedTurnInput]


# --- notifications --------------------------------------------------------------


class TurnNotification(WireModel):
    # Every thread-scoped notification names its thread at the top of params,
    # so a client routes them all by `params.threadId`.
    thread_id: str
    turn: Turn


class TurnFailedNotification(WireModel):
    thread_id: str
    turn: Turn
    error: str


class TurnCancelledNotification(WireModel):
    thread_id: str
    turn: Turn
    reason: str


class ItemNotification(WireModel):
    thread_id: str
    turn_id: str
    item: Item


class DeltaNotification(WireModel):
    thread_id: str
    turn_id: str
    item_id: str
    delta: str
    delta_kind: str | None = None
    tool_name: str | None = None
    call_id: str | None = None


class UsageDeltaNotification(WireModel):
    thread_id: str
    turn_id: str
    input_tokens: int
    output_tokens: int
    total_input_tokens: int | None = None
    total_output_tokens: int | None = None


class QueueUpdatedNotification(WireModel):
    thread_id: str
    queued_inputs: list[QueuedTurnInput]


class ApprovalResolvedNotification(WireModel):
    thread_id: str
    turn_id: str
    item: Item


# --- server -> client requests ---------------------------------------------------

Decision = Literal["accept", "acceptForSession", "acceptAlways", "decline", "cancel"]


class ApprovalRequestParams(WireModel):
    thread_id: str
    turn_id: str
    item_id: str
    request_id: str
    approval_type: str
    operation: str
    target: str
    scope_key: str
    reason: str


class ApprovalRequestResult(WireModel):
    decision: Decision
