"""``appserver rpc``: zot's RPC mode (``zot rpc``), newline-delimited JSON over stdio.

One process is one session: one thread (channel ``zot``, user ``local``),
made by the first ``prompt`` or ``compact`` and never resumed by a later
process (zot's RPC mode keeps no sessions; the thread is still an ordinary
stored thread that ``thread/list`` shows). ``clear`` starts a new thread.

Commands (``{"id"?, "type", ...}``) get one ``response`` frame each
(``{"type":"response","id"?,"command","success","data"?,"error"?}``, ``id``
echoed only when sent). ``prompt`` and ``compact`` run one at a time in the
order they came; each is answered when it starts (at once when the session
is idle), then streams events (no ``id``) ending with ``done``. Events are
derived from the runtime's:

* ``turn/started`` + the ``userMessage`` item -> ``user_message``, then
  ``turn_start {step:1}`` and ``assistant_start``;
* agent text deltas -> ``text_delta``; ``item/usage/delta`` -> ``usage``
  (with the process's cumulative totals);
* the first tool-execution item after a model call (approval, command,
  result) ends that step: ``assistant_message`` (text and tool calls),
  one ``tool_call`` per call, ``turn_end {stop:"tool_use"}``; command
  output -> ``tool_progress``; ``toolResult`` -> ``tool_result``; the next
  model output opens step N+1 (``turn_start``, ``assistant_start``);
* ``turn/completed`` -> ``assistant_message``, ``turn_end {stop:"end_turn"}``,
  ``done``; ``turn/failed`` -> ``turn_end {stop:"error", error}``,
  ``error {message}``, ``done`` (zot's order); ``turn/cancelled`` (``abort``,
  or the ``interrupt`` approval policy) -> what the model said so far, an
  error ``tool_result`` for each unfinished call, ``turn_end
  {stop:"aborted"}`` (``error`` naming any reason other than an abort), ``done``;
* a compaction turn -> ``compact_done {summary}`` then ``done``.

The seat is the origin of every turn this face starts, so it gets exactly
those turns' events (a turn's events reach its origin without a
subscription); turns other clients run on the thread are not reported.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import anyio

from appserver.faces.common import (
    add_backlog_argument,
    decode_base64,
    interrupt_quietly,
    positive_int,
    store_image,
    system_prompt,
    turn_id_of,
)
from appserver.protocol.decoding import JsonRejected, loads_client

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

    from appserver.faces.seat import Seat
    from appserver.providers.base import Message
    from appserver.runtime.events import Event
    from appserver.runtime.host import Runtime
    from appserver.runtime.turns.model import ActiveTurn
    from appserver.storage.threads import ItemRecord
    from appserver.transport.outbox import text_merger
from appserver.transport.outbox import text_merger
from appserver.transport.stdio import StdioTransport

log = logging.getLogger("appserver.faces.zot")

PROTOCOL_VERSION = 1
# zot's variable, and the name its later releases also read.
TOKEN_VARIABLES = ("ZOTCORE_RPC_TOKEN", "TERVACORE_RPC_TOKEN")
MAX_LINE_BYTES = 16 * 1024 * 1024  # zot's scanner limit
CHANNEL = "zot"
USER_ID = "local"
AUTH_REQUIRED = "auth required: send hello with token first"
BUSY = "agent is busy"
# zot's tool names, accepted by --tools as well as ours.
TOOL_ALIASES = {
    "bash": "shell",
    "read": "read_file",
    "ls": "list_dir",
    "write": "write_file",
    "edit": "edit_file",
}
ABORTED_RESULT = "aborted: the prompt was aborted before the tool finished"
# Item types that belong to running tools, not to the model's answer.
TOOL_ITEMS = frozenset({"approvalRequest", "approvalResponse", "commandExecution", "toolResult"})
MODEL_ITEMS = frozenset({"agentMessage", "reasoningContent", "toolCall"})
MODEL_DELTAS = frozenset(
    {"item/agentMessage/delta", "item/reasoning/delta", "item/toolCall/argumentsDelta"}
)
TERMINAL = frozenset({"turn/completed", "turn/failed", "turn/cancelled"})

Frame = dict[str, Any]


# --- command line --------------------------------------------------------------------


def _tool_list(value: str) -> list[str]:
    from appserver.tools.registry import default_tools

    known = [tool.name for tool in default_tools()]
    names: list[str] = []
    for raw in value.split(","):
        name = TOOL_ALIASES.get(raw.strip(), raw.strip())
        if not name:
            continue
        if name not in known:
            raise argparse.ArgumentTypeError(
                f"unknown tool {raw.strip()!r} (tools: {', '.join(known)})"
            )
        if name not in names:
            names.append(name)
    return names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """zot's flags (``--provider``, ``--model``, ``--base-url``, ``--api-key`` are shared)."""
    group = parser.add_argument_group("zot rpc")
    group.add_argument(
        "--cwd",
        dest="workspace",
        type=Path,
        default=argparse.SUPPRESS,
        metavar="DIR",
        help="zot's name for --workspace",
    )
    group.add_argument("--system-prompt", metavar="TEXT", help="replace the agent's system prompt")
    group.add_argument(
        "--append-system-prompt",
        action="append",
        default=[],
        metavar="TEXT",
        help="append TEXT to the system prompt (repeatable)",
    )
    group.add_argument(
        "--max-steps",
        type=positive_int,
        metavar="N",
        help="model calls per prompt before it fails (default 32)",
    )
    group.add_argument("--no-tools", action="store_true", help="offer the model no tools")
    group.add_argument(
        "--tools",
        type=_tool_list,
        metavar="NAME,...",
        help=(
            "offer only these tools: shell, read_file, list_dir, write_file, edit_file "
            "(zot's bash, read, ls, write, edit also work)"
        ),
    )
    group.add_argument(
        "--reasoning", metavar="LEVEL", help="accepted for zot's clients; has no effect"
    )
    group.add_argument(
        "--no-context-files",
        action="store_true",
        help="accepted for zot's clients; has no effect (no context files are read)",
    )
    add_backlog_argument(group)


def configure(args: argparse.Namespace, options: Any) -> None:
    """Apply this face's flags to the host options (before the host opens)."""
    changes: dict[str, Any] = {
        "system_prompt": system_prompt(
            options.engine.system_prompt, args.system_prompt, args.append_system_prompt
        )
    }
    if args.max_steps is not None:
        changes["max_model_calls"] = args.max_steps
    if changes:
        options.engine = dataclasses.replace(options.engine, **changes)
    if args.no_tools:
        options.tools = []
    elif args.tools is not None:
        options.tools = list(args.tools)


def take_token() -> str | None:
    """The RPC token from the environment (removed from it and from /proc)."""
    token: str | None = None
    for name in TOKEN_VARIABLES:
        value = os.environ.pop(name, None)
        if value and token is None:
            token = value
    if token is not None:
        from appserver.process_secrets import hide_secrets

        hide_secrets(token)
    return token


async def main(
    args: argparse.Namespace, options: Any, host: Any, stdin: IO[bytes], stdout: IO[bytes]
) -> int:
    """Serve zot's RPC protocol on stdin/stdout until stdin closes."""
    from appserver.providers.base import ProviderConfigError
    from appserver.storage.lock import WorkspaceLocked
    from appserver.transport.stdio import StdioTransport

    token = take_token()
    configure(args, options)
    async with AsyncExitStack() as stack:
        try:
            runtime = await stack.enter_async_context(host())
        except ProviderConfigError as exc:
            sys.stderr.write(f"appserver: {exc}\n")
            return 2
        except ValueError as exc:  # e.g. an unknown tool name
            sys.stderr.write(f"appserver: {exc}\n")
            return 2
        except WorkspaceLocked as exc:
            sys.stderr.write(f"appserver: {exc}\n")
            return 1
        transport = await StdioTransport.open(stdin, stdout, max_message_bytes=MAX_LINE_BYTES)
        session = Session(
            runtime, transport, options, args.approval_policy, token, args.max_client_backlog
        )
        return await session.serve()
    return 0  # unreachable: the context manager does not swallow exceptions


# --- the session ---------------------------------------------------------------------


@dataclass
class Totals:
    """Token counts (this runtime prices nothing: cost is 0)."""

    input: int = 0
    output: int = 0

    def wire(self) -> Frame:
        return {
            "input": self.input,
            "output": self.output,
            "cache_read": 0,
            "cache_write": 0,
            "cost_usd": 0.0,
        }


@dataclass
class Job:
    """A ``prompt`` or ``compact`` waiting for (or holding) the session."""

    kind: str
    id: str | None
    parts: list[Any] = field(default_factory=list)
    answered: bool = False  # its response went out
    aborted: bool = False
    thread_id: str | None = None
    turn_id: str | None = None
    waiting: anyio.CancelScope | None = None


class Session:
    """One ``zot rpc`` process: the read loop, the job worker and the thread."""

    def __init__(
        self,
        runtime: Runtime,
        transport: StdioTransport,
        options: Any,
        approval_policy: str | None,
        token: str | None,
        max_backlog: int,
    ) -> None:
        from appserver.faces.seat import Seat
        from appserver.transport.peer_writer import PeerWriter

        self.runtime = runtime
        self.transport = transport
        self.workspace = Path(options.workspace)
        self.approval_policy = approval_policy
        self.token = token
        self.authed = token is None
        # commandExecution items are opt-in for seats: this one wants their
        # output deltas (tool_progress).
        self.seat: Seat = Seat(CHANNEL, topics_hidden=frozenset())
        self.thread_id: str | None = None
        self.model: str | None = None  # set_model before the thread exists
        self.totals = Totals()
        self.pending = 0  # jobs queued or running
        self.current: Job | None = None
        self._serving = anyio.CancelScope()  # cancelled when the client is dropped
        # Frames queue here (bounded) and one task writes them: a client that
        # stops reading is dropped (the process ends), it cannot grow the process.
        self.writer = PeerWriter(
            transport.send_batch, max_bytes=max_backlog, on_stall=self._serving.cancel
        )
        send: MemoryObjectSendStream[Job]
        receive: MemoryObjectReceiveStream[Job]
        send, receive = anyio.create_memory_object_stream[Job](float("inf"))
        self._jobs_in = send
        self._jobs_out = receive

    # --- I/O -------------------------------------------------------------------------

    async def send(self, frame: Frame) -> None:
        """Queue one frame (never waits). Once the client closed stdout, or was
        dropped for not reading, frames are discarded; stdin is still served
        in the first case."""
        from appserver.protocol.encoding import dumps

        line = dumps(frame)  # surrogate-safe: an id may hold a lone surrogate
        self.writer.put(line, _coalescing(frame))

    async def respond(
        self, request_id: str | None, command: str, data: Frame | None = None
    ) -> None:
        frame: Frame = {"type": "response"}
        if request_id is not None:
            frame["id"] = request_id
        frame.update(command=command, success=True)
        if data is not None:
            frame["data"] = data
        await self.send(frame)

    async def fail(self, request_id: str | None, command: str, error: str) -> None:
        frame: Frame = {"type": "response"}
        if request_id is not None:
            frame["id"] = request_id
        frame.update(command=command, success=False, error=error)
        await self.send(frame)

    # --- the loops -------------------------------------------------------------------

    async def serve(self) -> int:
        """Read commands until stdin closes, then finish the queued jobs.

        A client dropped for not reading ends the process at once (exit 1);
        the runtime then cancels the turn in flight, as at any shutdown."""
        code = 1
        try:
            async with anyio.create_task_group() as writing:
                writing.start_soon(self.writer.run)
                try:
                    with self._serving:
                        async with anyio.create_task_group() as tg:
                            tg.start_soon(self._worker)
                            code = await self._read_loop()
                            if code != 0:
                                tg.cancel_scope.cancel()
                            else:
                                self._jobs_in.close()  # the worker drains the queue, then ends
                finally:
                    self.writer.close()  # the writer ends once the frames are out
            return 1 if self.writer.dropped is not None else code
        finally:
            self.seat.close()
            with anyio.CancelScope(shield=True):
                await self.transport.close()

    async def _read_loop(self) -> int:
        from appserver.transport.base import FrameRejected, FrameTooLarge, TransportClosed

        while True:
            try:
                line = await self.transport.receive()
            except TransportClosed:
                return 0
            except FrameTooLarge as exc:
                await self.fail(None, "", f"line too long: {exc.detail}")
                continue
            except FrameRejected as exc:
                await self.fail(None, "", f"malformed json: {exc.detail}")
                continue
            if not line.strip():
                continue
            if not await self._handle(line):
                return 1

    async def _handle(self, line: str) -> bool:
        """Answer one line; ``False`` ends the process (a wrong token)."""
        try:
            frame = loads_client(line)
        except JsonRejected as exc:
            await self.fail(None, "", f"malformed json: {exc}")
            return True
        if not isinstance(frame, dict):
            await self.fail(None, "", "malformed json: expected a JSON object")
            return True
        kind, request_id = frame.get("type", ""), frame.get("id")
        if not isinstance(kind, str) or not (request_id is None or isinstance(request_id, str)):
            await self.fail(None, "", "malformed json: 'type' and 'id' must be strings")
            return True
        request_id = request_id or None  # zot omits an empty id too
        if not self.authed:
            if kind != "hello":
                await self.fail(request_id, kind, AUTH_REQUIRED)
                return True
            if frame.get("token") != self.token:
                await self.fail(request_id, kind, "invalid token")
                return False
            self.authed = True
        try:
            await self._dispatch(kind, request_id, frame)
        except Exception as exc:
            log.exception("command %s failed", kind)
            await self.fail(request_id, kind, f"internal error: {type(exc).__name__}")
        return True

    async def _dispatch(self, kind: str, request_id: str | None, frame: Frame) -> None:
        handler = self._commands().get(kind)
        if handler is None:
            await self.fail(request_id, kind, "unknown command")
            return
        await handler(request_id, frame)

    def _commands(self) -> dict[str, Callable[[str | None, Frame], Awaitable[None]]]:
        return {
            "hello": self._hello,
            "prompt": self._prompt,
            "abort": self._abort,
            "compact": self._compact,
            "get_state": self._get_state,
            "get_messages": self._get_messages,
            "clear": self._clear,
            "set_model": self._set_model,
            "set_reasoning": self._set_reasoning,
            "get_models": self._get_models,
            "ping": self._ping,
        }

    # --- commands --------------------------------------------------------------------

    def _current_model(self) -> str:
        return self.model or self.runtime.engine.provider.default_model

    async def _hello(self, request_id: str | None, frame: Frame) -> None:
        from appserver import __version__

        await self.respond(
            request_id,
            "hello",
            {
                "protocol_version": PROTOCOL_VERSION,
                "version": __version__,
                "provider": self.runtime.engine.provider.name,
                "model": self._current_model(),
            },
        )

    async def _ping(self, request_id: str | None, frame: Frame) -> None:
        await self.respond(request_id, "ping", {"pong": True})

    async def _prompt(self, request_id: str | None, frame: Frame) -> None:
        from appserver.protocol.turns import LocalImagePart, TextPart

        message = frame.get("message", "")
        if message is None:
            message = ""
        if not isinstance(message, str):
            await self.fail(request_id, "prompt", "'message' must be a string")
            return
        try:
            images = await self._save_images(frame.get("images"))
        except ValueError as exc:
            await self.fail(request_id, "prompt", str(exc))
            return
        parts: list[Any] = []
        if message or not images:
            parts.append(TextPart(type="text", text=message))
        parts += [LocalImagePart(type="localImage", path=path) for path in images]
        await self._enqueue(Job("prompt", request_id, parts))

    async def _save_images(self, images: Any) -> list[str]:
        """Decode ``images`` and store each under .craft/attachments/images/<sha256>.<ext>."""
        if images is None:
            return []
        if not isinstance(images, list):
            raise ValueError("'images' must be a list")
        paths: list[str] = []
        for index, image in enumerate(images):
            where = f"images[{index}]"
            if not isinstance(image, dict):
                raise ValueError(f"{where} must be an object")
            data = image.get("data")
            mime_type = image.get("mime_type")
            if mime_type is not None and not isinstance(mime_type, str):
                raise ValueError(f"{where}.mime_type must be a string")
            if not isinstance(data, str):
                raise ValueError(f"{where}.data must be base64 text")
            try:
                path, _ = await store_image(self.workspace, decode_base64(data))
            except ValueError as exc:
                raise ValueError(f"{where}: {exc}") from None
            paths.append(path)
        return paths

    async def _compact(self, request_id: str | None, frame: Frame) -> None:
        await self._enqueue(Job("compact", request_id))

    async def _enqueue(self, job: Job) -> None:
        if self.pending == 0:
            # Idle: it starts now, so answer before reading the next command.
            # A queued job is answered when it starts (zot's order), which
            # also tells the client where its events begin.
            job.answered = True
            await self.respond(job.id, job.kind, {"started": True})
        self.pending += 1
        await self._jobs_in.send(job)

    async def _abort(self, request_id: str | None, frame: Frame) -> None:
        # Answered first: the aborted turn's turn_end and done follow it.
        await self.respond(request_id, "abort")
        job = self.current
        if job is None or job.aborted:
            return
        job.aborted = True
        if job.waiting is not None:
            job.waiting.cancel()
        if job.turn_id is not None and job.thread_id is not None:
            await self._interrupt(job.thread_id, job.turn_id)

    async def _interrupt(self, thread_id: str, turn_id: str) -> None:
        await interrupt_quietly(self.runtime, thread_id, turn_id)

    async def _get_state(self, request_id: str | None, frame: Frame) -> None:
        messages = await self.transcript()
        await self.respond(
            request_id,
            "get_state",
            {
                "provider": self.runtime.engine.provider.name,
                "model": self._current_model(),
                "cwd": str(self.workspace),
                "message_count": len(messages),
                "busy": self.pending > 0,
                "usage": self.totals.wire(),
            },
        )

    async def _get_messages(self, request_id: str | None, frame: Frame) -> None:
        await self.respond(request_id, "get_messages", {"messages": await self.transcript()})

    async def _clear(self, request_id: str | None, frame: Frame) -> None:
        if self.pending:
            await self.fail(request_id, "clear", BUSY)
            return
        self.thread_id = None  # the next prompt starts a new thread; this one stays stored
        await self.respond(request_id, "clear")

    async def _set_model(self, request_id: str | None, frame: Frame) -> None:
        from appserver.providers.base import ProviderUnavailable

        model = frame.get("model")
        if not isinstance(model, str) or not model:
            await self.fail(request_id, "set_model", "'model' must be a non-empty string")
            return
        provider = self.runtime.engine.provider
        try:
            known = [info.id for info in await provider.list_models()]
        except ProviderUnavailable as exc:
            await self.fail(request_id, "set_model", f"cannot list models: {exc.message}")
            return
        if model not in known:
            await self.fail(
                request_id, "set_model", f'unknown model "{model}" for provider {provider.name}'
            )
            return
        self.model = model
        if self.thread_id is not None:
            thread = await self.runtime.threads.get(self.thread_id)
            config = dict(thread.configuration or {})
            config["model"] = model
            await self.runtime.threads.configure(self.thread_id, config)
        await self.respond(request_id, "set_model", {"model": model})

    async def _set_reasoning(self, request_id: str | None, frame: Frame) -> None:
        await self.respond(request_id, "set_reasoning")  # accepted; nothing to set

    async def _get_models(self, request_id: str | None, frame: Frame) -> None:
        from appserver.providers.base import ProviderUnavailable

        provider = self.runtime.engine.provider
        try:
            infos = await provider.list_models()
        except ProviderUnavailable as exc:
            await self.fail(request_id, "get_models", f"cannot list models: {exc.message}")
            return
        models = [
            {
                "id": info.id,
                "provider": provider.name,
                # Unknown to the providers' model lists: zot's zero values.
                "context_window": 0,
                "max_output": 0,
                "reasoning": False,
            }
            for info in infos
        ]
        await self.respond(request_id, "get_models", {"models": models})

    # --- the thread ------------------------------------------------------------------

    async def _thread(self) -> str:
        """This session's thread, made on first use."""
        from appserver.runtime.threads import NewThread

        if self.thread_id is None:
            config: dict[str, Any] = {}
            if self.approval_policy:
                config["approvalPolicy"] = self.approval_policy
            if self.model:
                config["model"] = self.model
            thread = await self.runtime.threads.create(
                NewThread(
                    user_id=USER_ID,
                    channel_name=CHANNEL,
                    display_name=f"zot rpc (pid {os.getpid()})",
                    configuration=config or None,
                )
            )
            self.thread_id = thread.id
        return self.thread_id

    async def transcript(self) -> list[Frame]:
        """The thread's conversation as the model sees it now, as zot messages."""
        from appserver.runtime.history import messages_from_items

        if self.thread_id is None:
            return []
        repo = self.runtime.repo
        turns, _ = await repo.turns(self.thread_id)
        stored = await repo.items(self.thread_id, [turn.id for turn in turns])
        items = [item for turn in turns for item in stored[turn.id]]
        messages = await anyio.to_thread.run_sync(messages_from_items, items)
        return zot_messages(messages, items)

    # --- jobs ------------------------------------------------------------------------

    async def _worker(self) -> None:
        async with self._jobs_out:
            async for job in self._jobs_out:
                self.current = job
                try:
                    await self._run(job)
                except Exception:
                    log.exception("%s failed", job.kind)
                    await self.send({"type": "error", "message": f"internal error in {job.kind}"})
                    await self.send({"type": "done"})
                finally:
                    self.current = None
                    self.pending -= 1

    async def _run(self, job: Job) -> None:
        if not job.answered:
            await self.respond(job.id, job.kind, {"started": True})
        active = await self._start(job)
        if active is None:
            return
        if job.kind == "prompt":
            await PromptStream(self, active.record.id).run()
        else:
            await CompactStream(self, active.record.id).run()

    async def _start(self, job: Job) -> ActiveTurn | None:
        """Start the job's turn, waiting out a turn another client runs on the
        thread; ``None`` (after the closing events) if it never started."""
        from appserver.runtime.errors import Refusal, ThreadNotFound, TurnInProgress

        recreated = False
        while not job.aborted:
            thread_id = job.thread_id = await self._thread()
            try:
                if job.kind == "prompt":
                    active = await self.runtime.turns.start(thread_id, job.parts, origin=self.seat)
                else:
                    active = await self.runtime.turns.compact(thread_id, origin=self.seat)
            except TurnInProgress:
                other = self.runtime.engine.active.get(thread_id)
                if other is not None:
                    with anyio.CancelScope() as job.waiting:
                        await other.done.wait()
                    job.waiting = None
                else:
                    await anyio.sleep(0.01)  # it is finishing: try again
                continue
            except ThreadNotFound:
                if recreated:
                    raise
                recreated = True
                self.thread_id = None  # deleted by another client: a new one
                continue
            except Refusal as exc:
                await self.send({"type": "error", "message": exc.message})
                await self.send({"type": "done"})
                return None
            job.turn_id = active.record.id
            if job.aborted:  # abort came while the turn was being stored
                await self._interrupt(thread_id, active.record.id)
            return active
        await self.send({"type": "turn_end", "stop": "aborted"})
        await self.send({"type": "done"})
        return None

    def add_usage(self, input_tokens: int, output_tokens: int) -> Frame:
        self.totals.input += input_tokens
        self.totals.output += output_tokens
        usage = Totals(input_tokens, output_tokens).wire()
        usage["cumulative"] = self.totals.wire()
        return usage


def _coalescing(frame: Frame) -> tuple[object, Callable[[list[str]], str]] | None:
    """Streamed text a lagging client may get in fewer, larger frames."""
    kind = frame.get("type")
    if kind == "text_delta":
        return ("text_delta",), _MERGE_DELTAS
    if kind == "tool_progress":
        return ("tool_progress", frame.get("id")), _MERGE_PROGRESS
    return None


_MERGE_DELTAS = text_merger("delta")
_MERGE_PROGRESS = text_merger("text")


# --- event translation -----------------------------------------------------------------


def _item_of(event: Event) -> Any:
    return getattr(event.params, "item", None)


class PromptStream:
    """Translates one prompt turn's runtime events into zot events."""

    def __init__(self, session: Session, turn_id: str) -> None:
        self.session = session
        self.turn_id = turn_id
        self.step = 0
        self.open = False  # a model call (step) is in progress
        self.text = ""
        self.calls: list[Frame] = []  # the open step's tool calls
        self.step_time: str | None = None
        self.running: dict[str, str] = {}  # call id -> name, results still to come
        self.commands: dict[str, str] = {}  # commandExecution item id -> call id

    async def emit(self, frame: Frame) -> None:
        await self.session.send(frame)

    async def run(self) -> None:
        seat = self.session.seat
        while True:
            event = await seat.next_event()
            if turn_id_of(event) != self.turn_id:
                continue
            if await self.handle(event):
                return

    async def handle(self, event: Event) -> bool:
        """Translate one event; ``True`` once the turn is over."""
        kind = event.kind
        item = _item_of(event)
        if kind == "item/completed" and item is not None and item.type == "userMessage":
            await self.emit(
                {
                    "type": "user_message",
                    "content": user_blocks(item.payload),
                    "time": item.created_at,
                }
            )
            if self.step == 0:
                await self.begin_step()
        elif kind in MODEL_DELTAS or (
            kind in ("item/started", "item/completed")
            and item is not None
            and item.type in MODEL_ITEMS
        ):
            await self.model_output(event)
        elif kind == "item/usage/delta":
            if not self.open:
                await self.begin_step()
            params = event.params
            await self.emit(
                {
                    "type": "usage",
                    **self.session.add_usage(
                        int(getattr(params, "input_tokens", 0)),
                        int(getattr(params, "output_tokens", 0)),
                    ),
                }
            )
        elif item is not None and item.type in TOOL_ITEMS:
            if self.open:
                await self.end_step("tool_use")
            if kind == "item/started" and item.type == "commandExecution":
                call_id = str(item.payload.get("callId") or "")
                self.commands[item.id] = call_id
            elif kind == "item/completed" and item.type == "toolResult":
                call_id = str(item.payload.get("callId", ""))
                self.running.pop(call_id, None)
                await self.emit(
                    {
                        "type": "tool_result",
                        "id": call_id,
                        "is_error": not item.payload.get("success", False),
                        "content": [{"type": "text", "text": str(item.payload.get("result", ""))}],
                    }
                )
        elif kind == "item/commandExecution/outputDelta":
            item_id = str(getattr(event.params, "item_id", ""))
            command_call = self.commands.get(item_id)
            if command_call is not None:
                delta = str(getattr(event.params, "delta", ""))
                await self.emit({"type": "tool_progress", "id": command_call, "text": delta})
        elif kind in TERMINAL:
            await self.finish(event)
            return True
        return False

    async def begin_step(self) -> None:
        self.step += 1
        self.open = True
        self.text = ""
        self.calls = []
        self.step_time = None
        await self.emit({"type": "turn_start", "step": self.step})
        await self.emit({"type": "assistant_start"})

    async def model_output(self, event: Event) -> None:
        if not self.open:
            await self.begin_step()
        item = _item_of(event)
        if event.kind == "item/agentMessage/delta":
            delta = str(getattr(event.params, "delta", ""))
            self.text += delta
            await self.emit({"type": "text_delta", "delta": delta})
        elif item is None:
            return
        elif event.kind == "item/started" and item.type in ("agentMessage", "toolCall"):
            self.step_time = self.step_time or item.created_at
        elif event.kind == "item/completed" and item.type == "agentMessage":
            self.text = str(item.payload.get("text", self.text))
        elif event.kind == "item/completed" and item.type == "toolCall":
            self.step_time = self.step_time or item.created_at
            payload = item.payload
            self.calls.append(
                {
                    "type": "tool_call",
                    "id": str(payload.get("callId", "")),
                    "name": str(payload.get("toolName", "")),
                    "args": payload.get("arguments") or {},
                }
            )

    async def close_step(self) -> None:
        """The open step's model call is over: its assistant message, then one
        ``tool_call`` per call (whose results are now awaited)."""
        from appserver.protocol.ids import now_iso

        content: list[Frame] = [{"type": "text", "text": self.text}] if self.text else []
        content += self.calls
        if content:
            time = self.step_time or now_iso()
            await self.emit({"type": "assistant_message", "content": content, "time": time})
        for call in self.calls:
            await self.emit(dict(call))
            self.running[call["id"]] = call["name"]
        self.open = False

    async def end_step(self, stop: str) -> None:
        await self.close_step()
        await self.emit(turn_end(stop))

    async def settle_running(self, why: str) -> None:
        """An error result for each call the turn ended before answering."""
        for call_id in list(self.running):
            await self.emit(
                {
                    "type": "tool_result",
                    "id": call_id,
                    "is_error": True,
                    "content": [{"type": "text", "text": why}],
                }
            )
        self.running.clear()

    async def finish(self, event: Event) -> None:
        kind = event.kind
        if kind == "turn/completed":
            if not self.open:
                await self.begin_step()  # a model call that streamed nothing
            await self.end_step("end_turn")
        elif kind == "turn/failed":
            message = str(getattr(event.params, "error", "") or "the prompt failed")
            if self.open:
                await self.close_step()
            await self.settle_running(f"failed: {message}")
            await self.emit(turn_end("error", message))
            await self.emit({"type": "error", "message": message})
        else:
            reason = str(getattr(event.params, "reason", "") or "interrupted")
            if self.open:
                await self.close_step()  # what the model said before the abort is kept
            await self.settle_running(ABORTED_RESULT)
            why = None if reason in ("interrupted", "serverShutdown") else reason
            await self.emit(turn_end("aborted", why))
        await self.emit({"type": "done"})


class CompactStream:
    """One compaction turn: ``compact_done {summary}`` (or ``error``), then ``done``."""

    def __init__(self, session: Session, turn_id: str) -> None:
        self.session = session
        self.turn_id = turn_id
        self.summary: str | None = None
        self.skipped: str | None = None

    async def run(self) -> None:
        session = self.session
        while True:
            event = await session.seat.next_event()
            if turn_id_of(event) != self.turn_id:
                continue
            kind = event.kind
            item = _item_of(event)
            if kind == "item/completed" and item is not None and item.type == "systemNotice":
                if item.payload.get("kind") == "compacted":
                    self.summary = str(item.payload.get("summary", ""))
            elif kind == "system/event" and getattr(event.params, "kind", "") == "compactSkipped":
                self.skipped = str(getattr(event.params, "message", "") or "nothing to compact")
            elif kind == "item/usage/delta":
                params = event.params
                session.add_usage(
                    int(getattr(params, "input_tokens", 0)),
                    int(getattr(params, "output_tokens", 0)),
                )
            elif kind in TERMINAL:
                break
        if event.kind == "turn/completed":
            if self.summary is not None:
                await session.send({"type": "compact_done", "summary": self.summary})
            else:
                await session.send(
                    {"type": "error", "message": self.skipped or "nothing to compact"}
                )
        elif event.kind == "turn/failed":
            message = str(getattr(event.params, "error", "") or "compaction failed")
            await session.send({"type": "error", "message": message})
        else:
            reason = str(getattr(event.params, "reason", "") or "interrupted")
            why = None if reason in ("interrupted", "serverShutdown") else reason
            await session.send(turn_end("aborted", why))
        await session.send({"type": "done"})


def turn_end(stop: str, error: str | None = None) -> Frame:
    frame: Frame = {"type": "turn_end", "stop": stop}
    if error:
        frame["error"] = error
    return frame


# --- transcript ------------------------------------------------------------------------


def user_blocks(payload: dict[str, Any]) -> list[Frame]:
    """A stored user message's content as zot blocks (text, then images)."""
    blocks: list[Frame] = []
    for part in payload.get("materializedInputParts") or []:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text" and part.get("text"):
            blocks.append({"type": "text", "text": str(part["text"])})
        elif part.get("type") == "localImage":
            try:
                size = os.path.getsize(str(part.get("path", "")))
            except OSError:
                size = 0
            mime_type = str(part.get("mimeType") or "")
            blocks.append({"type": "image", "mime_type": mime_type, "bytes": size})
    if not blocks and payload.get("text"):
        blocks.append({"type": "text", "text": str(payload["text"])})
    return blocks


def _image_size(data_base64: str) -> int:
    padding = len(data_base64) - len(data_base64.rstrip("="))
    return len(data_base64) * 3 // 4 - padding


def zot_messages(messages: list[Message], items: list[ItemRecord]) -> list[Frame]:
    """``messages`` (from ``messages_from_items(items)``) as zot messages.

    Tool results of one model call form one ``tool`` message, as in zot.
    Each message's ``time`` is its item's ``created_at``: the summary of a
    compaction has the notice's, and the rest (a suffix of the conversation)
    are matched to their items from the end.
    """
    from appserver.runtime.history import SUMMARY_PREFIX

    results = {
        str(item.payload.get("callId", "")): item for item in items if item.type == "toolResult"
    }
    calls = {str(item.payload.get("callId", "")): item for item in items if item.type == "toolCall"}
    notices = [
        item
        for item in items
        if item.type == "systemNotice" and item.payload.get("kind") == "compacted"
    ]
    user_times = [item.created_at for item in items if item.type == "userMessage"]
    text_times = [
        item.created_at
        for item in items
        if item.type == "agentMessage" and str(item.payload.get("text", ""))
    ]
    user_count = sum(
        1 for m in messages if m.role == "user" and not m.content.startswith(SUMMARY_PREFIX)
    )
    text_count = sum(1 for m in messages if m.role == "assistant" and m.content)
    # The i-th kept user message is the (len - count + i)-th user item.
    user_times = user_times[max(0, len(user_times) - user_count) :] if user_count else []
    text_times = text_times[max(0, len(text_times) - text_count) :] if text_count else []
    out: list[Frame] = []
    last_time = ""
    for message in messages:
        time = last_time
        if message.role == "user":
            if message.content.startswith(SUMMARY_PREFIX) and notices:
                time = notices[-1].created_at
            elif user_times:
                time = user_times.pop(0)
            blocks: list[Frame] = []
            if message.content:
                blocks.append({"type": "text", "text": message.content})
            blocks += [
                {
                    "type": "image",
                    "mime_type": image.media_type,
                    "bytes": _image_size(image.data_base64),
                }
                for image in message.images
            ]
            out.append({"role": "user", "content": blocks, "time": time})
        elif message.role == "assistant":
            if message.content and text_times:
                time = text_times.pop(0)
            elif message.tool_calls and message.tool_calls[0].call_id in calls:
                time = calls[message.tool_calls[0].call_id].created_at
            blocks = [{"type": "text", "text": message.content}] if message.content else []
            blocks += [
                {"type": "tool_call", "id": call.call_id, "name": call.name, "args": call.arguments}
                for call in message.tool_calls
            ]
            out.append({"role": "assistant", "content": blocks, "time": time})
        elif message.role == "tool":
            call_id = message.tool_call_id or ""
            result = results.get(call_id)
            if result is not None:
                time = result.created_at
            block = {
                "type": "tool_result",
                "call_id": call_id,
                "is_error": result is None or not result.payload.get("success", False),
                "content": [{"type": "text", "text": message.content}],
            }
            if out and out[-1]["role"] == "tool":
                out[-1]["content"].append(block)
            else:
                out.append({"role": "tool", "content": [block], "time": time})
        last_time = time
    return out
