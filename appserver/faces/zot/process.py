"""One ``zot rpc`` process's loops: ``serve`` reads commands from stdin (the token
check first, when one is set) while the job worker runs the queued ones, and ends the
process when stdin closes (after the queued jobs), on a wrong token, or when a client
that stops reading is dropped.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import anyio

from appserver.faces.zot.commands import Commands
from appserver.faces.zot.jobs import Jobs
from appserver.faces.zot.session import Session
from appserver.faces.zot.wire import AUTH_REQUIRED, Malformed, parse_command

if TYPE_CHECKING:
    from appserver.runtime.host import Runtime
    from appserver.transport.stdio import StdioTransport

log = logging.getLogger("appserver.faces.zot")


async def serve(
    runtime: Runtime,
    transport: StdioTransport,
    options: Any,
    approval_policy: str | None,
    token: str | None,
    max_backlog: int,
) -> int:
    """Serve one session until stdin closes; the process's exit code."""
    session = Session(runtime, transport, options, approval_policy, max_backlog)
    return await Reader(session, token).serve()


class Reader:
    """The read loop of one session, and the job worker beside it."""

    def __init__(self, session: Session, token: str | None) -> None:
        self.session = session
        self.token = token
        self.authed = token is None
        self.jobs = Jobs(session)
        self.commands = Commands(session, self.jobs)

    async def serve(self) -> int:
        """Read commands until stdin closes, then finish the queued jobs.

        A client dropped for not reading ends the process at once (exit 1);
        the runtime then cancels the turn in flight, as at any shutdown."""
        session = self.session
        code = 1
        try:
            async with anyio.create_task_group() as writing:
                writing.start_soon(session.writer.run)
                try:
                    with session.serving:
                        async with anyio.create_task_group() as working:
                            working.start_soon(self.jobs.work)
                            code = await self._read_loop()
                            if code != 0:
                                working.cancel_scope.cancel()
                            else:
                                self.jobs.close()  # the worker drains the queue, then ends
                finally:
                    session.writer.close()  # the writer ends once the frames are out
            return 1 if session.writer.dropped is not None else code
        finally:
            session.seat.close()
            with anyio.CancelScope(shield=True):
                await session.transport.close(session.writer.close_code)

    async def _read_loop(self) -> int:
        from appserver.transport.base import FrameRejected, FrameTooLarge, TransportClosed

        session = self.session
        while True:
            try:
                line = await session.transport.receive()
            except TransportClosed:
                return 0
            except FrameTooLarge as exc:
                await session.fail(None, "", f"line too long: {exc.detail}")
                continue
            except FrameRejected as exc:
                await session.fail(None, "", f"malformed json: {exc.detail}")
                continue
            if not line.strip():
                continue
            if not await self._handle(line):
                return 1

    async def _handle(self, line: str) -> bool:
        """Answer one line; ``False`` ends the process (a wrong token)."""
        session = self.session
        try:
            kind, request_id, frame = parse_command(line)
        except Malformed as exc:
            await session.fail(None, "", str(exc))
            return True
        if not self.authed:
            if kind != "hello":
                await session.fail(request_id, kind, AUTH_REQUIRED)
                return True
            if frame.get("token") != self.token:
                await session.fail(request_id, kind, "invalid token")
                return False
            self.authed = True
        try:
            await self.commands.dispatch(kind, request_id, frame)
        except Exception as exc:
            log.exception("command %s failed", kind)
            await session.fail(request_id, kind, f"internal error: {type(exc).__name__}")
        return True
