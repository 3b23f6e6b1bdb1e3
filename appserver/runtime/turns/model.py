"""The turn's data: configuration, inputs, the running turn's state, failures."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup

from appserver.providers.base import Message
from appserver.runtime.emissions import Emission
from appserver.runtime.engine_config import EngineConfig as EngineConfig  # (its home)
from appserver.runtime.events import Participant
from appserver.runtime.turns.turn_diff import TurnDiff
from appserver.storage.records import ItemRecord, ThreadRecord, TurnRecord

if TYPE_CHECKING:
    from appserver.protocol import turns as turn_wire


class TurnFailure(Exception):
    """Ends the turn as ``turn/failed`` with this message (after an ``error`` item)."""

    def __init__(self, message: str, code: str = "turn_failed") -> None:
        super().__init__(message)
        self.code = code


@dataclass
class UserInput:
    """What starts a turn (or is injected as guidance)."""

    display_text: str
    native_parts: list[dict[str, Any]]
    materialized_parts: list[dict[str, Any]]
    images: list[dict[str, Any]]
    sender: turn_wire.SenderContext | None = None
    delivery_mode: str = "normal"
    client_history: list[Message] | None = None
    # Extra userMessage payload fields (triggerKind, triggerLabel, channelName, ...).
    extra: dict[str, Any] = field(default_factory=dict)
    # Extra system prompt text for this turn only (e.g. a referenced skill's body).
    instructions: list[str] = field(default_factory=list)


@dataclass
class QueuedInput:
    """A ``turn/enqueue`` entry (kept in SQLite; ``origin`` only in memory)."""

    wire: turn_wire.QueuedTurnInput
    images: list[dict[str, Any]]
    materialized: list[dict[str, Any]]
    origin: Participant | None = None
    instructions: list[str] = field(default_factory=list)  # e.g. a referenced skill's body

    def to_user_input(self, delivery_mode: str) -> UserInput:
        return UserInput(
            display_text=self.wire.display_text,
            native_parts=self.wire.native_input_parts,
            materialized_parts=self.materialized,
            images=self.images,
            sender=self.wire.sender,
            delivery_mode=delivery_mode,
            instructions=list(self.instructions),
        )


@dataclass
class ActiveTurn:
    """A running turn: its records, who started it, and its cancel scope."""

    thread: ThreadRecord
    record: TurnRecord
    origin: Participant | None
    items: list[ItemRecord] = field(default_factory=list)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    cancel_reason: str | None = None
    done: anyio.Event = field(default_factory=anyio.Event)
    tg: TaskGroup | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    next_item_seq: int = 0
    guidance: list[str] = field(default_factory=list)  # queued input ids to inject
    # Steered inputs that belong to this turn (Codex's turn/steer): the turn
    # answers them before it ends, and drops them if it does not (the client has
    # no queue for them to go back to).
    kept_guidance: set[str] = field(default_factory=set)
    # The agent loop has returned: no model call is left to take steered input.
    closing: bool = False
    # Streaming items (agent text, reasoning, tool-call arguments) not yet completed.
    open_items: dict[str, ItemRecord] = field(default_factory=dict)
    checkpoints: dict[str, float] = field(default_factory=dict)  # item id -> last save time
    instructions: list[str] = field(default_factory=list)  # extra system text for this turn
    # What the turn's file tools changed (turn/diff/updated); made at the first change.
    file_changes: TurnDiff | None = None
    # Lifecycle events held for the turn's next commit (turns/items.py): a model
    # call's usage, and the items its last response closes, go with the turn's end.
    held: list[Emission] = field(default_factory=list)
    # Something announces its own last word on this turn as it ends (SubAgent
    # progress): what the turn holds goes out first, in a commit of its own.
    announced_at_end: bool = False

    @property
    def thread_id(self) -> str:
        return self.thread.id

    @property
    def watchers(self) -> list[Participant]:
        """Participants that get this turn's events without subscribing."""
        return [self.origin] if self.origin is not None and not self.origin.closed else []

    def cancel(self, reason: str) -> None:
        if self.cancel_reason is None:
            self.cancel_reason = reason
        self.scope.cancel()

    def final_text(self) -> str:
        """The last agent message (what a channel or cron job reports)."""
        for item in reversed(self.items):
            if item.type == "agentMessage":
                return str(item.payload.get("text", ""))
        return ""


def initiator(
    thread: ThreadRecord, sender: turn_wire.SenderContext | None, origin: Participant | None
) -> dict[str, Any]:
    """The turn's ``initiator``: channel, and the sender or the starting client."""
    result: dict[str, Any] = {"channelName": thread.origin_channel}
    if sender is not None:
        result.update(
            {
                "userId": sender.sender_id,
                "userName": sender.sender_name,
                "userRole": sender.sender_role,
                "groupId": sender.group_id,
            }
        )
    elif origin is not None:
        result["userId"] = origin.name
    if thread.channel_context:
        result["channelContext"] = thread.channel_context
    return {key: value for key, value in result.items() if value is not None}
