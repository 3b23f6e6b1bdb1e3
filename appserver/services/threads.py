"""The ``thread/*`` family: JSON-RPC handlers over the thread use cases
(:class:`appserver.runtime.threads.Threads`).

Handlers validate nothing themselves (the router did) and encode nothing
(the router does; ``thread/list`` encodes its answer itself to keep a page
under ``LIST_PAGE_BYTES``): they translate params to a use case call and its
result to the method's result model. Notifications a call causes reach the caller
after its response (the JSON-RPC core holds them while the request runs).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from appserver.protocol import fork as fork_wire
from appserver.protocol import threads as thread_wire
from appserver.protocol.acp_names import family_of
from appserver.protocol.base import Empty
from appserver.protocol.dynamic_tools import DynamicToolSpec
from appserver.protocol.encoding import dumps, model_json
from appserver.protocol.limits import LIST_PAGE_BYTES, encoded_size, utf8_size
from appserver.rpc.connection import RequestContext
from appserver.rpc.framing import RawJSON
from appserver.runtime.errors import InvalidInput
from appserver.runtime.fork import ForkSpec, fork_thread
from appserver.runtime.threads import NewThread, Threads
from appserver.services.peer import Peer, peer_of
from appserver.services.router import Router
from appserver.storage.records import ThreadRecord
from appserver.storage.threads import ThreadQuery

if TYPE_CHECKING:
    from appserver.runtime.subagents import SubAgents

# Room for `{"data":[`, `],"nextCursor":"<cursor>"}` around the summaries.
_LIST_ENVELOPE_BYTES = 256


def hidden_item_types(viewer: Peer | None) -> frozenset[str]:
    """Item types a client did not opt into (DotCraft filters them from reads too)."""
    if viewer is not None and "item:commandExecution" in viewer.opt_out:
        return frozenset({"commandExecution"})
    return frozenset()


class ThreadService:
    """Handlers of the thread family."""

    def __init__(self, threads: Threads, subagents: Callable[[], SubAgents]) -> None:
        self.threads = threads
        # Archive, unarchive and delete go through it: a SubAgent child is managed
        # through its parent, and a parent takes its subtree along (made at the
        # first of them: Runtime.subagents).
        self.subagents = subagents

    def register(self, router: Router) -> None:
        handlers: dict[str, Any] = {
            "thread/start": self.start,
            "thread/resume": self.resume,
            "thread/list": self.list_threads,
            "thread/rollback": self.rollback,
            "thread/fork": self.fork,
            "thread/subscribe": self.subscribe,
            "thread/unsubscribe": self.unsubscribe,
            "thread/pause": self.pause,
            "thread/archive": self.archive,
            "thread/unarchive": self.unarchive,
            "thread/delete": self.delete,
            "thread/rename": self.rename,
            "thread/mode/set": self.set_mode,
            "thread/config/update": self.update_config,
        }
        for method, handler in handlers.items():
            router.register(method, handler)
        # Without turns the answer depends only on the stored record, the runtime
        # flags and the queue: while all three are unchanged, repeated reads get
        # the bytes of the last answer.
        router.register("thread/read", self.read, answer_key=self._read_key)

    async def start(
        self, ctx: RequestContext, params: thread_wire.ThreadStartParams
    ) -> BaseModel | RawJSON:
        identity = params.identity
        _check_acp_methods(params.dynamic_tools or [], peer_of(ctx))
        display_name = params.display_name.strip() if params.display_name else None
        thread, data = await self.threads.create_viewed(
            NewThread(
                user_id=identity.user_id,
                channel_name=identity.channel_name,
                workspace_path=identity.workspace_path,
                channel_context=identity.channel_context,
                display_name=display_name or None,
                history_mode=params.history_mode or "server",
                configuration=params.config.to_wire() if params.config is not None else None,
            )
        )
        # This connection owns the thread's tools (item/tool/call goes to it) and
        # is its bound client (ext/acp/* go to it). A new thread has no others
        # stored: its first turn does not read them.
        await self.threads.engine.agent.tools.client_tools.declare(
            thread.id,
            [
                tool.model_dump(by_alias=True, exclude_none=True)
                for tool in params.dynamic_tools or []
            ],
            peer_of(ctx),
        )
        # As announced (binding its tools changes nothing of it), sent as the data
        # it was announced with: a ThreadResult of the thread alone, no model built.
        return RawJSON(dumps({"thread": data}))

    async def resume(
        self, ctx: RequestContext, params: thread_wire.ThreadResumeParams
    ) -> BaseModel:
        peer = peer_of(ctx)
        result = await self.threads.resume(
            params.thread_id,
            peer,
            params.turn_limit,
            params.turns_cursor,
            hidden_item_types(peer),
        )
        # Resuming binds the thread's client tools to this connection.
        self.threads.engine.agent.tools.client_tools.bind(params.thread_id, peer)
        return result

    async def list_threads(
        self, ctx: RequestContext, params: thread_wire.ThreadListParams
    ) -> BaseModel | RawJSON:
        identity = params.identity
        summaries, next_cursor = await self.threads.list(
            ThreadQuery(
                workspace_path=self.threads.normalize_workspace(identity.workspace_path),
                user_id=identity.user_id or None,
                channel_context=identity.channel_context,
                include_archived=params.include_archived,
                include_sub_agents=params.include_sub_agents,
                include_internal=params.include_internal,
                cross_channel_origins=params.cross_channel_origins or [],
                channel_name=params.channel_name,
                limit=params.limit,
                cursor=params.cursor,
                search_term=params.search_term,
            )
        )
        # Encoded once here (the router sends RawJSON as is); a page that would
        # pass LIST_PAGE_BYTES ends early instead, so no answer nears the frame cap.
        encoded = model_json(thread_wire.ThreadListResult(data=summaries, next_cursor=next_cursor))
        if utf8_size(encoded) <= LIST_PAGE_BYTES:
            return RawJSON(encoded)
        return self._within_budget(summaries, next_cursor)

    def _within_budget(
        self, summaries: list[thread_wire.ThreadSummary], next_cursor: str | None
    ) -> thread_wire.ThreadListResult:
        """The longest prefix of ``summaries`` whose answer stays under
        LIST_PAGE_BYTES (at least one summary), with the cursor after it."""
        used = _LIST_ENVELOPE_BYTES
        kept = 0
        for summary in summaries:
            size = encoded_size(summary) + 1  # and its comma
            if kept and used + size > LIST_PAGE_BYTES:
                break
            used += size
            kept += 1
        if kept == len(summaries):
            return thread_wire.ThreadListResult(data=summaries, next_cursor=next_cursor)
        page = summaries[:kept]
        return thread_wire.ThreadListResult(
            data=page, next_cursor=self.threads.list_cursor_after(page[-1])
        )

    async def read(
        self, ctx: RequestContext, params: thread_wire.ThreadReadParams
    ) -> BaseModel | RawJSON:
        thread = await self.threads.get(params.thread_id)
        if not params.include_turns:
            return await self.threads.view(thread)
        hidden = hidden_item_types(peer_of(ctx))
        query = (thread, True, params.turn_limit, params.turns_cursor, hidden)
        return await self._paged_view(*query)

    async def _paged_view(
        self,
        thread: ThreadRecord,
        include_turns: bool,
        turn_limit: int | None,
        turns_cursor: str | None,
        hidden: Collection[str],
    ) -> BaseModel | RawJSON:
        """The view with turns, encoded once; a page whose answer would pass
        LIST_PAGE_BYTES is read again, ending early with ``nextTurnsCursor``."""
        result = await self.threads.view(thread, include_turns, turn_limit, turns_cursor, hidden)
        encoded = model_json(result)
        if utf8_size(encoded) <= LIST_PAGE_BYTES:
            return RawJSON(encoded)
        return await self.threads.view(
            thread, include_turns, turn_limit, turns_cursor, hidden, LIST_PAGE_BYTES
        )

    def _read_key(self, params: thread_wire.ThreadReadParams) -> tuple[str, Any] | None:
        if params.include_turns:
            return None
        version = self.threads.version(params.thread_id)
        return (params.thread_id, version) if version is not None else None

    async def rollback(
        self, ctx: RequestContext, params: thread_wire.ThreadRollbackParams
    ) -> BaseModel | RawJSON:
        thread = await self.threads.rollback(params.thread_id, params.num_turns)
        return await self._paged_view(thread, True, None, None, hidden_item_types(peer_of(ctx)))

    async def fork(
        self, ctx: RequestContext, params: fork_wire.ThreadForkParams
    ) -> BaseModel | RawJSON:
        point, identity = params.fork_point, params.identity
        if point is not None and point.item_id is not None:
            raise InvalidInput("'forkPoint.itemId': forking inside a turn is not supported")
        display_name = params.display_name.strip() if params.display_name else None
        thread = await fork_thread(
            self.threads,
            ForkSpec(
                thread_id=params.thread_id,
                last_turn_id=point.turn_id if point is not None else None,
                include_last=point is None or point.position == "after",
                user_id=identity.user_id if identity is not None else None,
                channel_name=identity.channel_name if identity is not None else None,
                workspace_path=identity.workspace_path if identity is not None else None,
                channel_context=identity.channel_context if identity is not None else None,
                display_name=display_name or None,
                configuration=params.config.to_wire() if params.config is not None else None,
            ),
        )
        self.threads.engine.agent.tools.client_tools.claim(thread.id, peer_of(ctx))
        return await self._paged_view(
            thread, not params.exclude_turns, None, None, hidden_item_types(peer_of(ctx))
        )

    async def subscribe(
        self, ctx: RequestContext, params: thread_wire.ThreadSubscribeParams
    ) -> BaseModel:
        await self.threads.subscribe(
            params.thread_id, peer_of(ctx), params.after_seq, params.replay_recent
        )
        return Empty()

    async def unsubscribe(
        self, ctx: RequestContext, params: thread_wire.ThreadIdParams
    ) -> BaseModel:
        self.threads.unsubscribe(params.thread_id, peer_of(ctx))
        return Empty()

    async def pause(self, ctx: RequestContext, params: thread_wire.ThreadIdParams) -> BaseModel:
        await self.threads.pause(params.thread_id)
        return Empty()

    async def archive(self, ctx: RequestContext, params: thread_wire.ThreadIdParams) -> BaseModel:
        await self.subagents().archive(params.thread_id)
        return Empty()

    async def unarchive(self, ctx: RequestContext, params: thread_wire.ThreadIdParams) -> BaseModel:
        await self.subagents().unarchive(params.thread_id)
        return Empty()

    async def delete(self, ctx: RequestContext, params: thread_wire.ThreadIdParams) -> BaseModel:
        await self.subagents().delete(params.thread_id, by=peer_of(ctx))
        return Empty()

    async def rename(
        self, ctx: RequestContext, params: thread_wire.ThreadRenameParams
    ) -> BaseModel:
        await self.threads.rename(params.thread_id, params.display_name)
        return Empty()

    async def set_mode(
        self, ctx: RequestContext, params: thread_wire.ThreadModeSetParams
    ) -> BaseModel:
        await self.threads.set_mode(params.thread_id, params.mode)
        return Empty()

    async def update_config(
        self, ctx: RequestContext, params: thread_wire.ThreadConfigUpdateParams
    ) -> BaseModel:
        await self.threads.configure(params.thread_id, params.config.to_wire())
        return Empty()


def _check_acp_methods(tools: list[DynamicToolSpec], peer: Peer) -> None:
    """A declared tool's ``acpMethod`` must name a family the starting client
    lists in ``acpExtensions.extensions`` (it is sent there), as DotCraft's
    ACP bridge requires of its IDE's runtime tools."""
    served = {family.casefold() for family in peer.editor_families()}
    for index, tool in enumerate(tools):
        if tool.acp_method is None:
            continue
        family = family_of(tool.acp_method)
        if family.casefold() not in served:
            raise InvalidInput(
                f"'dynamicTools[{index}].acpMethod': the client does not list {family!r} "
                "in initialize's acpExtensions.extensions"
            )
