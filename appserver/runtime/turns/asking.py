"""Questions a turn asks its clients, as items and events.

The approval conversation of a gated tool call: the broker
(``runtime.approvals``) decides who is asked and how it ends; this module
records it: an ``approvalRequest`` item, the turn's ``waitingApproval`` status
and runtime flag, the ``item/approval/resolved`` event and the
``approvalResponse`` item.

Client tools (:class:`ClientToolCalls`): a call of a tool the thread's client
declared (``thread/start.dynamicTools``) is asked of that client with the
same machinery (:class:`PendingToolCall`) and recorded as a
``dynamicToolCall`` item; see docs/tools.md.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
from pydantic import ValidationError

from appserver.protocol import turns as W
from appserver.protocol.dynamic_tools import ToolCallParams, ToolCallResult
from appserver.protocol.ids import now_iso
from appserver.providers.base import ToolSpec
from appserver.runtime.approvals import ApprovalBroker, PendingApproval, Verdict, session_scopes
from appserver.runtime.bus import EventBus
from appserver.runtime.events import Participant, ToolCaller
from appserver.runtime.history import client_tool_text as model_text
from appserver.runtime.state import RuntimeStates
from appserver.runtime.turns.items import ItemLog
from appserver.runtime.turns.model import ActiveTurn
from appserver.runtime.wire import item_to_wire
from appserver.storage.threads import ItemRecord, ThreadRepository
from appserver.tools.base import ApprovalNeed

log = logging.getLogger("appserver.turns")


class ApprovalConversation:
    """Settles one :class:`ApprovalNeed` of a running turn."""

    def __init__(
        self,
        items: ItemLog,
        approvals: ApprovalBroker,
        bus: EventBus,
        runtimes: RuntimeStates,
        repo: ThreadRepository,
        default_policy: Callable[[], str],
    ) -> None:
        self.items = items
        self.approvals = approvals
        self.bus = bus
        self.runtimes = runtimes
        self.repo = repo
        self.default_policy = default_policy

    async def settle(self, active: ActiveTurn, need: ApprovalNeed) -> Verdict:
        """Decide by policy or grant, or ask the turn's watchers."""
        config = active.thread.configuration or {}
        policy = str(config.get("approvalPolicy") or "default")
        if policy == "default":
            policy = self.default_policy()
        require_outside = config.get("requireApprovalOutsideWorkspace")
        verdict = await self.approvals.precheck(
            active.thread_id, need, policy, require_outside is not False
        )
        if verdict is None:
            verdict = await self._ask(active, need, policy)
        elif verdict.fallback and verdict.decision == "decline":
            await self.items.error(active, verdict.fallback, verdict.fallback_code or "", False)
        return verdict

    async def _ask(self, active: ActiveTurn, need: ApprovalNeed, policy: str) -> Verdict:
        request_id = self.approvals.new_request_id()
        scopes = session_scopes(need)
        key = scopes[0].scope_key
        request_item = await self.items.instant(
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
            session_scopes=scopes,
        )
        askers = list(dict.fromkeys([*self.bus.subscribers(active.thread_id), *active.watchers]))
        assert active.tg is not None
        try:
            verdict = await self.approvals.ask(params, askers, active.tg, policy)
        finally:
            with anyio.CancelScope(shield=True):
                if active.record.status == "waitingApproval":
                    active.record.status = "running"
                    await self.repo.save_turn(active.record)
                await self.runtimes.approval_pending(active.thread_id, -1)
        if verdict.fallback:
            await self.items.error(active, verdict.fallback, verdict.fallback_code or "", False)
        await self.approvals.remember(
            active.thread_id, need, verdict.decision, now_iso(), verdict.scope
        )
        await self._record_response(active, request_id, verdict)
        return verdict

    async def _record_response(self, active: ActiveTurn, request_id: str, verdict: Verdict) -> None:
        async def resolved(item: ItemRecord) -> None:
            await self.items.journal.emit(
                active.thread_id,
                "item/approval/resolved",
                W.ApprovalResolvedNotification(
                    thread_id=active.thread_id, turn_id=active.record.id, item=item_to_wire(item)
                ),
                include=active.watchers,
            )

        await self.items.instant(
            active,
            "approvalResponse",
            {"requestId": request_id, "approved": verdict.approved, "decision": verdict.decision},
            between=resolved,
        )


# --- client tools (thread/start.dynamicTools -> item/tool/call) ----------------------

CLIENT_TOOL_ERRORS = {
    "toolCallTimeout": "the client did not answer the tool call within {timeout:g}s",
    "toolCallClientGone": (
        "the client that owns this thread disconnected and did not come back within {grace:g}s"
    ),
    "toolCallUnavailable": "no connected client can run this tool",
}


@dataclass(frozen=True)
class ClientTool:
    """A tool a client declared for a thread; the model sees it as :attr:`model_name`."""

    namespace: str | None
    name: str
    description: str
    input_schema: dict[str, Any]

    @property
    def model_name(self) -> str:
        """``namespace__name``, or ``name`` without a namespace."""
        return f"{self.namespace}__{self.name}" if self.namespace else self.name

    def spec(self) -> ToolSpec:
        return ToolSpec(self.model_name, self.description, self.input_schema)


@dataclass
class PendingToolCall(PendingApproval[ToolCallParams]):
    """An ``item/tool/call`` waiting for the owner's answer (the approval
    machinery: asked once per participant, timeout, reconnect grace)."""

    answer: Mapping[str, object] | None = None

    async def _put(self, participant: Participant) -> object:
        assert isinstance(participant, ToolCaller)
        return await participant.call_tool(self.params, self.timeout)

    def _refused(self, participant: Participant, message: str) -> None:
        self.answer = {"success": False, "errorCode": "clientError", "errorMessage": message}
        self.resolve("answered", participant)

    def _answered(self, participant: Participant, answer: object) -> None:
        self.answer = answer if isinstance(answer, Mapping) else {}  # invalid: no `success`
        self.resolve("answered", participant)


def can_call_tools(participant: Participant | None) -> bool:
    return (
        participant is not None
        and not participant.closed
        and isinstance(participant, ToolCaller)
        and participant.can_call_tools()
    )


class ClientToolCalls:
    """The tools clients declared per thread, and their calls.

    A thread's tools are stored with it (read back at its first turn after a
    restart) and run by the thread's **owner**: the participant that started it, or
    that resumed it last, or, while the owner is gone, the first client able
    to run tools that subscribes to it or starts a turn on it. A pending call
    is asked again of a new owner. No answer within the approval timeout, an owner gone past the
    reconnect grace, or an invalid answer fail the call; the turn goes on.
    """

    def __init__(self, items: ItemLog, approvals: ApprovalBroker) -> None:
        self.items = items
        self.approvals = approvals
        self.tools: dict[str, dict[str, ClientTool]] = {}  # thread -> model name -> tool
        self.owners: dict[str, Participant] = {}
        self.pending: dict[str, PendingToolCall] = {}
        self._loaded: set[str] = set()  # threads whose stored tools were read
        approvals.offer_listeners.append(self._offered)

    # --- declaring, binding ----------------------------------------------------------

    async def declare(
        self, thread_id: str, tools: list[dict[str, Any]], owner: Participant | None
    ) -> None:
        """Store ``tools`` (``DynamicToolSpec`` wire objects) with the thread;
        ``owner`` runs them."""
        if tools:
            await self.items.repo.save_dynamic_tools(thread_id, tools)
        self._remember(thread_id, tools)
        if owner is not None:
            self.owners[thread_id] = owner

    async def load(self, thread_id: str) -> None:
        """Read the thread's stored tools once per process."""
        if thread_id not in self._loaded:
            self._remember(thread_id, await self.items.repo.dynamic_tools(thread_id))

    def _remember(self, thread_id: str, tools: list[dict[str, Any]]) -> None:
        self._loaded.add(thread_id)
        declared = [
            ClientTool(
                namespace=tool.get("namespace") or None,
                name=str(tool["name"]),
                description=str(tool.get("description", "")),
                input_schema=dict(tool.get("inputSchema") or {}),
            )
            for tool in tools
        ]
        if declared:
            self.tools[thread_id] = {tool.model_name: tool for tool in declared}

    def bind(self, thread_id: str, owner: Participant) -> None:
        """``owner`` resumed the thread: it runs the thread's tools from now on,
        and is asked a call that is pending."""
        self.owners[thread_id] = owner
        pending = self.pending.get(thread_id)
        if pending is not None and can_call_tools(owner):
            pending.ask(owner)

    def _offered(self, thread_id: str, participant: Participant) -> None:
        """A participant subscribed to (or resumed) the thread: if the owner is
        gone, it takes the owner's seat."""
        owner = self.owners.get(thread_id)
        if participant is not owner and not (owner is None or owner.closed):
            return
        if can_call_tools(participant):
            self.bind(thread_id, participant)

    def forget_thread(self, thread_id: str) -> None:
        self.tools.pop(thread_id, None)
        self.owners.pop(thread_id, None)
        self._loaded.discard(thread_id)

    # --- what the model sees ------------------------------------------------------------

    def specs(self, thread_id: str, taken: set[str]) -> list[ToolSpec]:
        """The thread's tools for the model (a name already ``taken`` by a
        built-in tool is not offered: the built-in wins)."""
        return [
            tool.spec() for name, tool in self.tools.get(thread_id, {}).items() if name not in taken
        ]

    def find(self, thread_id: str, model_name: str) -> ClientTool | None:
        return self.tools.get(thread_id, {}).get(model_name)

    # --- a call -------------------------------------------------------------------------

    async def call(self, active: ActiveTurn, tool: ClientTool, call_id: str, arguments: Any) -> str:
        """Run one call through the owner; record the ``dynamicToolCall`` item;
        return the tool result for the model."""
        args = dict(arguments) if isinstance(arguments, Mapping) else {}
        payload: dict[str, Any] = {"toolName": tool.name, "callId": call_id, "arguments": args}
        if tool.namespace:
            payload = {"namespace": tool.namespace, **payload}
        item = await self.items.open(active, "dynamicToolCall", payload)
        params = ToolCallParams(
            thread_id=active.thread_id,
            turn_id=active.record.id,
            call_id=call_id,
            namespace=tool.namespace,
            tool=tool.name,
            arguments=args,
        )
        result = await self._ask(active, params)
        item.payload.update(result)
        await self.items.complete(active, item)
        return model_text(result)

    async def _ask(self, active: ActiveTurn, params: ToolCallParams) -> dict[str, Any]:
        owner = self.owners.get(active.thread_id)
        if (owner is None or owner.closed) and can_call_tools(active.origin):
            # The seat is empty: the client that started this turn takes it.
            assert active.origin is not None
            owner = self.owners[active.thread_id] = active.origin
        if owner is not None and not owner.closed and not can_call_tools(owner):
            return _failure("toolCallUnavailable", CLIENT_TOOL_ERRORS["toolCallUnavailable"])
        assert active.tg is not None
        broker = self.approvals
        pending = PendingToolCall(params, active.tg, broker.timeout, broker.reconnect_grace)
        self.pending[active.thread_id] = pending
        try:
            if owner is not None and can_call_tools(owner):
                pending.ask(owner)
            decided, reason = await pending.wait()
        finally:
            self.pending.pop(active.thread_id, None)
        if decided is None:
            code = "toolCallTimeout" if reason == "approval_timeout" else "toolCallClientGone"
            message = CLIENT_TOOL_ERRORS[code].format(
                timeout=broker.timeout, grace=broker.reconnect_grace
            )
            log.info("client tool call %s on %s failed: %s", params.call_id, params.thread_id, code)
            return _failure(code, message)
        return parse_tool_result(pending.answer or {})


def _failure(code: str, message: str) -> dict[str, Any]:
    return {"success": False, "errorCode": code, "errorMessage": message}


def parse_tool_result(answer: Mapping[str, object]) -> dict[str, Any]:
    """The client's answer as ``dynamicToolCall`` payload fields; anything
    malformed is a failure (``invalidResult``)."""
    try:
        result = ToolCallResult.model_validate(dict(answer))
    except ValidationError as exc:
        return _failure("invalidResult", f"invalid answer to item/tool/call: {_first_error(exc)}")
    if not isinstance(answer.get("success"), bool):
        return _failure("invalidResult", "invalid answer to item/tool/call: `success` is required")
    for part in result.content_items or []:
        kind = part.get("type")
        if kind == "text" and isinstance(part.get("text"), str):
            continue
        if kind == "image" and isinstance(part.get("imageUrl"), str):
            continue
        return _failure(
            "invalidResult",
            "invalid answer to item/tool/call: a content item is not "
            '{type: "text", text} or {type: "image", imageUrl}',
        )
    fields = result.model_dump(by_alias=True, exclude_none=True)
    fields["success"] = result.success
    return {
        key: fields[key]
        for key in ("contentItems", "structuredResult", "success", "errorCode", "errorMessage")
        if key in fields
    }


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error.get("loc", ()))
    return f"{where}: {error.get('msg', '')}" if where else str(error.get("msg", ""))
