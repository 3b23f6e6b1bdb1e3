"""The turn engine: one user input becomes a turn; the agent calls the model,
streams its answer, calls tools (pausing on approvals) and ends the turn.

A turn belongs to the server, not to the connection that started it: it runs
in the server's task group, every connection subscribed to the thread (plus
the one that started it) sees its events, and a vanished client changes
nothing but who can answer approvals.

Every turn ends with exactly one terminal notification — ``turn/completed``,
``turn/failed`` or ``turn/cancelled`` — on every path: provider error, tool
crash, interrupt, approval cancel, client gone, server shutdown. The
``_finish`` step runs shielded in a ``finally`` and is the only place a
terminal notification is emitted.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup

from appserver.protocol import threads as T
from appserver.protocol import turns as W
from appserver.protocol.base import WireModel
from appserver.providers.base import (
    Message,
    ModelRequest,
    Provider,
    ProviderError,
    ReasoningDelta,
    Stop,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolCallDone,
    Usage,
)
from appserver.rpc.connection import Connection
from appserver.runtime.approvals import ApprovalBroker, Verdict, scope_key
from appserver.runtime.history import messages_from_items
from appserver.runtime.ids import now_iso
from appserver.runtime.journal import ThreadJournal
from appserver.runtime.state import RuntimeStates
from appserver.runtime.wire import item_to_wire, turn_to_wire
from appserver.storage.threads import (
    ItemRecord,
    ThreadRecord,
    ThreadRepository,
    TurnRecord,
)
from appserver.tools.base import ApprovalNeed, ToolContext, ToolError, ToolOutcome
from appserver.tools.registry import ToolRegistry

log = logging.getLogger("appserver.turns")

DEFAULT_SYSTEM_PROMPT = (
    "You are a coding agent working in the user's workspace. Use the tools to inspect and "
    "change files and to run commands. Be concise."
)

DELTA_METHODS = {
    "agentMessage": ("item/agentMessage/delta", "agentMessage"),
    "reasoningContent": ("item/reasoning/delta", "reasoningContent"),
}


class TurnFailure(Exception):
    """Ends the turn as ``turn/failed`` with this message (after an ``error`` item)."""

    def __init__(self, message: str, code: str = "turn_failed") -> None:
        super().__init__(message)
        self.code = code


@dataclass
class EngineConfig:
    """Tunables of the turn engine."""

    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    max_model_calls: int = 32
    approval_timeout: float = 120.0
    reconnect_grace: float = 15.0
    checkpoint_interval: float = 0.5  # how often streaming text is saved for crash recovery
    shutdown_grace: float = 5.0


@dataclass
class QueuedInput:
    """A ``turn/enqueue`` entry (kept in SQLite; ``origin`` only in memory)."""

    wire: W.QueuedTurnInput
    images: list[dict[str, Any]]
    materialized: list[dict[str, Any]]
    origin: Connection | None = None
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
class UserInput:
    """What starts a turn (or is injected as guidance)."""

    display_text: str
    native_parts: list[dict[str, Any]]
    materialized_parts: list[dict[str, Any]]
    images: list[dict[str, Any]]
    sender: W.SenderContext | None = None
    delivery_mode: str = "normal"
    client_history: list[Message] | None = None
    # Extra userMessage payload fields (triggerKind, triggerLabel, channelName, ...).
    extra: dict[str, Any] = field(default_factory=dict)
    # Extra system prompt text for this turn only (e.g. a referenced skill's body).
    instructions: list[str] = field(default_factory=list)


@dataclass
class ActiveTurn:
    thread: ThreadRecord
    record: TurnRecord
    origin: Connection | None
    items: list[ItemRecord] = field(default_factory=list)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    cancel_reason: str | None = None
    done: anyio.Event = field(default_factory=anyio.Event)
    released: anyio.Event = field(default_factory=anyio.Event)
    tg: TaskGroup | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    next_item_seq: int = 0
    guidance: list[str] = field(default_factory=list)  # queued input ids to inject
    # Streaming items (agent text, reasoning, tool-call arguments) not yet completed.
    open_items: dict[str, ItemRecord] = field(default_factory=dict)
    checkpoints: dict[str, float] = field(default_factory=dict)  # item id -> last save time
    instructions: list[str] = field(default_factory=list)  # extra system text for this turn

    @property
    def thread_id(self) -> str:
        return self.thread.id

    @property
    def watchers(self) -> list[Connection]:
        """Connections that get this turn's events without subscribing."""
        return [self.origin] if self.origin is not None and not self.origin.closed else []

    def cancel(self, reason: str) -> None:
        if self.cancel_reason is None:
            self.cancel_reason = reason
        self.scope.cancel()


class TurnEngine:
    """Runs turns; one active turn per thread."""

    def __init__(
        self,
        repo: ThreadRepository,
        journal: ThreadJournal,
        runtimes: RuntimeStates,
        approvals: ApprovalBroker,
        tools: ToolRegistry,
        provider: Provider,
        workspace: Path,
        config: EngineConfig | None = None,
        default_approval_policy: Callable[[], str] = lambda: "default",
    ) -> None:
        self.repo = repo
        self.journal = journal
        self.runtimes = runtimes
        self.approvals = approvals
        self.tools = tools
        self.provider = provider
        self.workspace = workspace
        self.config = config or EngineConfig()
        self.default_approval_policy = default_approval_policy
        self.active: dict[str, ActiveTurn] = {}
        self.queues: dict[str, list[QueuedInput]] = {}
        self._tg: TaskGroup | None = None
        # Called with every finished turn (after its terminal notification).
        self.turn_listeners: list[Callable[[ActiveTurn], Any]] = []

    # --- lifecycle ---------------------------------------------------------------

    async def run(
        self, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Own the task group turns run in; returns when cancelled."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            task_status.started()
            await anyio.sleep_forever()

    async def shutdown(self) -> None:
        """Cancel every running turn (``turn/cancelled`` reason ``serverShutdown``)."""
        turns = list(self.active.values())
        for active in turns:
            active.released.set()
            active.cancel("serverShutdown")
        with anyio.move_on_after(self.config.shutdown_grace):
            for active in turns:
                await active.done.wait()

    # --- starting ------------------------------------------------------------------

    def begin(self, thread: ThreadRecord, origin: Connection | None, user: UserInput) -> ActiveTurn:
        """Reserve the thread for a new turn and schedule it.

        Synchronous on purpose: the caller checked the thread is idle, and no
        other request can slip in between the check and this reservation.
        The turn waits for :meth:`release` (called right after the response
        is queued) so ``turn/started`` always follows the ``turn/start`` response.
        """
        assert self._tg is not None, "engine is not running"
        assert thread.id not in self.active
        seq = thread.turn_serial + 1
        thread.turn_serial = seq
        record = TurnRecord(
            thread_id=thread.id,
            id=f"turn_{seq:03d}",
            seq=seq,
            status="running",
            started_at=now_iso(),
            origin_channel=thread.origin_channel,
            initiator=_initiator(thread, user.sender, origin),
        )
        active = ActiveTurn(thread=thread, record=record, origin=origin)
        active.next_item_seq = thread.item_serial
        self.active[thread.id] = active
        self._tg.start_soon(self._run_turn, active, user)
        return active

    async def run_turn(self, thread: ThreadRecord, user: UserInput) -> ActiveTurn:
        """Start a turn with no client behind it (cron, heartbeat) and wait for
        its end. Raises ``RuntimeError`` if the thread already runs a turn."""
        if thread.id in self.active:
            raise RuntimeError(f"a turn is already running on {thread.id}")
        active = self.begin(thread, None, user)
        active.released.set()
        await active.done.wait()
        return active

    def final_text(self, active: ActiveTurn) -> str:
        """The last agent message of a turn (what a channel or cron job reports)."""
        for item in reversed(active.items):
            if item.type == "agentMessage":
                return str(item.payload.get("text", ""))
        return ""

    def turn_wire(self, active: ActiveTurn, include_items: bool = True) -> T.Turn:
        return turn_to_wire(active.record, active.items if include_items else [])

    # --- the turn ----------------------------------------------------------------------

    async def _run_turn(self, active: ActiveTurn, user: UserInput) -> None:
        try:
            # Wait until the turn/start response is queued (bounded: never hang).
            with anyio.move_on_after(5):
                await active.released.wait()
            async with anyio.create_task_group() as tg:
                active.tg = tg  # approval requests run here
                try:
                    with active.scope:
                        await self._start(active)
                        await self._add_user_message(active, user)
                        await self._agent_loop(active, user)
                        active.record.status = "completed"
                except TurnFailure as exc:
                    await self._fail(active, str(exc), exc.code)
                except Exception as exc:
                    log.exception("turn %s on %s crashed", active.record.id, active.thread_id)
                    await self._fail(active, f"internal error: {type(exc).__name__}", "internal")
                finally:
                    tg.cancel_scope.cancel()  # stop approval askers still waiting
        finally:
            with anyio.CancelScope(shield=True):
                await self._finish(active)

    async def _fail(self, active: ActiveTurn, message: str, code: str) -> None:
        active.record.status = "failed"
        active.record.error = message
        with anyio.CancelScope(shield=True):
            try:
                await self._error_item(active, message, code, fatal=True)
            except Exception:
                log.exception("could not record the failure of %s", active.record.id)

    async def _start(self, active: ActiveTurn) -> None:
        await self.runtimes.set_running(active.thread_id, True)
        await self.journal.emit(
            active.thread_id,
            "turn/started",
            W.TurnNotification(turn=self.turn_wire(active)),
            include=active.watchers,
            turn=active.record,
            new_turn=True,
        )

    async def _finish(self, active: ActiveTurn) -> None:
        """Close open items, persist, emit the one terminal notification."""
        try:
            record = active.record
            if record.status == "running":
                record.status = "cancelled"  # the scope was cancelled (interrupt, shutdown)
            for item in list(active.open_items.values()):
                await self._complete_item(active, item)  # keep the text streamed so far
            record.completed_at = now_iso()
            record.token_usage = {
                "inputTokens": active.input_tokens,
                "outputTokens": active.output_tokens,
                "totalTokens": active.input_tokens + active.output_tokens,
            }
            # One frame goes to every watcher, so leave out the opt-in item type:
            # clients that asked for commandExecution items got them as events.
            turn = turn_to_wire(
                active.record, [i for i in active.items if i.type != "commandExecution"]
            )
            params: WireModel
            if record.status == "completed":
                method, params = "turn/completed", W.TurnNotification(turn=turn)
            elif record.status == "failed":
                method = "turn/failed"
                params = W.TurnFailedNotification(turn=turn, error=record.error or "failed")
            else:
                reason = active.cancel_reason or "interrupted"
                method, params = (
                    "turn/cancelled",
                    W.TurnCancelledNotification(turn=turn, reason=reason),
                )
            await self.journal.emit(
                active.thread_id, method, params, include=active.watchers, turn=record
            )
        except Exception:
            log.exception("could not finish turn %s", active.record.id)
        finally:
            self.active.pop(active.thread_id, None)
            try:
                await self.journal.flush_seq(active.thread_id)
                await self.runtimes.set_running(active.thread_id, False)
                if active.guidance:
                    # Steered inputs the turn never reached go back to the queue.
                    for entry in self.queues.get(active.thread_id, []):
                        if entry.wire.id in active.guidance:
                            entry.wire.status = "queued"
                    active.guidance.clear()
                    await self.queue_changed(active.thread_id, include=active.watchers)
            except Exception:
                log.exception("could not clear runtime state of %s", active.thread_id)
            active.done.set()
            if active.record.status == "completed" and self._tg is not None:
                self._tg.start_soon(self._after_success, active.thread_id)
            for listener in self.turn_listeners:
                try:
                    outcome = listener(active)
                    if outcome is not None and self._tg is not None:
                        self._tg.start_soon(_await, outcome)
                except Exception:
                    log.exception("turn listener failed")

    # --- items -------------------------------------------------------------------------

    def _new_item(self, active: ActiveTurn, kind: str, payload: dict[str, Any]) -> ItemRecord:
        active.next_item_seq += 1
        item = ItemRecord(
            thread_id=active.thread_id,
            turn_id=active.record.id,
            id=f"item_{active.next_item_seq:03d}",
            seq=active.next_item_seq,
            type=kind,
            status="started",
            created_at=now_iso(),
            payload=payload,
        )
        active.items.append(item)
        return item

    def _topic(self, item: ItemRecord) -> str | None:
        # commandExecution items only reach clients that asked for them.
        return "item:commandExecution" if item.type == "commandExecution" else None

    async def _start_item(self, active: ActiveTurn, item: ItemRecord) -> None:
        await self._emit_item(active, "item/started", item)

    async def _complete_item(self, active: ActiveTurn, item: ItemRecord) -> None:
        item.status = "completed"
        item.completed_at = now_iso()
        active.open_items.pop(item.id, None)
        await self._emit_item(active, "item/completed", item)

    async def _emit_item(self, active: ActiveTurn, method: str, item: ItemRecord) -> None:
        """Store the item and announce it (stored first: read-your-writes)."""
        await self.journal.emit(
            active.thread_id,
            method,
            W.ItemNotification(
                thread_id=active.thread_id, turn_id=active.record.id, item=item_to_wire(item)
            ),
            include=active.watchers,
            topic=self._topic(item),
            item=item,
        )

    async def _instant_item(
        self, active: ActiveTurn, kind: str, payload: dict[str, Any], between: Any = None
    ) -> ItemRecord:
        """An item created already complete (user message, approvals, errors)."""
        item = self._new_item(active, kind, payload)
        item.status = "completed"
        item.completed_at = item.created_at
        await self._start_item(active, item)
        if between is not None:
            await between(item)
        await self._complete_item(active, item)
        return item

    async def _error_item(self, active: ActiveTurn, message: str, code: str, fatal: bool) -> None:
        await self._instant_item(
            active, "error", {"message": message, "code": code, "fatal": fatal}
        )

    async def _add_user_message(self, active: ActiveTurn, user: UserInput) -> None:
        payload: dict[str, Any] = {
            "text": user.display_text,
            "deliveryMode": user.delivery_mode,
            "nativeInputParts": user.native_parts,
            "materializedInputParts": user.materialized_parts,
        }
        if user.images:
            payload["images"] = user.images
        payload.update(user.extra)
        if user.sender is not None:
            payload.update(
                {
                    "senderId": user.sender.sender_id,
                    "senderName": user.sender.sender_name,
                    "senderRole": user.sender.sender_role,
                    "groupId": user.sender.group_id,
                }
            )
            payload = {key: value for key, value in payload.items() if value is not None}
        await self._instant_item(active, "userMessage", payload)

    async def _delta(self, active: ActiveTurn, item: ItemRecord, text: str) -> None:
        """Append streamed text to an open item and send the delta."""
        if not text:
            return  # empty deltas are never sent
        payload_key = "text"
        item.payload[payload_key] = str(item.payload.get(payload_key, "")) + text
        item.status = "streaming"
        method, kind = DELTA_METHODS[item.type]
        await self.journal.emit_delta(
            active.thread_id,
            item.id,
            method,
            W.DeltaNotification(
                thread_id=active.thread_id,
                turn_id=active.record.id,
                item_id=item.id,
                delta=text,
                delta_kind=kind,
            ),
            include=active.watchers,
        )
        await self._maybe_checkpoint(active, item)

    async def _maybe_checkpoint(self, active: ActiveTurn, item: ItemRecord) -> None:
        # Streaming text is saved now and then (not per delta) so a crash loses
        # at most `checkpoint_interval` seconds of it.
        now = anyio.current_time()
        last = active.checkpoints.setdefault(item.id, now)
        if now - last >= self.config.checkpoint_interval:
            active.checkpoints[item.id] = now
            await self.repo.save_item(item)

    # --- the agent loop ------------------------------------------------------------------

    async def _agent_loop(self, active: ActiveTurn, user: UserInput) -> None:
        active.instructions = list(user.instructions)
        history = await self._history(active, user)
        for _ in range(self.config.max_model_calls):
            await self._take_guidance(active, history)
            calls = await self._model_call(active, history)
            if not calls:
                return
            for call in calls:
                await self._tool_call(active, call, history)
        raise TurnFailure(
            f"the agent made {self.config.max_model_calls} model calls without finishing",
            "max_model_calls",
        )

    async def _history(self, active: ActiveTurn, user: UserInput) -> list[Message]:
        if user.client_history is not None:
            history = list(user.client_history)
        else:
            turns, _ = await self.repo.turns(active.thread_id)
            prior = [turn.id for turn in turns if turn.id != active.record.id]
            stored = await self.repo.items(active.thread_id, prior)
            history = messages_from_items(item for turn_id in prior for item in stored[turn_id])
        history.extend(messages_from_items(active.items))
        return history

    async def _take_guidance(self, active: ActiveTurn, history: list[Message]) -> None:
        """Steered inputs join the running turn at this safe boundary."""
        if not active.guidance:
            return
        queue = self.queues.get(active.thread_id, [])
        for entry_id in active.guidance:
            entry = next((e for e in queue if e.wire.id == entry_id), None)
            if entry is None:
                continue
            queue.remove(entry)
            active.instructions.extend(entry.instructions)
            await self._add_user_message(active, entry.to_user_input("guidance"))
            history.extend(messages_from_items(active.items[-1:]))
        active.guidance.clear()
        await self.queue_changed(active.thread_id, include=active.watchers)

    async def _model_call(self, active: ActiveTurn, history: list[Message]) -> list[ToolCall]:
        config = active.thread.configuration or {}
        system = self.config.system_prompt
        if config.get("agentInstructions"):
            system += "\n\n" + str(config["agentInstructions"])
        for extra in active.instructions:
            system += "\n\n" + extra
        request = ModelRequest(
            model=str(config.get("model") or self.provider.default_model),
            messages=history,
            system=system,
            tools=self.tools.specs(),
        )
        text_item: ItemRecord | None = None
        reasoning_item: ItemRecord | None = None
        call_items: dict[int, ItemRecord] = {}
        calls: list[ToolCall] = []
        # aclosing: leaving early (interrupt, error) closes the HTTP stream at once.
        async with contextlib.aclosing(self.provider.stream(request)) as events:
            async for event in events:
                if isinstance(event, TextDelta):
                    if text_item is None:
                        text_item = await self._open_item(active, "agentMessage", {"text": ""})
                    await self._delta(active, text_item, event.text)
                elif isinstance(event, ReasoningDelta):
                    if reasoning_item is None:
                        reasoning_item = await self._open_item(
                            active, "reasoningContent", {"text": ""}
                        )
                    await self._delta(active, reasoning_item, event.text)
                elif isinstance(event, ToolCallDelta):
                    item = call_items.get(event.index)
                    if item is None:
                        item = await self._open_item(
                            active,
                            "toolCall",
                            {
                                "toolName": event.name or "",
                                "callId": event.call_id or "",
                                "arguments": {},
                            },
                        )
                        call_items[event.index] = item
                    await self._arguments_delta(active, item, event)
                elif isinstance(event, ToolCallDone):
                    item = call_items.get(event.index)
                    if item is None:
                        item = self._new_item(active, "toolCall", {})
                        await self._start_item(active, item)
                    item.payload = {
                        "toolName": event.call.name,
                        "callId": event.call.call_id,
                        "arguments": event.call.arguments,
                    }
                    if event.arguments_error:
                        item.payload["argumentsError"] = event.arguments_error
                    await self._complete_item(active, item)
                    calls.append(event.call)
                elif isinstance(event, Usage):
                    await self._usage(active, event)
                elif isinstance(event, ProviderError):
                    raise TurnFailure(
                        f"model provider error ({event.kind}): {event.message}",
                        f"provider_{event.kind}",
                    )
                elif isinstance(event, Stop):
                    break
        for item in (reasoning_item, text_item):
            if item is not None and item.id in active.open_items:
                await self._complete_item(active, item)
        text = str(text_item.payload.get("text", "")) if text_item is not None else ""
        if text or calls:
            # Text and tool calls of one response are one assistant message.
            history.append(Message("assistant", text, tool_calls=list(calls)))
        return calls

    async def _open_item(
        self, active: ActiveTurn, kind: str, payload: dict[str, Any]
    ) -> ItemRecord:
        item = self._new_item(active, kind, payload)
        active.open_items[item.id] = item
        await self._start_item(active, item)
        return item

    async def _arguments_delta(
        self, active: ActiveTurn, item: ItemRecord, event: ToolCallDelta
    ) -> None:
        if event.name and not item.payload.get("toolName"):
            item.payload["toolName"] = event.name
        if event.call_id and not item.payload.get("callId"):
            item.payload["callId"] = event.call_id
        if not event.arguments_delta:
            return
        item.status = "streaming"
        await self.journal.emit_delta(
            active.thread_id,
            item.id,
            "item/toolCall/argumentsDelta",
            W.DeltaNotification(
                thread_id=active.thread_id,
                turn_id=active.record.id,
                item_id=item.id,
                delta=event.arguments_delta,
                delta_kind="toolCallArguments",
                tool_name=event.name,
                call_id=event.call_id,
            ),
            include=active.watchers,
        )

    async def _usage(self, active: ActiveTurn, usage: Usage) -> None:
        active.input_tokens += usage.input_tokens
        active.output_tokens += usage.output_tokens
        await self.journal.emit(
            active.thread_id,
            "item/usage/delta",
            W.UsageDeltaNotification(
                thread_id=active.thread_id,
                turn_id=active.record.id,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                total_input_tokens=active.input_tokens,
                total_output_tokens=active.output_tokens,
            ),
            include=active.watchers,
        )

    # --- tools ------------------------------------------------------------------------------

    async def _tool_call(self, active: ActiveTurn, call: ToolCall, history: list[Message]) -> None:
        outcome = await self._run_tool(active, call)
        await self._instant_item(
            active,
            "toolResult",
            {"callId": call.call_id, "result": outcome.output, "success": outcome.success},
        )
        history.append(
            Message("tool", outcome.output, tool_call_id=call.call_id, tool_name=call.name)
        )

    async def _run_tool(self, active: ActiveTurn, call: ToolCall) -> ToolOutcome:
        tool = self.tools.get(call.name)
        if tool is None:
            return ToolOutcome(False, f"Error: unknown tool '{call.name}'")
        ctx = ToolContext(
            workspace=self.workspace,
            thread_id=active.thread_id,
            turn_id=active.record.id,
            call_id=call.call_id,
        )
        try:
            plan = tool.plan(call.arguments, ctx)
        except ToolError as exc:
            return ToolOutcome(False, f"Error: {exc}")
        if plan.approval is not None:
            verdict = await self._approve(active, plan.approval)
            if verdict.decision == "cancel":
                active.cancel("approvalCancelled")
                await anyio.lowlevel.checkpoint()  # the cancelled scope raises here
            if not verdict.approved:
                why = verdict.fallback or "the user declined"
                return ToolOutcome(False, f"Declined: {why}.")
        if call.name == "shell":
            return await self._run_shell(active, tool, plan, ctx)
        try:
            return await tool.run(plan, ctx)
        except ToolError as exc:
            return ToolOutcome(False, f"Error: {exc}")
        except Exception as exc:
            log.exception("tool %s crashed", call.name)
            return ToolOutcome(False, f"Error: the tool crashed ({type(exc).__name__})")

    async def _run_shell(
        self, active: ActiveTurn, tool: Any, plan: Any, ctx: ToolContext
    ) -> ToolOutcome:
        """Shell runs with a ``commandExecution`` companion item and output deltas."""
        item = await self._open_item(
            active,
            "commandExecution",
            {
                "command": plan.arguments.get("command", ""),
                "workingDirectory": plan.approval.target if plan.approval else str(self.workspace),
                "source": "host",
                "status": "inProgress",
                "aggregatedOutput": "",
                "callId": ctx.call_id,
            },
        )
        send, receive = anyio.create_memory_object_stream[str](1024)
        ctx.on_output = lambda chunk: _offer(send, chunk)

        async def forward() -> None:
            async with receive:
                async for chunk in receive:
                    item.payload["aggregatedOutput"] += chunk
                    await self.journal.emit_delta(
                        active.thread_id,
                        item.id,
                        "item/commandExecution/outputDelta",
                        W.DeltaNotification(
                            thread_id=active.thread_id,
                            turn_id=active.record.id,
                            item_id=item.id,
                            delta=chunk,
                        ),
                        include=active.watchers,
                        topic="item:commandExecution",
                    )

        outcome: ToolOutcome | None = None
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(forward)
                try:
                    outcome = await tool.run(plan, ctx)
                except ToolError as exc:
                    outcome = ToolOutcome(False, f"Error: {exc}")
                except Exception as exc:
                    if isinstance(exc, anyio.get_cancelled_exc_class()):
                        raise
                    log.exception("shell tool crashed")
                    outcome = ToolOutcome(False, f"Error: the tool crashed ({type(exc).__name__})")
                finally:
                    send.close()
        finally:
            details = outcome.details if outcome else {}
            item.payload["status"] = (
                "completed"
                if outcome and outcome.success
                else ("failed" if outcome else "cancelled")
            )
            for key, wire in (
                ("exit_code", "exitCode"),
                ("duration_ms", "durationMs"),
                ("truncated", "truncated"),
                ("original_output_chars", "originalOutputChars"),
            ):
                if key in details:
                    item.payload[wire] = details[key]
            if outcome is not None:
                with anyio.CancelScope(shield=True):
                    await self._complete_item(active, item)
        assert outcome is not None  # otherwise the cancellation propagated
        return outcome

    async def _approve(self, active: ActiveTurn, need: ApprovalNeed) -> Verdict:
        config = active.thread.configuration or {}
        policy = str(config.get("approvalPolicy") or "default")
        if policy == "default":
            policy = self.default_approval_policy()
        require_outside = config.get("requireApprovalOutsideWorkspace")
        verdict = await self.approvals.precheck(
            active.thread_id, need, policy, require_outside is not False
        )
        if verdict is None:
            verdict = await self._ask(active, need, policy)
        elif verdict.fallback and verdict.decision == "decline":
            await self._error_item(active, verdict.fallback, verdict.fallback_code or "", False)
        return verdict

    async def _ask(self, active: ActiveTurn, need: ApprovalNeed, policy: str) -> Verdict:
        request_id = self.approvals.new_request_id()
        key = scope_key(need)
        request_item = await self._instant_item(
            active,
            "approvalRequest",
            {
                "approvalType": need.kind,
                "operation": need.operation,
                "target": need.target,
                "requestId": request_id,
                "scopeKey": key,
                "reason": need.reason,
            },
        )
        active.record.status = "waitingApproval"
        await self.repo.save_turn(active.record)
        await self.runtimes.approval_pending(active.thread_id, +1)
        params = W.ApprovalRequestParams(
            thread_id=active.thread_id,
            turn_id=active.record.id,
            item_id=request_item.id,
            request_id=request_id,
            approval_type=need.kind,
            operation=need.operation,
            target=need.target,
            scope_key=key,
            reason=need.reason,
        )
        askers = list(self.journal.bus.subscribers(active.thread_id)) + active.watchers
        assert active.tg is not None
        try:
            verdict = await self.approvals.ask(
                params,
                [c for c in dict.fromkeys(askers) if isinstance(c, Connection)],
                active.tg,
                policy,
            )
        finally:
            with anyio.CancelScope(shield=True):
                if active.record.status == "waitingApproval":
                    active.record.status = "running"
                    await self.repo.save_turn(active.record)
                await self.runtimes.approval_pending(active.thread_id, -1)
        if verdict.fallback:
            await self._error_item(active, verdict.fallback, verdict.fallback_code or "", False)
        await self.approvals.remember(active.thread_id, need, verdict.decision, now_iso())
        await self._record_response(active, request_id, verdict)
        return verdict

    async def _record_response(self, active: ActiveTurn, request_id: str, verdict: Verdict) -> None:
        async def resolved(item: ItemRecord) -> None:
            await self.journal.emit(
                active.thread_id,
                "item/approval/resolved",
                W.ApprovalResolvedNotification(
                    thread_id=active.thread_id, turn_id=active.record.id, item=item_to_wire(item)
                ),
                include=active.watchers,
            )

        await self._instant_item(
            active,
            "approvalResponse",
            {"requestId": request_id, "approved": verdict.approved, "decision": verdict.decision},
            between=resolved,
        )

    # --- interrupt, queue, steer -------------------------------------------------------------

    def interrupt(self, thread_id: str) -> ActiveTurn | None:
        """Cancel the thread's running turn (idempotent); ``turn/cancelled`` follows."""
        active = self.active.get(thread_id)
        if active is not None:
            active.released.set()
            active.cancel("interrupted")
        return active

    def forget_thread(self, thread_id: str) -> None:
        self.queues.pop(thread_id, None)
        self.approvals.forget_thread(thread_id)

    async def cancel_and_wait(self, thread_id: str, reason: str) -> None:
        active = self.active.get(thread_id)
        if active is not None:
            active.released.set()
            active.cancel(reason)
            with anyio.move_on_after(self.config.shutdown_grace):
                await active.done.wait()

    async def load_queue(self, thread_id: str) -> list[QueuedInput]:
        queue = self.queues.get(thread_id)
        if queue is None:
            queue = []
            for row in await self.journal.events.queue(thread_id):
                queue.append(
                    QueuedInput(
                        wire=W.QueuedTurnInput.model_validate(row["wire"]),
                        images=list(row.get("images") or []),
                        materialized=list(row.get("materialized") or []),
                        instructions=list(row.get("instructions") or []),
                    )
                )
            self.queues[thread_id] = queue
        return queue

    async def enqueue(self, thread: ThreadRecord, entry: QueuedInput) -> list[QueuedInput]:
        """Queue an input; an idle thread starts it right away."""
        queue = await self.load_queue(thread.id)
        queue.append(entry)
        await self.queue_changed(thread.id, include=[entry.origin] if entry.origin else [])
        if thread.id not in self.active:
            await self.start_next(thread)
        return queue

    async def start_next(self, thread: ThreadRecord) -> ActiveTurn | None:
        """Start the first queued input as a new turn, if the thread is idle and active."""
        if thread.id in self.active or thread.status != "active":
            return None
        queue = await self.load_queue(thread.id)
        entry = next((e for e in queue if e.wire.status == "queued"), None)
        if entry is None or thread.id in self.active:
            return None
        queue.remove(entry)
        active = self.begin(thread, entry.origin, entry.to_user_input("queued"))
        active.released.set()
        await self.queue_changed(thread.id, include=active.watchers)
        return active

    async def _after_success(self, thread_id: str) -> None:
        """A completed turn hands the thread to the next queued input."""
        try:
            thread = await self.repo.get(thread_id)
            if thread is not None:
                await self.start_next(thread)
        except Exception:
            log.exception("could not start the next queued input of %s", thread_id)

    async def queue_changed(self, thread_id: str, include: list[Connection] | None = None) -> None:
        entries = self.queues.get(thread_id, [])
        await self.journal.events.save_queue(
            thread_id,
            [
                (
                    entry.wire.id,
                    {
                        "wire": entry.wire.to_wire(),
                        "images": entry.images,
                        "materialized": entry.materialized,
                        "instructions": entry.instructions,
                    },
                )
                for entry in entries
            ],
        )
        await self.journal.emit(
            thread_id,
            "thread/queue/updated",
            W.QueueUpdatedNotification(
                thread_id=thread_id, queued_inputs=[entry.wire for entry in entries]
            ),
            include=include or [],
        )

    # --- crash recovery ----------------------------------------------------------------------

    async def recover(self) -> int:
        """Fail turns a previous process left running; returns how many.

        Items still streaming are completed with the text saved so far;
        completed items were stored as they completed, so nothing is lost.
        """
        events = self.journal.events
        recovered = 0
        for turn in await events.unfinished_turns():
            now = now_iso()
            for item in await events.unfinished_items(turn.thread_id, turn.id):
                item.status = "completed"
                item.completed_at = now
                await self.journal.emit(
                    turn.thread_id,
                    "item/completed",
                    W.ItemNotification(
                        thread_id=turn.thread_id, turn_id=turn.id, item=item_to_wire(item)
                    ),
                    item=item,
                )
            turn.status = "failed"
            turn.completed_at = now
            turn.error = (
                "The server stopped while this turn was running; "
                "it was marked failed when the server started again."
            )
            items = (await self.repo.items(turn.thread_id, [turn.id]))[turn.id]
            await self.journal.emit(
                turn.thread_id,
                "turn/failed",
                W.TurnFailedNotification(turn=turn_to_wire(turn, items), error=turn.error),
                turn=turn,
            )
            recovered += 1
        if recovered:
            log.warning("recovered %d turn(s) interrupted by a previous stop", recovered)
        return recovered


async def _await(awaitable: Any) -> None:
    try:
        await awaitable
    except Exception:
        log.exception("turn listener failed")


def _offer(send: Any, chunk: str) -> None:
    # If the forwarder lags, drop live chunks: the tool's final output is kept anyway.
    with contextlib.suppress(
        anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError
    ):
        send.send_nowait(chunk)


def _initiator(
    thread: ThreadRecord, sender: W.SenderContext | None, origin: Connection | None
) -> dict[str, Any]:
    initiator: dict[str, Any] = {"channelName": thread.origin_channel}
    if sender is not None:
        initiator.update(
            {
                "userId": sender.sender_id,
                "userName": sender.sender_name,
                "userRole": sender.sender_role,
                "groupId": sender.group_id,
            }
        )
    elif origin is not None:
        initiator["userId"] = origin.client_name
    if thread.channel_context:
        initiator["channelContext"] = thread.channel_context
    return {key: value for key, value in initiator.items() if value is not None}
