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
import os
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

import anyio
from acp import PROTOCOL_VERSION
from acp.agent.connection import AgentSideConnection
from acp.schema import (
    AgentCapabilities,
    Implementation,
    InitializeResponse,
    ListSessionsResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptCapabilities,
    PromptResponse,
    SessionCapabilities,
    SessionInfo,
    SessionListCapabilities,
)

from appserver.faces.acp.events import PromptError, input_parts
from appserver.faces.acp.session import (
    CHANNEL,
    INVALID_PARAMS,
    SESSION_NOT_FOUND,
    Session,
    request_error,
)
from appserver.faces.acp.wire import LineTransport

if TYPE_CHECKING:
    from appserver.runtime.host import Runtime

log = logging.getLogger("appserver.faces.acp")

USER_ID = "local"
MAX_LINE_BYTES = 64 * 1024 * 1024  # prompts carry base64 images
LIST_PAGE = 100  # sessions per session/list page
DRAIN_SECONDS = 30.0  # at end of input, how long requests in flight may take to answer


async def serve(args: Any, host: Any, stdin: IO[bytes], stdout: IO[bytes]) -> int:
    """Open the runtime and answer ACP on stdin/stdout until stdin closes."""
    from appserver.providers.base import ProviderConfigError
    from appserver.storage.lock import WorkspaceLocked
    from appserver.transport.stdio import StdioTransport

    async with AsyncExitStack() as stack:
        try:
            runtime = await stack.enter_async_context(host())
        except (ProviderConfigError, ValueError) as exc:
            sys.stderr.write(f"appserver: {exc}\n")
            return 2
        except WorkspaceLocked as exc:
            sys.stderr.write(f"appserver: {exc}\n")
            return 1
        lines = await StdioTransport.open(stdin, stdout, max_message_bytes=MAX_LINE_BYTES)
        # Cancelled when the client stops reading and is dropped: the process
        # ends (exit 1) and the runtime cancels the prompts in flight.
        serving = anyio.CancelScope()
        transport = LineTransport(lines, args.max_client_backlog, on_stall=serving.cancel)
        agent = AcpAgent(runtime, args.approval_policy)
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


class AcpAgent:
    """The methods of ``acp.interfaces.Agent`` this face supports (the others
    are absent, so the router answers them ``-32601``)."""

    def __init__(self, runtime: Runtime, approval_policy: str | None) -> None:
        self.runtime = runtime
        self.workspace = Path(runtime.threads.workspace)
        self.approval_policy = approval_policy
        self.conn: AgentSideConnection | None = None
        self.sessions: dict[str, Session] = {}
        self.client_name = "ACP client"
        self.closed = False

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
        from appserver import __version__

        if client_info is not None:
            self.client_name = client_info.title or client_info.name
        # We speak version 1 only: the client's version if it is 1, else our latest (1).
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(
                load_session=True,
                prompt_capabilities=PromptCapabilities(
                    image=True, audio=False, embedded_context=True
                ),
                session_capabilities=SessionCapabilities(list=SessionListCapabilities()),
            ),
            auth_methods=[],
            agent_info=Implementation(name="appserver", title="appserver", version=__version__),
        )

    async def new_session(
        self,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: list[Any] | None = None,
        **kwargs: Any,
    ) -> NewSessionResponse:
        from appserver.runtime.threads import NewThread

        self._check_cwd(cwd, mcp_servers)
        config = {"approvalPolicy": self.approval_policy} if self.approval_policy else None
        thread = await self.runtime.threads.create(
            NewThread(
                user_id=USER_ID,
                channel_name=CHANNEL,
                display_name=f"ACP session ({self.client_name})",
                configuration=config,
            )
        )
        self._open(thread.id)
        return NewSessionResponse(session_id=thread.id)

    async def load_session(
        self,
        cwd: str,
        session_id: str,
        mcp_servers: list[Any] | None = None,
        additional_directories: list[str] | None = None,
        **kwargs: Any,
    ) -> LoadSessionResponse:
        from appserver.runtime.errors import Refusal, ThreadNotFound

        self._check_cwd(cwd, mcp_servers)
        try:
            thread = await self.runtime.threads.get(session_id)
        except ThreadNotFound:
            raise request_error(
                SESSION_NOT_FOUND, f"Session not found: {session_id}", sessionId=session_id
            ) from None
        session = self._open(thread.id)
        if thread.status == "paused":
            with contextlib.suppress(Refusal):
                await self.runtime.threads.resume(thread.id, session.seat)
        await session.replay()
        return LoadSessionResponse()

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, **kwargs: Any
    ) -> ListSessionsResponse:
        """The workspace's threads (any front door's), most recently active first."""
        from appserver.storage.cursors import BadCursor
        from appserver.storage.threads import ThreadQuery

        if cwd is not None and self._inside(cwd) is None:
            return ListSessionsResponse(sessions=[])  # another directory: none of ours
        query = ThreadQuery(
            workspace_path=str(self.workspace),
            user_id=None,
            channel_context=None,
            limit=LIST_PAGE,
            cursor=cursor,
        )
        try:
            threads, next_cursor = await self.runtime.repo.list_threads(query)
        except BadCursor:
            raise request_error(INVALID_PARAMS, "cursor is not one this agent issued") from None
        sessions = [
            SessionInfo(
                session_id=thread.id,
                cwd=str(self.workspace),
                title=thread.display_name,
                updated_at=thread.last_active_at,
            )
            for thread in threads
        ]
        return ListSessionsResponse(sessions=sessions, next_cursor=next_cursor)

    async def prompt(self, prompt: list[Any], session_id: str, **kwargs: Any) -> PromptResponse:
        session = self.sessions.get(session_id)
        if session is None:
            raise request_error(
                SESSION_NOT_FOUND,
                f"Session not found: {session_id} (use session/new or session/load first)",
                sessionId=session_id,
            )
        try:
            parts = await input_parts(prompt, self.workspace)
        except PromptError as exc:
            raise request_error(INVALID_PARAMS, str(exc), sessionId=session_id) from None
        return await session.prompt(parts)

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        session = self.sessions.get(session_id)
        if session is not None:
            await session.cancel()

    # --- helpers ---------------------------------------------------------------------

    def _inside(self, cwd: str) -> Path | None:
        """``cwd`` resolved if it is absolute and in the workspace, else ``None``."""
        if not os.path.isabs(cwd):
            return None
        try:
            resolved = Path(cwd).resolve()
        except (OSError, ValueError):
            return None
        return resolved if resolved.is_relative_to(self.workspace) else None

    def _check_cwd(self, cwd: str, mcp_servers: list[Any] | None) -> None:
        """The session's directory must be the workspace or inside it."""
        if not os.path.isabs(cwd):
            raise request_error(INVALID_PARAMS, f"cwd must be an absolute path: {cwd!r}", cwd=cwd)
        if self._inside(cwd) is None:
            raise request_error(
                INVALID_PARAMS,
                f"cwd {cwd} is outside this agent's workspace {self.workspace}; "
                "start `appserver acp --workspace <that directory>` for it",
                cwd=cwd,
                workspace=str(self.workspace),
            )
        if mcp_servers:
            log.info("ignoring %d MCP server(s) offered by the client", len(mcp_servers))

    def _open(self, thread_id: str) -> Session:
        session = self.sessions.get(thread_id)
        if session is None:
            session = self.sessions[thread_id] = Session(self, thread_id)
        return session
