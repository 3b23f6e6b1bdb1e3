"""Wire models for turns, items, the input queue and approvals."""

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from appserver.protocol.base import Flag, OpenWireModel, WireModel
from appserver.protocol.threads import Item, Turn

# --- input parts ---------------------------------------------------------------


class TextPart(WireModel):
    """Input part: plain text."""

    type: Literal["text"]
    """Always `text`."""
    text: str
    """The text."""


class FileRefPart(WireModel):
    """Input part: a reference to a file the agent should look at."""

    type: Literal["fileRef"]
    """Always `fileRef`."""
    path: str
    """The file, relative to the workspace or absolute."""
    display_path: str | None = None
    """How to show it."""


class LocalImagePart(WireModel):
    """Input part: an image file on the server's host."""

    type: Literal["localImage"]
    """Always `localImage`."""
    path: str
    """The image file on the server's host."""
    mime_type: str | None = None
    """Its MIME type; guessed from the name when absent."""
    file_name: str | None = None
    """Name to show."""


class ImageUrlPart(WireModel):
    """Input part: an image by URL."""

    type: Literal["image"]
    """Always `image`."""
    url: str
    """The image's URL (`https:` or `data:`)."""


class SkillRefPart(WireModel):
    """Input part: use a skill."""

    type: Literal["skillRef"]
    """Always `skillRef`."""
    name: str
    """The skill's name."""


class CommandRefPart(WireModel):
    """Input part: a custom slash command, expanded to its prompt."""

    type: Literal["commandRef"]
    """Always `commandRef`."""
    name: str
    """A custom command's name (built-in commands go through `command/execute`)."""
    args_text: str | None = None
    """Its arguments as typed."""
    raw_text: str | None = None
    """The whole text as typed, for display."""


InputPart = Annotated[
    TextPart | FileRefPart | LocalImagePart | ImageUrlPart | SkillRefPart | CommandRefPart,
    Field(discriminator="type"),
]


class SenderContext(WireModel):
    """Who sent an input (channels with several users)."""

    sender_id: str
    """The sender's id on the channel."""
    sender_name: str | None = None
    """The sender's name."""
    sender_role: str | None = None
    """The sender's role; `admin` may run admin-only commands."""
    group_id: str | None = None
    """The group chat it came from."""


class ChatMessage(OpenWireModel):
    """A client-supplied history message (``historyMode: "client"``).

    Accepts ``{role, content: str}`` and Microsoft.Extensions.AI's
    ``{role, contents: [{"$type": "text", text}]}``.
    """

    role: str
    """`system`, `user` or `assistant`."""
    content: str | None = None
    """The message's text."""
    contents: list[dict[str, Any]] | None = None
    """The message's parts, as `[{"$type": "text", "text": ...}]`."""

    def text(self) -> str:
        if self.content is not None:
            return self.content
        return "".join(
            str(part.get("text", "")) for part in self.contents or [] if isinstance(part, dict)
        )


class _HasInput(WireModel):
    input: list[InputPart]
    """The message: at least one part."""

    @field_validator("input")
    @classmethod
    def _non_empty(cls, parts: list[Any]) -> list[Any]:
        if not parts:
            raise ValueError("'input' must contain at least one part")
        return parts


# --- queue ---------------------------------------------------------------------


class QueuedTurnInput(WireModel):
    """An input waiting for the running turn to end (`turn/enqueue`)."""

    id: str
    """Its id (`queued_<timestamp>_<random>`)."""
    thread_id: str
    """The thread."""
    native_input_parts: list[dict[str, Any]]
    """The input parts as sent."""
    materialized_input_parts: list[dict[str, Any]] = Field(default_factory=list)
    """The input parts with command and skill references expanded."""
    display_text: str
    """The input as text, for display."""
    sender: SenderContext | None = None
    """Who sent it."""
    status: Literal["queued", "guidancePending"] = "queued"
    """`queued`, or `guidancePending` after `turn/steer` until the running turn takes it."""
    created_at: str
    """When it was queued, ISO 8601."""
    ready_after_turn_id: str | None = None
    """The turn it waits for."""


# --- params and results ---------------------------------------------------------


class TurnStartParams(_HasInput):
    thread_id: str
    """The thread."""
    sender: SenderContext | None = None
    """Who sends it."""
    messages: list[ChatMessage] | None = None
    """The conversation so far (threads with `historyMode: "client"`)."""


class TurnResult(WireModel):
    turn: Turn
    """The turn."""


class TurnInterruptParams(WireModel):
    thread_id: str
    """The thread."""
    turn_id: str
    """The running turn."""


class TurnEnqueueParams(_HasInput):
    thread_id: str
    """The thread."""
    sender: SenderContext | None = None
    """Who sends it."""


class TurnEnqueueResult(WireModel):
    queued_input: QueuedTurnInput
    """The queued input."""
    queued_inputs: list[QueuedTurnInput]
    """The whole queue as it is now."""


class TurnQueueRemoveParams(WireModel):
    thread_id: str
    """The thread."""
    queued_input_id: str
    """The queued input to remove."""


class QueuedInputsResult(WireModel):
    queued_inputs: list[QueuedTurnInput]
    """The whole queue as it is now."""


class TurnSteerParams(WireModel):
    thread_id: str
    """The thread."""
    expected_turn_id: str
    """The running turn; the call fails if another one runs."""
    queued_input_id: str
    """The queued input to hand to the running turn."""
    sender: SenderContext | None = None
    """Who steers."""


class TurnSteerResult(WireModel):
    turn_id: str
    """The running turn."""
    queued_inputs: list[QueuedTurnInput]
    """The whole queue as it is now."""


# --- notifications --------------------------------------------------------------


class TurnNotification(WireModel):
    # Every thread-scoped notification names its thread at the top of params,
    # so a client routes them all by `params.threadId`.
    """`turn/started` and `turn/completed`."""

    thread_id: str
    """The thread."""
    turn: Turn
    """The turn."""


class TurnFailedNotification(WireModel):
    thread_id: str
    """The thread."""
    turn: Turn
    """The turn as it ended."""
    error: str
    """Why it failed."""


class TurnCancelledNotification(WireModel):
    thread_id: str
    """The thread."""
    turn: Turn
    """The turn as it ended."""
    reason: str
    """Why it was cancelled (e.g. `turn/interrupt`)."""


class ItemNotification(WireModel):
    """`item/started` and `item/completed`."""

    thread_id: str
    """The thread."""
    turn_id: str
    """The turn."""
    item: Item
    """The item."""


class DeltaNotification(WireModel):
    """A streamed piece of an item's text (`item/*/delta`, `item/commandExecution/outputDelta`)."""

    thread_id: str
    """The thread."""
    turn_id: str
    """The turn."""
    item_id: str
    """The item the text belongs to."""
    delta: str
    """The next piece of text (never empty)."""
    delta_kind: str | None = None
    """`agentMessage`, `reasoningContent` or `toolCallArguments`; absent for command output."""
    tool_name: str | None = None
    """The tool being called (`toolCallArguments`, usually on the first piece only)."""
    call_id: str | None = None
    """The tool call's id (`toolCallArguments`, usually on the first piece only)."""


class UsageDeltaNotification(WireModel):
    thread_id: str
    """The thread."""
    turn_id: str
    """The turn."""
    input_tokens: int
    """Prompt tokens of this model call."""
    output_tokens: int
    """Completion tokens of this model call."""
    total_input_tokens: int | None = None
    """Prompt tokens of the turn so far."""
    total_output_tokens: int | None = None
    """Completion tokens of the turn so far."""


class QueuePause(WireModel):
    """Why the queue waits with no turn running: the turn before it ended
    without completing, and only a completed turn hands the thread on."""

    turn_id: str
    """The turn that ended."""
    reason: str
    """`interrupted`, `approvalCancelled` (its `turn/cancelled` reason) or `failed`."""


class QueueUpdatedNotification(WireModel):
    thread_id: str
    """The thread."""
    queued_inputs: list[QueuedTurnInput]
    """The whole queue as it is now."""
    paused: QueuePause | None = None
    """Set when the queue waits for the user after a turn that did not complete: its
    inputs start after the next completed turn, or at once on `turn/enqueue` (first in
    line first); `turn/queue/remove` drops them."""


class ApprovalResolvedNotification(WireModel):
    thread_id: str
    """The thread."""
    turn_id: str
    """The turn that asked."""
    item: Item
    """The `approvalResponse` item with the decision."""


class TurnDiffUpdatedNotification(WireModel):
    """`turn/diff/updated` (Codex's shape): the turn's file changes so far, as one diff."""

    thread_id: str
    """The thread."""
    turn_id: str
    """The turn."""
    diff: str
    """The unified diff of every file the turn changed: each file as it was before the turn's
    first change against its content now (a file changed twice is one diff; a file changed back
    is left out). Whole each time, not a delta; capped at 256 KiB."""


# --- item payloads ----------------------------------------------------------------


class FileChange(WireModel):
    """What one tool call applied to one file (`toolResult.changes`)."""

    path: str
    """The file, relative to the workspace (absolute outside it); for a move, its old name."""
    kind: Literal["add", "update", "delete", "move"]
    """`add` (created), `update`, `delete` or `move` (renamed, maybe changed too)."""
    diff: str
    """Unified diff of what was applied against the file as it was just before (git's headers;
    `/dev/null` for a new or deleted file). A file that cannot be diffed (binary, over 1 MiB)
    has a one-line note instead; a diff over 64 KiB is cut with a note."""
    move_path: str | None = None
    """For `move`: the file's new name."""


class ToolResultPayload(WireModel):
    """The payload of a `toolResult` item."""

    call_id: str
    """The tool call it answers (the `toolCall` item's `callId`)."""
    result: str
    """What the model is told."""
    success: Flag
    """Whether the call succeeded (a failure's reason is in `result`)."""
    changes: list[FileChange] | None = None
    """For file tools that changed files (`write_file`, `edit_file`, `apply_patch`): what
    each file got, as applied. The approval showed the proposed diff (`item/approval/request`
    `diff`); this is the real one."""


# Typed payloads of item types, in the schema as `x-itemPayloads` (Item.payload stays open).
ITEM_PAYLOADS: dict[str, type[WireModel]] = {"toolResult": ToolResultPayload}


# --- server -> client requests ---------------------------------------------------

Decision = Literal["accept", "acceptForSession", "acceptAlways", "decline", "cancel"]


class SessionScope(WireModel):
    """One thing an `acceptForSession` answer can cover (`item/approval/request`)."""

    scope: Literal["exact", "wider"]
    """`exact`: this very operation (the default); `wider`: more, as `description` says."""
    scope_key: str
    """The grant's key, as `scopeKey`."""
    description: str
    """What it covers, in words, for the prompt."""


class ApprovalSubAgent(WireModel):
    """The child thread an approval request comes from, and its parent."""

    child_thread_id: str
    """The child thread (the request's `threadId`)."""
    parent_thread_id: str
    """The thread whose turn spawned it."""
    root_thread_id: str
    """The user thread at the top of the tree."""
    agent_nickname: str | None = None
    """The child's nickname."""


class ApprovalRequestParams(WireModel):
    """A gated tool call waits for the client's approval (`item/approval/request`)."""

    thread_id: str
    """The thread."""
    turn_id: str
    """The turn that asks."""
    item_id: str
    """The `approvalRequest` item."""
    request_id: str
    """The approval's id (12 hex characters)."""
    approval_type: str
    """What needs approval: `shell`, `file` or a tool's kind."""
    operation: str
    """`shell`: the command; `file`: read, write, edit or list."""
    target: str
    """`shell`: the working directory; `file`: the path."""
    scope_key: str
    """What `acceptForSession` covers by default: the key of `sessionScopes[0]`."""
    reason: str
    """Why the agent wants to do it."""
    session_scopes: list[SessionScope] = Field(default_factory=list)
    """What `acceptForSession` can cover, the default first (`exact`); a shell command also
    offers `wider` (every command there), granted only when the answer's `scope` asks for it."""
    diff: str | None = None
    """For a file write or edit: a unified diff of the file as it is against what the call would
    write (a new file diffs against nothing). Absent for other approvals."""
    sub_agent: ApprovalSubAgent | None = None
    """A SubAgent child's request: which child and parent it belongs to (the parent turn's
    clients are asked too). Absent for a user thread."""


class ApprovalRequestResult(WireModel):
    """The client's answer to `item/approval/request`."""

    decision: Decision
    """`accept` (this once), `acceptForSession` (for the rest of the thread: `scope` says how
    much), `acceptAlways` (this exact operation, also in later sessions), `decline` (the agent
    is told no) or `cancel` (end the turn)."""
    scope: str | None = None
    """With `acceptForSession`: `exact` (default) or `wider`, one of `sessionScopes`. Any other
    value counts as `exact`."""
