"""The approval conversation of a gated tool call, as items and events.

The broker (``runtime.approvals``) decides who is asked and how it ends; this
module records it: an ``approvalRequest`` item, the turn's ``waitingApproval``
status and runtime flag, the ``item/approval/resolved`` event and the
``approvalResponse`` item. A built-in tool's approval and a client tool's
``approval`` hint (``runtime.turns.client_tools.client_tool_need``) are both
settled here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import anyio

from appserver.protocol.ids import now_iso
from appserver.runtime.approvals import ApprovalBroker, Verdict, session_scopes
from appserver.runtime.bus import EventBus
from appserver.runtime.state import RuntimeStates
from appserver.runtime.turns.items import ItemLog
from appserver.runtime.turns.model import ActiveTurn
from appserver.runtime.wire import item_data
from appserver.storage.records import ItemRecord
from appserver.storage.threads import ThreadRepository
from appserver.tools.base import ApprovalNeed

if TYPE_CHECKING:
    from appserver.protocol import turns as turn_wire


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
        workspace_trusted: Callable[[], bool] = lambda: True,
    ) -> None:
        self.items = items
        self.approvals = approvals
        self.bus = bus
        self.runtimes = runtimes
        self.repo = repo
        self.default_policy = default_policy
        self.workspace_trusted = workspace_trusted

    def effective_policy(self, configuration: Mapping[str, Any]) -> str:
        """The policy a thread with this configuration runs under: its own,
        else the user's default; ``autoApprove`` only in a trusted workspace."""
        policy = str(configuration.get("approvalPolicy") or "default")
        if policy == "default":
            policy = self.default_policy()
        if policy == "autoApprove" and not self.workspace_trusted():
            # A policy stored in a database that came with the checkout is not
            # the user's: until the workspace is trusted, a person is asked.
            policy = "default"
        return policy

    async def settle(self, active: ActiveTurn, need: ApprovalNeed) -> Verdict:
        """Decide by policy or grant, or ask the turn's watchers."""
        config = active.thread.configuration or {}
        policy = self.effective_policy(config)
        trusted = self.workspace_trusted()
        require_outside = config.get("requireApprovalOutsideWorkspace")
        verdict = await self.approvals.precheck(
            active.thread_id, need, policy, require_outside is not False, trusted
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
        from appserver.protocol import turns as turn_wire  # asking: the request's model

        params = turn_wire.ApprovalRequestParams(
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
            diff=need.diff,
            sub_agent=_sub_agent(active),
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
                {"threadId": active.thread_id, "turnId": active.record.id, "item": item_data(item)},
                include=active.watchers,
            )

        await self.items.instant(
            active,
            "approvalResponse",
            {"requestId": request_id, "approved": verdict.approved, "decision": verdict.decision},
            between=resolved,
        )


def _sub_agent(active: ActiveTurn) -> turn_wire.ApprovalSubAgent | None:
    """Which parent a child thread's request comes from (``None`` for a user thread)."""
    block = (active.thread.source or {}).get("subAgent")
    if active.thread.source_kind != "subagent" or not isinstance(block, dict):
        return None
    from appserver.protocol import turns as turn_wire

    return turn_wire.ApprovalSubAgent(
        child_thread_id=active.thread_id,
        parent_thread_id=str(block.get("parentThreadId") or ""),
        root_thread_id=str(block.get("rootThreadId") or ""),
        agent_nickname=block.get("agentNickname"),
    )
