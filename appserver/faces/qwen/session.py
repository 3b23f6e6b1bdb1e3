"""One ``qwen`` face process: the session, its thread, the read loop, the
control plane and the turn worker.

A Qwen session id maps to one ordinary thread (channel ``qwen``, user
``local``, channel context = the session id) through ``storage.faces``; a
later process given the same id (``--resume``, ``--session-id``) or
``--continue`` goes on with it. ``user`` messages queue and run one turn
each, in order; ``control_request``s are answered at once.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from appserver.faces import jobs
from appserver.faces.common import interrupt_quietly, session_thread, turn_id_of
from appserver.faces.qwen.control import SLASH_COMMANDS, ControlRequests
from appserver.faces.qwen.rules import ToolRules, thread_policy
from appserver.faces.qwen.seat import Control, QwenSeat
from appserver.faces.qwen.turn import TERMINAL, TurnStream
from appserver.faces.qwen.wire import Job, Output, make_output, system_message, text_job, user_job
from appserver.protocol.decoding import JsonRejected, loads_client
from appserver.transport.peer_writer import DEFAULT_MAX_BYTES, PeerWriter

if TYPE_CHECKING:
    from appserver.runtime.host import Runtime
    from appserver.transport.stdio import StdioTransport

log = logging.getLogger("appserver.faces.qwen")

FACE = "qwen"
USER_ID = "local"
MAX_SESSION_ID = 256  # a thread's channel context holds it
IGNORED_TYPES = frozenset(
    {"assistant", "system", "result", "stream_event", "control_cancel_request"}
)
Frame = dict[str, Any]


@dataclass
class Settings:
    """The command line, resolved (see ``qwen.configure``)."""

    input_format: str = "stream-json"
    output_format: str = "stream-json"
    partial: bool = False
    mode: str = "default"
    approval_override: str | None = None
    rules: ToolRules = field(default_factory=ToolRules)
    prompt: str | None = None
    session_id: str | None = None
    resume: str | None = None  # "" when given without an id
    continue_session: bool = False
    model: str | None = None
    max_backlog: int = 3 * DEFAULT_MAX_BYTES  # --max-client-backlog (command.py's default)


class SessionError(Exception):
    """The session cannot start (an unknown ``--resume`` id, an invalid id)."""


class Session:
    """The face's state for one process."""

    def __init__(self, runtime: Runtime, transport: StdioTransport, settings: Settings) -> None:
        from appserver.storage.faces import FaceRepository

        self.runtime = runtime
        self.transport = transport
        self.settings = settings
        self.workspace = Path(runtime.threads.workspace)
        self.faces = FaceRepository(runtime.db)
        self.mode = settings.mode
        self.rules = settings.rules
        self.model = settings.model  # set_model before the thread exists
        self.session_id = ""
        self.thread_id: str | None = None
        self.control = Control(self.send)
        self.requests = ControlRequests(self)
        # Chunks show a command's output (x-qwen-terminal): the seat takes its events.
        self.seat = QwenSeat(self, show_commands=settings.output_format == "stream-chunk-json")
        self.out: Output = make_output(
            settings.output_format, settings.input_format, self.write, "", False
        )
        self.stream: TurnStream | None = None
        self.jobs = jobs.JobQueue[Job]()
        self.outcomes: list[str] = []
        # Lines queue here (bounded) and one task writes them: a client that
        # stops reading is dropped (the process ends), it cannot grow the process.
        self._serving = anyio.CancelScope()  # cancelled when the client is dropped
        self.writer = PeerWriter(
            transport.send_batch,
            max_bytes=settings.max_backlog,
            on_stall=self._serving.cancel,
            try_send=transport.try_send,
        )
        self._finished = anyio.Event()  # the worker is done

    # --- the seat's questions ------------------------------------------------------------

    def interactive(self) -> bool:
        settings = self.settings
        return (
            settings.input_format == "stream-json"
            and settings.output_format in ("stream-json", "stream-chunk-json")
            and not self.control.closed
        )

    def trusted(self) -> bool:
        # Asked at each approval: workspace/trust from a --websocket client counts at once.
        return bool(self.runtime.workspace_trusted())

    def others_can_answer(self, thread_id: str) -> bool:
        return any(
            participant is not self.seat
            and not participant.closed
            and participant.can_answer_approvals()
            for participant in self.runtime.bus.subscribers(thread_id)
        )

    # --- output --------------------------------------------------------------------------

    async def write(self, lines: list[str]) -> None:
        """Queue lines (never waits). Once the client closed stdout, or was
        dropped for not reading, lines are discarded; stdin is still served
        in the first case."""
        for line in lines:
            if not self.writer.put(line):
                return

    async def send(self, frame: Frame) -> None:
        await self.out.control(frame)

    async def annotate(self, annotation: Frame) -> None:
        await self.out.annotate(annotation)

    async def respond(self, request_id: str, response: Frame) -> None:
        body = {"subtype": "success", "request_id": request_id, "response": response}
        await self.send({"type": "control_response", "response": body})

    async def refuse(self, request_id: str, error: str) -> None:
        body = {"subtype": "error", "request_id": request_id, "error": error}
        await self.send({"type": "control_response", "response": body})

    # --- the session and its thread ----------------------------------------------------------

    async def open(self) -> None:
        """Settle the session id (``SessionError`` for an unknown ``--resume`` id)."""
        from appserver.runtime.errors import ThreadNotFound
        from appserver.storage.threads import ThreadQuery

        settings = self.settings
        for given in (settings.resume, settings.session_id):
            if given and (len(given) > MAX_SESSION_ID or not given.isprintable()):
                raise SessionError(f"Invalid session id {given[:80]!r}")
        if settings.resume:
            thread_id = await self.faces.thread_of(FACE, settings.resume)
            try:
                if thread_id is None:
                    raise ThreadNotFound(settings.resume)
                await self.runtime.threads.get(thread_id)
            except ThreadNotFound:
                raise SessionError(f"No saved session found with ID {settings.resume}.") from None
            self.session_id = settings.resume
        elif settings.continue_session or settings.resume == "":
            query = ThreadQuery(
                workspace_path=str(self.workspace),
                user_id=None,
                channel_context=None,
                cross_channel_origins=[FACE],
                channel_name=FACE,
                limit=1,
            )
            latest, _ = await self.runtime.threads.list(query)
            if latest and latest[0].channel_context:
                self.session_id = latest[0].channel_context
        elif settings.session_id:
            self.session_id = settings.session_id
        self.session_id = self.session_id or str(uuid.uuid4())
        self.out = make_output(
            settings.output_format,
            settings.input_format,
            self.write,
            self.session_id,
            settings.partial,
            self.requests.capabilities,
        )

    def policy(self) -> str:
        return thread_policy(self.mode, self.settings.approval_override, self.rules)

    async def thread(self) -> str:
        """The session's thread (found, or made and bound on first use)."""
        from appserver.runtime.threads import NewThread

        if self.thread_id is not None:
            return self.thread_id
        settings: Frame = {"approvalPolicy": self.policy()}
        if self.model:
            settings["model"] = self.model
        self.thread_id = await session_thread(
            self.runtime,
            self.faces,
            FACE,
            self.session_id,
            self.seat,
            settings,
            NewThread(
                user_id=USER_ID,
                channel_name=FACE,
                channel_context=self.session_id,
                display_name=f"qwen session {self.session_id}"[:200],
                configuration=dict(settings),
            ),
        )
        return self.thread_id

    def forget_thread(self) -> None:
        """The session's thread is gone (deleted by another client): the next
        :meth:`thread` makes a new one."""
        self.thread_id = None

    async def interrupt_turn(self, thread_id: str, turn_id: str) -> None:
        await interrupt_quietly(self.runtime, thread_id, turn_id)

    async def configure(self, **changes: Any) -> None:
        if self.thread_id is None:
            return
        thread = await self.runtime.threads.get(self.thread_id)
        await self.runtime.threads.configure(
            self.thread_id, {**(thread.configuration or {}), **changes}
        )

    async def current_model(self) -> str:
        if self.thread_id is not None:
            thread = await self.runtime.threads.get(self.thread_id)
            model = (thread.configuration or {}).get("model")
            if model:
                return str(model)
        return self.model or self.runtime.engine.provider.default_model

    # --- the loops -------------------------------------------------------------------------

    async def serve(self, text: str | None = None) -> int:
        """Run until stdin closes (``stream-json``) or the one ``text`` prompt is
        answered; the exit code."""
        try:
            async with anyio.create_task_group() as writing:
                writing.start_soon(self.writer.run)
                try:
                    with self._serving:
                        await self._serve(text)
                finally:
                    self.seat.close()
                    await self.out.close()
                    self.writer.close()  # the writer ends once the lines are out
        finally:
            with anyio.CancelScope(shield=True):
                await self.transport.close(self.writer.close_code)
        if self.writer.dropped is not None:
            return 1  # the client stopped reading and was dropped
        if text is None:
            return 0
        outcome = self.outcomes[-1] if self.outcomes else "failed"
        return {"completed": 0, "cancelled": 130}.get(outcome, 1)

    async def _serve(self, text: str | None) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._pump)
            tg.start_soon(self._worker)
            if text is not None:
                await self.enqueue(text_job(text))
            else:
                if self.settings.prompt:
                    await self.enqueue(text_job(self.settings.prompt))
                await self._read_loop()
            self.control.close()
            self.jobs.close()
            await self._finished.wait()
            tg.cancel_scope.cancel()

    async def _read_loop(self) -> None:
        from appserver.transport.base import FrameRejected, FrameTooLarge, TransportClosed

        while True:
            try:
                line = await self.transport.receive()
            except TransportClosed:
                return
            except FrameTooLarge as exc:
                await self.out.input_error(f"line too long: {exc.detail}")
                continue
            except FrameRejected as exc:
                await self.out.input_error(f"malformed line: {exc.detail}")
                continue
            try:
                await self.handle_line(line)
            except Exception:
                log.exception("a line failed")
                await self.out.input_error("internal error (see the log)")

    async def handle_line(self, line: str) -> None:
        try:
            frame = loads_client(line)
        except JsonRejected as exc:
            await self.out.input_error(f"Failed to parse stream-json line: {exc}")
            return
        if not isinstance(frame, dict):
            await self.out.input_error("Parsed value is not an object")
            return
        kind = frame.get("type")
        if not isinstance(kind, str):
            await self.out.input_error('Missing required "type" field')
        elif kind == "control_response":
            problem = self.control.answer(frame)
            if problem is not None:
                await self.out.input_error(problem)
        elif kind == "control_request":
            await self.requests.control_request(frame)
        elif kind == "user":
            try:
                job = await user_job(frame, self.workspace)
            except ValueError as exc:
                await self.out.input_error(str(exc))
            else:
                await self.enqueue(job)
        elif kind not in IGNORED_TYPES:
            await self.out.input_error(f"unknown message type {kind!r}")

    async def enqueue(self, job: Job) -> None:
        await self.jobs.put(job)

    # --- turns -----------------------------------------------------------------------------

    async def _pump(self) -> None:
        """Every event the seat gets, written out by the stream of its turn."""
        async for event in self.seat.events():
            stream = self.stream
            try:
                if stream is None or stream.done.is_set():
                    continue
                turn_id = turn_id_of(event)
                if turn_id is None or stream.turn_id not in (None, turn_id):
                    continue
                result = await stream.handle(event)
                if result is not None:
                    await self.finish(stream, result)
            except Exception:
                log.exception("translating %s failed", event.kind)
                if stream is not None and event.kind in TERMINAL and not stream.done.is_set():
                    await self.finish(stream, self.no_turn("failed", "internal error"))
            finally:
                self.seat.mark_processed()

    async def finish(self, stream: TurnStream, result: Frame) -> None:
        outcome = stream.outcome or "failed"
        self.outcomes.append(outcome)
        await self.out.result(result, outcome)
        stream.done.set()

    def no_turn(self, outcome: str, message: str | None, text: str = "") -> Frame:
        """The result of a message that started no turn."""
        stream = TurnStream(self.out, self.session_id, "", time.monotonic())
        stream.num_turns = 0
        stream.outcome = outcome
        return stream.result_frame(message, text)

    async def _worker(self) -> None:
        try:
            await self.jobs.work(self._run_reported)
        finally:
            self._finished.set()

    async def _run_reported(self, job: Job) -> None:
        try:
            await self._run(job)
        except Exception:
            log.exception("a turn failed")
            result = self.no_turn("failed", "internal error (see the log)")
            self.outcomes.append("failed")
            await self.out.result(result, "failed")

    async def _run(self, job: Job) -> None:
        if job.kind == "empty":
            self.outcomes.append("failed")
            await self.out.result(
                self.no_turn("failed", "the user message has no content"), "failed"
            )
            return
        model = await self.current_model()
        init = system_message(
            self.session_id,
            "init",
            cwd=str(self.workspace),
            tools=self.runtime.engine.tools.names(),
            mcp_servers=[],
            model=model,
            permission_mode=self.mode,
            slash_commands=SLASH_COMMANDS,
            qwen_code_version=f"appserver {_version()}",
            agents=[],
        )
        await self.out.emit(init)
        stream = TurnStream(self.out, self.session_id, model, time.monotonic())
        stream.compaction = job.kind == "compact"
        self.stream = stream
        if (
            job.kind == "compact"
            and self.thread_id is None
            and not await self.faces.thread_of(FACE, self.session_id)
        ):
            stream.outcome = "completed"
            await self.finish(stream, stream.result_frame(None, "Nothing to compress."))
            return
        if not await self._start(job, stream):
            return
        await stream.done.wait()

    async def _start(self, job: Job, stream: TurnStream) -> bool:
        """Start the job's turn, waiting out one another client runs on the
        thread; ``False`` (its result sent) if it never started."""
        from appserver.runtime.errors import Refusal

        try:
            active = await jobs.start_turn(
                self.runtime, job, self.seat, self.thread, self.forget_thread, self.interrupt_turn
            )
        except Refusal as exc:
            stream.outcome = "failed"
            await self.finish(stream, stream.result_frame(exc.message))
            return False
        if active is None:  # interrupted before its turn started
            stream.outcome = "cancelled"
            stream.num_turns = 0
            await self.finish(stream, stream.result_frame("Operation cancelled."))
            return False
        stream.turn_id = active.record.id
        return True


def _version() -> str:
    from appserver import __version__

    return __version__
