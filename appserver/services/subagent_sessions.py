"""SubAgent sessions: ``subagent/children/list``, ``subagent/close`` and
``subagent/resume`` over the runtime's child threads
(:class:`appserver.runtime.subagents.SubAgents`; DotCraft parity 2 §2.5).

``subagent/graphChanged`` is published by the runtime on every edge change,
so the agent-control tools and these methods announce alike.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel

from appserver.protocol import errors as rpc_errors
from appserver.protocol import subagent_sessions as session_wire
from appserver.rpc.connection import RequestContext
from appserver.runtime.subagents import SubAgents, sub_agent_of

if TYPE_CHECKING:
    from appserver.services.context import FamilyContext


def _required(value: str, name: str) -> str:
    if not value.strip():
        raise rpc_errors.invalid_params(f"'{name}' is required.")
    return value.strip()


class SubAgentSessionService:
    """Handlers over the runtime's :class:`SubAgents`."""

    def __init__(self, subagents: SubAgents) -> None:
        self.subagents = subagents

    def register(self, server: FamilyContext) -> None:
        """Register the three methods on the router."""
        server.router.register("subagent/children/list", self.list_children)
        server.router.register("subagent/close", self.close)
        server.router.register("subagent/resume", self.resume)

    async def list_children(
        self, ctx: RequestContext, params: session_wire.SubAgentChildrenListParams
    ) -> BaseModel:
        parent_id = _required(params.parent_thread_id, "parentThreadId")
        edges = await self.subagents.edges.children(parent_id, include_closed=params.include_closed)
        children = []
        for edge in edges:
            thread = None
            if params.include_threads:
                record = await self.subagents.threads.get(edge.child_thread_id)
                thread = (await self.subagents.threads.view(record)).thread
            children.append(session_wire.SubAgentChild(edge=edge, thread=thread))
        return session_wire.SubAgentChildrenListResult(data=children)

    async def _parent_of(self, params: session_wire.SubAgentChildParams) -> tuple[str, str]:
        """(parent, child): as DotCraft, the given parent is only checked for presence
        and the child's recorded parent is used (its channel context as a fallback)."""
        given = _required(params.parent_thread_id, "parentThreadId")
        child_id = _required(params.child_thread_id, "childThreadId")
        child = await self.subagents.threads.get(child_id)  # unknown: -32010
        recorded = sub_agent_of(child).get("parentThreadId") or child.channel_context
        return str(recorded or given), child.id

    async def close(
        self, ctx: RequestContext, params: session_wire.SubAgentChildParams
    ) -> BaseModel:
        return await self.subagents.close(*await self._parent_of(params))

    async def resume(
        self, ctx: RequestContext, params: session_wire.SubAgentChildParams
    ) -> BaseModel:
        return await self.subagents.resume(*await self._parent_of(params))


def install(server: FamilyContext) -> None:
    """Register the SubAgent session methods (native children always exist)."""
    SubAgentSessionService(server.runtime.subagents).register(server)
