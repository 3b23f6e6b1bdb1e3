"""An ACP session: its seat at the runtime, its prompts and their permission
questions. Imported (through ``agent``) by ``command.main`` only.

A session is one thread. Its :class:`AcpSeat` is the origin of every turn
its prompts start, so it receives exactly those turns' events (turns other
clients run on the thread are not streamed), and it is the participant the
runtime asks about their gated tool calls: each question becomes one
``session/request_permission`` whose ``toolCall`` is the gated call, sent
after that call's ``tool_call`` update.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from acp import RequestError
from acp.schema import DeniedOutcome, PermissionOption, PromptResponse, StopReason, ToolCallUpdate
from pydantic import ValidationError

from appserver.faces.acp.events import CANCELLED, Tool, TurnUpdates, text_content
from appserver.faces.common import turn_id_of, wait_out_turn
from appserver.faces.seat import Seat
from appserver.protocol.turns import ApprovalRequestParams
from appserver.runtime.events import QuestionRefused, QuestionUnanswered

if TYPE_CHECKING:
    from acp.agent.connection import AgentSideConnection

    from appserver.faces.acp.workspaces import Place
    from appserver.protocol.base import WireModel
    from appserver.runtime.events import Event
    from appserver.runtime.host import Runtime
    from appserver.runtime.turns.model import ActiveTurn

log = logging.getLogger("appserver.faces.acp")

CHANNEL = "acp"
SESSION_NOT_FOUND = -32002  # ACP's "Resource not found"
INVALID_PARAMS = -32602
INVALID_REQUEST = -32600
INTERNAL_ERROR = -32603
TERMINAL = frozenset({"turn/completed", "turn/failed", "turn/cancelled"})
DELTAS = frozenset(
    {"item/agentMessage/delta", "item/reasoning/delta", "item/commandExecution/outputDelta"}
)
# Option id (= its kind) -> the runtime's decision.
DECISIONS = {
    "allow_once": "accept",
    "allow_always": "acceptForSession",
    "reject_once": "decline",
    "reject_always": "decline",
}
OPTIONS = [
    PermissionOption(option_id="allow_once", name="Allow", kind="allow_once"),
    PermissionOption(
        option_id="allow_always", name="Always allow in this session", kind="allow_always"
    ),
    PermissionOption(option_id="reject_once", name="Reject", kind="reject_once"),
    PermissionOption(
        option_id="reject_always", name="Always reject in this session", kind="reject_always"
    ),
]


def request_error(error_code: int, message: str, **data: Any) -> RequestError:
    return RequestError(error_code, message, data or None)


class SessionOwner(Protocol):
    """What a session needs from the agent that holds it (``agent.AcpAgent``)."""

    conn: AgentSideConnection | None
    closed: bool
    #: Waits until the client has read enough for more (a long replay).
    room: Callable[[], Awaitable[None]]

    @property
    def connected(self) -> bool:
        """The client is connected and can still be asked."""


class AcpSeat(Seat):
    """A session's participant: gets the events of the turns its prompts start
    and answers their approvals with ``session/request_permission``."""

    def __init__(self, session: Session) -> None:
        super().__init__(CHANNEL, topics_hidden=frozenset())  # wants command output too
        self.session = session

    def can_answer_approvals(self) -> bool:
        return not self.closed and self.session.agent.connected

    async def ask_approval(self, request: WireModel, timeout: float) -> str | Mapping[str, object]:
        if not isinstance(request, ApprovalRequestParams):
            raise QuestionRefused("not an approval request")
        return await self.session.ask(request, timeout)


def _wider_key(request: ApprovalRequestParams) -> str:
    """The key of the call's widest session scope (``scopeKey`` if none is wider)."""
    wider = [scope.scope_key for scope in request.session_scopes if scope.scope == "wider"]
    return wider[0] if wider else request.scope_key


class Session:
    """One ACP session (= one thread) of this connection."""

    def __init__(self, agent: SessionOwner, thread_id: str, place: Place) -> None:
        self.agent = agent
        self.id = thread_id
        # The workspace the thread lives in (of several, when clients name other cwds).
        self.runtime: Runtime = place.runtime
        self.workspace: Path = place.root
        self.seat = AcpSeat(self)
        self.run: PromptRun | None = None
        self.rejected: set[str] = set()  # scope keys answered "always reject"

    async def send(self, update: Any) -> None:
        conn = self.agent.conn
        if conn is None or self.agent.closed:
            return
        with contextlib.suppress(ConnectionError):  # the client left; the turn goes on
            await conn.session_update(session_id=self.id, update=update)

    async def replay(self) -> None:
        """The thread's history as ``session/update`` notifications."""
        repo = self.runtime.repo
        turns, _ = await repo.turns(self.id)
        stored = await repo.items(self.id, [turn.id for turn in turns])
        for turn in turns:
            updates = TurnUpdates(turn.id, self.workspace, replay=True)
            for item in stored[turn.id]:
                for update in updates.completed(item.type, item.id, item.payload):
                    await self.send(update)
                    await self.agent.room()  # a long history, at the client's pace
            if turn.status in ("cancelled", "failed"):
                why = f"Failed: {turn.error}" if turn.status == "failed" else CANCELLED
                for update in updates.unfinished(why):
                    await self.send(update)

    async def prompt(self, parts: list[Any]) -> PromptResponse:
        if self.run is not None:
            raise request_error(
                INVALID_REQUEST,
                f"session {self.id} is already running a prompt",
                sessionId=self.id,
            )
        run = self.run = PromptRun(self)
        try:
            return await run.execute(parts)
        finally:
            self.run = None

    async def cancel(self) -> None:
        if self.run is not None:
            await self.run.cancel()

    # --- approvals -----------------------------------------------------------------------

    async def ask(
        self, request: ApprovalRequestParams, timeout: float
    ) -> str | Mapping[str, object]:
        """``session/request_permission`` for one gated tool call; the decision.

        "Always" means the call's wider session scope (for a shell command:
        every command in that directory), as it did before shell grants
        defaulted to the exact command."""
        conn = self.agent.conn
        if conn is None or not self.agent.connected:
            raise QuestionRefused("the ACP client is gone")
        always_key = _wider_key(request)
        if always_key in self.rejected:
            return "decline"
        with anyio.move_on_after(timeout):
            run = self.run
            # The tool_call update goes out before the question about it.
            tool = await run.gated_call(request.item_id) if run is not None else None
            try:
                response = await conn.request_permission(
                    session_id=self.id, tool_call=self._tool_call(request, tool), options=OPTIONS
                )
            except RequestError as exc:
                raise QuestionRefused(str(exc)) from exc
            except ValidationError as exc:
                raise QuestionRefused(f"malformed permission answer: {exc}") from exc
            except ConnectionError as exc:
                # A stdio client never comes back: decline now rather than
                # wait out the reconnect grace.
                raise QuestionRefused(f"the ACP client is gone: {exc}") from exc
            outcome = response.outcome
            if isinstance(outcome, DeniedOutcome):
                return "cancel"
            decision = DECISIONS.get(outcome.option_id)
            if decision is None:
                log.warning("unknown permission option %r: declined", outcome.option_id)
                return "decline"
            if outcome.option_id == "reject_always":
                self.rejected.add(always_key)
            if outcome.option_id == "allow_always":
                return {"decision": decision, "scope": "wider"}
            return decision
        raise QuestionUnanswered(f"no answer within {timeout:g}s")

    def _tool_call(self, request: ApprovalRequestParams, tool: Tool | None) -> ToolCallUpdate:
        detail = (
            f"{request.reason}\n\n{request.approval_type} {request.operation}: {request.target}"
        )
        if tool is None:
            return ToolCallUpdate(
                tool_call_id=f"{request.turn_id}:{request.item_id}",
                title=f"{request.approval_type} {request.operation}",
                status="pending",
                content=[text_content(detail)],
            )
        workspace = self.workspace
        return ToolCallUpdate(
            tool_call_id=tool.id,
            title=tool.title(),
            kind=tool.kind,
            status="pending",
            content=[*tool.diff(workspace), text_content(detail)],
            locations=tool.locations(workspace),
            raw_input=tool.arguments or None,
        )


class PromptRun:
    """One ``session/prompt``: its turn and the updates it streams."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.turn_id: str | None = None
        self.updates: TurnUpdates | None = None
        self.cancelled = False
        self.waiting: anyio.CancelScope | None = None
        self._gates: dict[str, anyio.Event] = {}

    async def execute(self, parts: list[Any]) -> PromptResponse:
        active = await self._start(parts)
        if active is None:
            return PromptResponse(stop_reason="cancelled")
        self.turn_id = active.record.id
        self.updates = TurnUpdates(self.turn_id, self.session.workspace)
        if self.cancelled:  # session/cancel came while the turn was being stored
            await self._interrupt()
        return PromptResponse(stop_reason=await self._stream())

    async def _start(self, parts: list[Any]) -> ActiveTurn | None:
        """Start the turn, after a turn another client runs on the thread."""
        from appserver.runtime.errors import (
            InvalidInput,
            Refusal,
            ThreadNotActive,
            ThreadNotFound,
            TurnInProgress,
        )

        session = self.session
        runtime = session.runtime
        while not self.cancelled:
            try:
                return await runtime.turns.start(session.id, parts, origin=session.seat)
            except TurnInProgress:
                with anyio.CancelScope() as self.waiting:
                    await wait_out_turn(runtime, session.id)
                self.waiting = None
            except ThreadNotFound:
                raise request_error(
                    SESSION_NOT_FOUND, f"Session not found: {session.id}", sessionId=session.id
                ) from None
            except (ThreadNotActive, InvalidInput) as exc:
                raise request_error(INVALID_PARAMS, exc.message, sessionId=session.id) from None
            except Refusal as exc:
                raise request_error(INTERNAL_ERROR, exc.message, sessionId=session.id) from None
        return None

    async def cancel(self) -> None:
        self.cancelled = True
        if self.waiting is not None:
            self.waiting.cancel()
        if self.turn_id is not None:
            await self._interrupt()

    async def _interrupt(self) -> None:
        from appserver.faces.common import interrupt_quietly

        assert self.turn_id is not None
        await interrupt_quietly(self.session.runtime, self.session.id, self.turn_id)

    async def gated_call(self, item_id: str) -> Tool | None:
        """The call an ``approvalRequest`` item gates, once its updates went out."""
        await self._gates.setdefault(item_id, anyio.Event()).wait()
        return self.updates.gated.get(item_id) if self.updates is not None else None

    async def _stream(self) -> StopReason:
        """Send the turn's updates until it ends; its stop reason."""
        assert self.updates is not None
        updates = self.updates
        session = self.session
        while True:
            event = await session.seat.next_event()
            if turn_id_of(event) != self.turn_id:
                continue
            if event.kind in TERMINAL:
                return await self._finish(event)
            for update in _translate(updates, event):
                await session.send(update)
            if event.kind != "item/completed":
                continue
            item = getattr(event.params, "item", None)
            # An approvalRequest item: its call's tool_call went out, the question may follow.
            if item is not None and item.type == "approvalRequest":
                self._gates.setdefault(item.id, anyio.Event()).set()

    async def _finish(self, event: Event) -> StopReason:
        assert self.updates is not None and self.turn_id is not None
        updates = self.updates
        kind = event.kind
        if kind == "turn/completed":
            stop: StopReason = "end_turn"
            why = "The turn ended before the call finished."
        elif kind == "turn/cancelled":
            stop, why = "cancelled", CANCELLED
        else:
            error = str(getattr(event.params, "error", "") or "the turn failed")
            code = updates.failure_code or _failure_code(event)
            why = f"Failed: {error}"
            if self.cancelled:
                stop = "cancelled"
            elif code == "max_model_calls":
                stop = "max_turn_requests"
            else:
                for update in updates.unfinished(why):
                    await self.session.send(update)
                raise request_error(INTERNAL_ERROR, error, code=code, turnId=self.turn_id)
        for update in updates.unfinished(why):
            await self.session.send(update)
        return "cancelled" if self.cancelled else stop


def _translate(updates: TurnUpdates, event: Event) -> list[Any]:
    kind = event.kind
    if kind in DELTAS:
        return updates.delta(kind, *event.delta())
    item = getattr(event.params, "item", None)
    if item is None:
        return []
    if kind == "item/started":
        return updates.started(item.type, item.id, item.payload)
    if kind == "item/completed":
        return updates.completed(item.type, item.id, item.payload)
    return []


def _failure_code(event: Event) -> str | None:
    turn = getattr(event.params, "turn", None)
    for item in reversed(getattr(turn, "items", None) or []):
        if item.type == "error" and item.payload.get("fatal"):
            return str(item.payload.get("code") or "") or None
    return None
