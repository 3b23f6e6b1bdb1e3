"""The ACP agent: sessions are threads, prompts are turns, approvals are
``session/request_permission`` requests. Imported by ``command.main`` only.

The ``acp`` package's connection dispatches requests (each in its own task,
so ``session/cancel`` and permission answers arrive while a prompt runs),
validates params with its schema models (``-32602`` on failure) and answers
unknown methods with ``-32601``; :class:`AcpAgent` implements the methods we
support. See the package docstring (``appserver/faces/acp/__init__.py``) for the mapping.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from functools import partial
from pathlib import Path
from typing import IO, Any, cast

import anyio
from acp.agent.connection import AgentSideConnection
from acp.schema import (
    Implementation,
    InitializeResponse,
    ListSessionsResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptResponse,
    SessionInfo,
)

from appserver.faces.acp.events import PromptError, input_parts
from appserver.faces.acp.session import (
    CHANNEL,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    SESSION_NOT_FOUND,
    Session,
    request_error,
)
from appserver.faces.acp.wire import LineTransport
from appserver.faces.acp.workspaces import (
    CwdError,
    Place,
    Workspaces,
    WorkspaceUnavailable,
)

log = logging.getLogger("appserver.faces.acp")

USER_ID = "local"
MAX_LINE_BYTES = 64 * 1024 * 1024  # prompts carry base64 images
LIST_PAGE = 100  # sessions per session/list page
DRAIN_SECONDS = 30.0  # at end of input, how long requests in flight may take to answer


async def serve(
    args: Any, host: Any, stdin: IO[bytes], stdout: IO[bytes], craft_dir: Any = None
) -> int:
    """Open the runtime and answer ACP on stdin/stdout until stdin closes
    (``host(directory)`` opens the runtime of another directory a session names)."""
    from appserver.faces.start_failure import StartFailure, answer_first_request, open_runtime
    from appserver.transport.stdio import StdioTransport

    async with AsyncExitStack() as stack:
        runtime = await open_runtime(stack, host, craft_dir)
        if isinstance(runtime, StartFailure):
            answer = partial(_refusal, runtime.message)
            await answer_first_request(
                stdin, stdout, answer, MAX_LINE_BYTES, getattr(args, "early", None)
            )
            return runtime.code
        early = getattr(args, "early", None)  # the initialize answered before (early_answer)
        lines = await StdioTransport.open(
            stdin, stdout, max_message_bytes=MAX_LINE_BYTES, early=early
        )
        # Cancelled when the client stops reading and is dropped: the process
        # ends (exit 1) and the runtime cancels the prompts in flight.
        serving = anyio.CancelScope()
        transport = LineTransport(lines, args.max_client_backlog, on_stall=serving.cancel)
        # Left last: the workspaces opened on demand shut down before the first.
        opened = await stack.enter_async_context(anyio.create_task_group())
        first = Place(Path(runtime.threads.workspace), runtime)
        workspaces = Workspaces(first, host, opened)
        stack.callback(workspaces.close)
        agent = AcpAgent(workspaces, args.approval_policy)
        agent.room = transport.writer.room
        # The package's connection over our transport; run_agent would drop the
        # requests still in flight at end of input, so the loop is ours.
        conn = AgentSideConnection(cast(Any, agent), transport, listening=False)
        async with anyio.create_task_group() as writing:
            writing.start_soon(transport.writer.run)
            try:
                with serving:
                    await conn.listen()  # until stdin closes
                # The client is gone (or dropped): running prompts are cancelled
                # (each still answers "cancelled"), every request received gets
                # its answer (a dropped client's are discarded).
                await agent.end_of_input()
                with anyio.move_on_after(DRAIN_SECONDS):
                    await transport.drained()
            finally:
                agent.close()
                with anyio.CancelScope(shield=True):
                    await conn.close()  # writes what is queued, then closes stdout
    return 1 if transport.writer.dropped is not None else 0


def _refusal(why: str, message: Any) -> list[dict[str, Any]] | None:
    """The error answering a request (any: ``initialize`` comes first) when the
    workspace could not open."""
    if not isinstance(message, dict) or "method" not in message or "id" not in message:
        return None
    error = {"code": INTERNAL_ERROR, "message": f"appserver cannot start: {why}"}
    return [{"jsonrpc": "2.0", "id": message["id"], "error": error}]


class AcpAgent:
    """The methods of ``acp.interfaces.Agent`` this face supports (the others
    are absent, so the router answers them ``-32601``)."""

    def __init__(self, workspaces: Workspaces, approval_policy: str | None) -> None:
        self.workspaces = workspaces
        self.approval_policy = approval_policy
        self.conn: AgentSideConnection | None = None
        self.sessions: dict[str, Session] = {}
        self.client_name = "ACP client"
        self.closed = False
        # Waits until the client has read enough for more (the writer's, once running).
        self.room: Callable[[], Awaitable[None]] = _no_wait

    @property
    def connected(self) -> bool:
        return self.conn is not None and not self.closed

    def on_connect(self, conn: AgentSideConnection) -> None:
        self.conn = conn

    async def end_of_input(self) -> None:
        """Nobody can answer any more: cancel the prompts still running."""
        self.closed = True
        for session in list(self.sessions.values()):
            await session.cancel()

    def close(self) -> None:
        self.closed = True
        for session in self.sessions.values():
            session.seat.close()

    # --- methods -------------------------------------------------------------------------

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: Any = None,
        client_info: Implementation | None = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        from appserver.faces.acp.handshake import initialize_result

        if client_info is not None:
            self.client_name = client_info.title or client_info.name
        # We speak version 1 only: the client's version if it is 1, else our latest (1).
        return InitializeResponse.model_validate(initialize_result())

    async def new_session(
        self,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: list[Any] | None = None,
        **kwargs: Any,
    ) -> NewSessionResponse:
        from appserver.runtime.threads import NewThread

        place = await self._place(cwd, mcp_servers)
        assert place is not None  # created when missing
        config = {"approvalPolicy": self.approval_policy} if self.approval_policy else None
        thread = await place.runtime.threads.create(
            NewThread(
                user_id=USER_ID,
                channel_name=CHANNEL,
                display_name=f"ACP session ({self.client_name})",
                configuration=config,
            )
        )
        self._open(thread.id, place)
        return NewSessionResponse(session_id=thread.id)

    async def load_session(
        self,
        cwd: str,
        session_id: str,
        mcp_servers: list[Any] | None = None,
        additional_directories: list[str] | None = None,
        **kwargs: Any,
    ) -> LoadSessionResponse:
        from appserver.protocol.encoding import scrub_surrogates
        from appserver.runtime.errors import Refusal, ThreadNotFound

        place = await self._place(cwd, mcp_servers, create=False)
        not_found = request_error(
            SESSION_NOT_FOUND, f"Session not found: {session_id}", sessionId=session_id
        )
        # No place, or an id that is no Unicode (a lone surrogate: no thread has one,
        # and the database could not even be asked about it).
        if place is None or scrub_surrogates(session_id) is not session_id:
            raise not_found
        try:
            thread = await place.runtime.threads.get(session_id)
        except ThreadNotFound:
            raise not_found from None
        session = self._open(thread.id, place)
        if thread.status == "paused":
            with contextlib.suppress(Refusal):
                await place.runtime.threads.resume(thread.id, session.seat)
        await session.replay()
        return LoadSessionResponse()

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, **kwargs: Any
    ) -> ListSessionsResponse:
        """The threads (any front door's) of ``cwd``'s workspace, or of every open
        workspace when no ``cwd`` is given, most recently active first."""
        from appserver.storage.cursors import BadCursor

        if cwd is None:
            places = self.workspaces.opened()
        else:
            place = await self._place(cwd, None, create=False)
            places = [] if place is None else [place]
        if not places:
            return ListSessionsResponse(sessions=[])
        if cursor is not None and len(places) > 1:
            raise request_error(INVALID_PARAMS, "pass cwd to page through one workspace's sessions")
        try:
            pages = [await _page(place, cursor) for place in places]
        except BadCursor:
            raise request_error(INVALID_PARAMS, "cursor is not one this agent issued") from None
        if len(pages) == 1:
            return pages[0]
        # Several workspaces: their first pages merged (each workspace's own
        # cwd filter pages further), most recently active first.
        merged = sorted(
            (info for page in pages for info in page.sessions),
            key=lambda info: info.updated_at or "",
            reverse=True,
        )
        return ListSessionsResponse(sessions=merged[:LIST_PAGE])

    async def prompt(self, prompt: list[Any], session_id: str, **kwargs: Any) -> PromptResponse:
        session = self.sessions.get(session_id)
        if session is None:
            raise request_error(
                SESSION_NOT_FOUND,
                f"Session not found: {session_id} (use session/new or session/load first)",
                sessionId=session_id,
            )
        try:
            parts = await input_parts(prompt, session.workspace)
        except PromptError as exc:
            raise request_error(INVALID_PARAMS, str(exc), sessionId=session_id) from None
        return await session.prompt(parts)

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        session = self.sessions.get(session_id)
        if session is not None:
            await session.cancel()

    # --- helpers ---------------------------------------------------------------------

    async def _place(
        self, cwd: str, mcp_servers: list[Any] | None, *, create: bool = True
    ) -> Place | None:
        """The workspace a session in ``cwd`` runs in (see ``workspaces``)."""
        try:
            place = await self.workspaces.place(cwd, create=create)
        except CwdError as exc:
            raise request_error(INVALID_PARAMS, str(exc), cwd=cwd) from None
        except WorkspaceUnavailable as exc:
            raise request_error(INTERNAL_ERROR, str(exc), cwd=cwd) from None
        if mcp_servers:
            log.info("ignoring %d MCP server(s) offered by the client", len(mcp_servers))
        return place

    def _open(self, thread_id: str, place: Place) -> Session:
        session = self.sessions.get(thread_id)
        if session is None:
            session = self.sessions[thread_id] = Session(self, thread_id, place)
        return session


async def _page(place: Place, cursor: str | None) -> ListSessionsResponse:
    """One page of ``place``'s threads as sessions."""
    from appserver.storage.threads import ThreadQuery

    query = ThreadQuery(
        workspace_path=str(place.root),
        user_id=None,
        channel_context=None,
        limit=LIST_PAGE,
        cursor=cursor,
    )
    threads, next_cursor = await place.runtime.repo.list_threads(query)
    sessions = [
        SessionInfo(
            session_id=thread.id,
            cwd=str(place.root),
            title=thread.display_name,
            updated_at=thread.last_active_at,
        )
        for thread in threads
    ]
    return ListSessionsResponse(sessions=sessions, next_cursor=next_cursor)


async def _no_wait() -> None:
    """Room enough (no writer to wait for)."""
