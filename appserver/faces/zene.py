"""Zene Host Protocol v1: ``appserver host --protocol v1 --bridge-compat --single-request``.

The command-provider contract of clawbridge (``CLAWBRIDGE_CMD_PROTOCOL=zene-host-v1``):
one JSON request per stdin line, one flat JSON response per stdout line, logs on
stderr. A request's ``session_id`` names an ordinary thread of the workspace
(``face_sessions``: face ``zene``), its ``prompt`` becomes one turn there, and the
turn's last agent message is the response ``text``. ``timeout_ms`` is a hard
limit (the turn is interrupted and ``TIMEOUT`` answered); ``idempotency_key``
replays a stored successful response (``face_replies``, kept for a TTL).

``--single-request`` reads one line, answers it and exits (a one-shot process per
request: the workspace lock queues processes of one workspace). Without it the
process serves one request per line until stdin closes: different sessions at
once, one session's requests in arrival order.

Exit codes (see docs/faces.md): 0 once a response was written (with
``--bridge-compat`` even for ``INVALID_REQUEST``, because clawbridge ignores
stdout when the status is not 0); 1 the client stopped reading and was
dropped (``--max-client-backlog``); 2 no request (EOF, blank input, stdin
timeout: nothing written) or, without ``--bridge-compat``, an invalid request;
3 provider configuration failure; 4 the runtime could not be opened. With 3
and 4 the request that was read is still answered on stdout.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from appserver.faces.common import add_backlog_argument, interrupt_quietly, session_thread
from appserver.protocol.decoding import JsonRejected, loads_client

if TYPE_CHECKING:
    from appserver.faces.seat import Seat
    from appserver.runtime.events import Event
    from appserver.runtime.host import Runtime
    from appserver.transport.stdio import StdioTransport

log = logging.getLogger("appserver.faces.zene")

FACE = "zene"
PROTOCOL_VERSION = 1
DEFAULT_TIMEOUT_MS = 120_000
DEFAULT_MAX_INPUT_BYTES = 1024 * 1024
DEFAULT_STDIN_TIMEOUT_MS = 15_000
DEFAULT_IDEMPOTENCY_TTL_SEC = 600
# How long a long-lived process waits at start for another one to leave the workspace.
LONG_LIVED_LOCK_WAIT = 5.0
# After a timeout, how long to wait for the interrupted turn to wind down.
INTERRUPT_GRACE = 5.0
# A long-lived process reads no further request while this many are unanswered
# (as many as a JSON-RPC connection may have in flight): the client's writes
# wait instead, so a burst of requests cannot grow the process without bound.
MAX_PENDING_REQUESTS = 32

INVALID_REQUEST = "INVALID_REQUEST"
TIMEOUT = "TIMEOUT"
PROVIDER_AUTH = "PROVIDER_AUTH"
PROVIDER_RATE_LIMIT = "PROVIDER_RATE_LIMIT"
PROVIDER_DOWN = "PROVIDER_DOWN"
INTERNAL = "INTERNAL"

# The turn's error item code -> the protocol's error code (anything else: INTERNAL).
PROVIDER_CODES = {
    "provider_auth": PROVIDER_AUTH,
    "provider_rate_limit": PROVIDER_RATE_LIMIT,
    "provider_unavailable": PROVIDER_DOWN,
    "provider_timeout": PROVIDER_DOWN,
}

EXIT_OK = 0
EXIT_STALLED = 1  # the client stopped reading its responses: it was dropped
EXIT_INPUT = 2
EXIT_CONFIG = 3
EXIT_RUNTIME = 4

_TERMINAL = frozenset({"turn/completed", "turn/failed", "turn/cancelled"})
_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


# --- command line ----------------------------------------------------------------------


def _flag(value: str) -> bool:
    word = value.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def _count(minimum: int) -> Callable[[str], int]:
    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {value!r}") from None
        if number < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {number}")
        return number

    return parse


def _env_int(name: str, default: int) -> int:
    try:
        return max(0, int(os.environ.get(name, "")))
    except ValueError:
        return default


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This face's own flags (the shared ones are added by the CLI)."""
    group = parser.add_argument_group("Zene Host Protocol v1")
    group.add_argument(
        "--protocol",
        choices=["v1"],
        default="v1",
        help="host protocol version (only v1)",
    )
    group.add_argument(
        "--bridge-compat",
        action="store_true",
        help=(
            "clawbridge compatibility: exit 0 whenever a response line was written, even for "
            "INVALID_REQUEST (clawbridge ignores stdout when the exit status is not 0)"
        ),
    )
    group.add_argument(
        "--single-request",
        nargs="?",
        const=True,
        default=False,
        type=_flag,
        metavar="true|false",
        help=(
            "answer one request line and exit (bare flag or `true`); without it, or with "
            "`false`, serve one request per line until stdin closes"
        ),
    )
    group.add_argument(
        "--max-input-bytes",
        type=_count(1),
        default=DEFAULT_MAX_INPUT_BYTES,
        metavar="N",
        help="a request line longer than N bytes is INVALID_REQUEST (default 1048576)",
    )
    group.add_argument(
        "--stdin-timeout-ms",
        type=_count(0),
        default=_env_int("ZENE_STDIN_TIMEOUT_MS", DEFAULT_STDIN_TIMEOUT_MS),
        metavar="N",
        help=(
            "with --single-request: exit 2 if no request line arrives within N ms; 0 waits "
            "forever (default $ZENE_STDIN_TIMEOUT_MS, else 15000)"
        ),
    )
    group.add_argument(
        "--idempotency-ttl-sec",
        type=_count(0),
        default=_env_int("ZENE_IDEMPOTENCY_TTL_SEC", DEFAULT_IDEMPOTENCY_TTL_SEC),
        metavar="N",
        help=(
            "a repeated (session_id, idempotency_key) within N seconds gets the stored "
            "response again; 0 turns replays off (default $ZENE_IDEMPOTENCY_TTL_SEC, else 600)"
        ),
    )
    add_backlog_argument(group)


# --- requests and responses ------------------------------------------------------------


@dataclass
class Request:
    """A validated ``run`` request."""

    request_id: str
    session_id: str
    prompt: str
    channel_id: str | None
    agent: str | None
    timeout_ms: float
    idempotency_key: str | None
    received: float  # time.monotonic() when the line was read

    @property
    def deadline(self) -> float:
        return self.received + self.timeout_ms / 1000

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())


class Rejected(Exception):
    """The line is not a valid request: answered ``INVALID_REQUEST``."""

    def __init__(self, message: str, request_id: str = "", session_id: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.request_id = request_id
        self.session_id = session_id


def _usage(prompt_tokens: int = 0, completion_tokens: int = 0) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def response(
    request_id: str,
    session_id: str,
    *,
    text: str = "",
    error_code: str | None = None,
    error_message: str | None = None,
    usage: dict[str, int] | None = None,
) -> dict[str, Any]:
    """The flat response object (``ok`` is true exactly when there is no error)."""
    return {
        "ok": error_code is None,
        "request_id": request_id,
        "session_id": session_id,
        "text": text if error_code is None else "",
        "error_code": error_code,
        "error_message": error_message,
        "usage": usage or _usage(),
    }


def failure(
    request: Request, code: str, message: str, usage: dict[str, int] | None = None
) -> dict[str, Any]:
    return response(
        request.request_id, request.session_id, error_code=code, error_message=message, usage=usage
    )


def encode(message: dict[str, Any]) -> str:
    from appserver.protocol.encoding import dumps

    return dumps(message)  # one line, lone surrogates (echoed ids) escaped


def _string(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _is_text(value: str) -> bool:
    """No lone surrogate (a JSON "\\ud800" escape), which is not text."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_request(line: str, received: float) -> Request:
    """Validate one request line (raises :class:`Rejected`)."""
    try:
        data = loads_client(line)
    except JsonRejected as exc:
        raise Rejected(f"request is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise Rejected("request must be a JSON object")
    request_id, session_id = _string(data.get("request_id")), _string(data.get("session_id"))

    def reject(message: str) -> Rejected:
        return Rejected(message, request_id, session_id)

    version = data.get("protocol_version", PROTOCOL_VERSION)
    if isinstance(version, bool) or version != PROTOCOL_VERSION:
        raise reject(f"unsupported protocol_version {json.dumps(version)}: expected 1")
    kind = data.get("type", "run")
    if kind != "run":
        raise reject(f'unsupported request type {json.dumps(kind)}: expected "run"')
    for name in ("request_id", "session_id", "prompt"):
        value = data.get(name)
        if value is None:
            raise reject(f"missing required field {name}")
        if not isinstance(value, str):
            raise reject(f"field {name} must be a string")
        if not value.strip():
            raise reject(f"field {name} must not be empty")
    optional: dict[str, str | None] = {}
    for name in ("channel_id", "agent", "idempotency_key"):
        value = data.get(name)
        if value is not None and not isinstance(value, str):
            raise reject(f"field {name} must be a string")
    for name in ("request_id", "session_id", "prompt", "channel_id", "agent", "idempotency_key"):
        value = data.get(name)
        if isinstance(value, str) and not _is_text(value):
            raise reject(f"field {name} contains a lone UTF-16 surrogate")
        optional[name] = value.strip() if isinstance(value, str) and value.strip() else None
    timeout = data.get("timeout_ms")
    if timeout is None:
        timeout = DEFAULT_TIMEOUT_MS
    elif (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise reject("field timeout_ms must be a positive number")
    return Request(
        request_id=data["request_id"],
        session_id=data["session_id"],
        prompt=data["prompt"],
        channel_id=optional["channel_id"],
        agent=optional["agent"],
        timeout_ms=float(timeout),
        idempotency_key=optional["idempotency_key"],
        received=received,
    )


def invalid(rejected: Rejected) -> dict[str, Any]:
    return response(
        rejected.request_id,
        rejected.session_id,
        error_code=INVALID_REQUEST,
        error_message=rejected.message,
    )


def _iso_ago(seconds: float) -> str:
    """``now_iso()`` of ``seconds`` ago (same fixed-width format, so it compares as text)."""
    from datetime import UTC, datetime, timedelta

    moment = datetime.now(UTC) - timedelta(seconds=seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


# --- answering requests on an open runtime ----------------------------------------------


class Conversations:
    """Answers requests on one runtime: session -> thread, idempotent replays,
    one turn per request under the request's deadline."""

    def __init__(self, runtime: Runtime, args: argparse.Namespace) -> None:
        from appserver.storage.faces import FaceRepository

        self.runtime = runtime
        self.faces = FaceRepository(runtime.db)
        self.approval_policy: str | None = args.approval_policy
        self.ttl: int = args.idempotency_ttl_sec

    async def answer(self, request: Request) -> dict[str, Any]:
        """The response to ``request`` (never raises but for cancellation)."""
        try:
            return await self._answer(request)
        except Exception:
            log.exception("request %s of session %s failed", request.request_id, request.session_id)
            return failure(request, INTERNAL, "internal error (see the host's stderr log)")

    def _reply_key(self, request: Request) -> str | None:
        """The stored reply's key: the pair ``(session_id, idempotency_key)``
        as a JSON array, so no characters in either can make another pair's key."""
        if request.idempotency_key is None or self.ttl <= 0:
            return None
        return json.dumps([request.session_id, request.idempotency_key])

    async def _answer(self, request: Request) -> dict[str, Any]:
        reply_key = self._reply_key(request)
        if reply_key is not None:
            stored = await self.faces.reply(FACE, reply_key)
            if stored is not None and stored[1] >= _iso_ago(self.ttl):
                replay: dict[str, Any] = json.loads(stored[0])
                replay["request_id"] = request.request_id
                replay["replayed"] = True
                return replay
        from appserver.faces.seat import Seat

        seat = Seat(FACE)
        try:
            thread_id = await self._thread(request, seat)
            result = await self._run(request, thread_id, seat)
        finally:
            seat.close()
        if reply_key is not None and result["ok"]:
            from appserver.protocol.ids import now_iso

            await self.faces.store_reply(FACE, reply_key, encode(result), now_iso())
            await self.faces.forget_replies_before(FACE, _iso_ago(self.ttl))
        return result

    async def _thread(self, request: Request, seat: Seat) -> str:
        """The session's thread (made and bound on first use, or when gone)."""
        from appserver.runtime.threads import NewThread

        policy = self.approval_policy
        return await session_thread(
            self.runtime,
            self.faces,
            FACE,
            request.session_id,
            seat,
            {"approvalPolicy": policy} if policy is not None else {},
            NewThread(
                user_id=request.session_id,
                channel_name=FACE,
                channel_context=request.channel_id,
                display_name=f"zene session {request.session_id}"[:200],
                configuration={"approvalPolicy": policy} if policy else None,
            ),
        )

    async def _run(self, request: Request, thread_id: str, seat: Seat) -> dict[str, Any]:
        import anyio

        from appserver.protocol.turns import TextPart
        from appserver.runtime.errors import TurnInProgress

        runtime = self.runtime
        await runtime.threads.subscribe(thread_id, seat)
        turn_id: str | None = None
        terminal: Event | None = None
        try:
            with anyio.move_on_after(request.remaining()):
                while turn_id is None:
                    try:
                        active = await runtime.turns.start(
                            thread_id, [TextPart(type="text", text=request.prompt)], origin=seat
                        )
                    except TurnInProgress:
                        # Someone else (a WebSocket client) runs a turn here: wait for it.
                        other = runtime.engine.active.get(thread_id)
                        if other is not None:
                            await other.done.wait()
                        continue
                    turn_id = active.record.id
                terminal = await _terminal(seat, turn_id)
            if terminal is None:
                if turn_id is not None:
                    await interrupt_quietly(runtime, thread_id, turn_id)
                    with anyio.move_on_after(INTERRUPT_GRACE):
                        await _terminal(seat, turn_id)
                return failure(
                    request, TIMEOUT, f"request exceeded timeout_ms ({request.timeout_ms:g} ms)"
                )
        finally:
            runtime.threads.unsubscribe(thread_id, seat)
        return outcome(request, terminal)


async def _terminal(seat: Seat, turn_id: str) -> Event:
    """The terminal event of ``turn_id`` (skipping everything else)."""
    while True:
        event = await seat.next_event()
        turn = getattr(event.params, "turn", None) if event.kind in _TERMINAL else None
        if turn is not None and turn.id == turn_id:
            return event


def outcome(request: Request, terminal: Event) -> dict[str, Any]:
    """The response for a turn's terminal event."""
    turn: Any = terminal.params.turn  # type: ignore[attr-defined]
    items = list(turn.items or [])
    tokens = turn.token_usage
    usage = _usage(tokens.input_tokens, tokens.output_tokens) if tokens else _usage()
    if terminal.kind == "turn/failed":
        errors = [item for item in items if item.type == "error"]
        code = str(errors[-1].payload.get("code", "")) if errors else ""
        message = str(getattr(terminal.params, "error", "") or "the turn failed")
        return failure(request, PROVIDER_CODES.get(code, INTERNAL), message, usage)
    if terminal.kind == "turn/cancelled":
        reason = str(getattr(terminal.params, "reason", "") or "cancelled")
        return failure(request, INTERNAL, f"the turn was cancelled ({reason})", usage)
    texts = [str(item.payload.get("text") or "") for item in items if item.type == "agentMessage"]
    text = next((t for t in reversed(texts) if t.strip()), "")
    if not text:
        return failure(request, INTERNAL, "empty response", usage)
    if usage["total_tokens"] <= 0:
        # The provider reported no usage: estimate (about 4 characters a token),
        # since clawbridge refuses a success with zero tokens as suspicious.
        usage = _usage(max(1, math.ceil(len(request.prompt) / 4)), max(1, math.ceil(len(text) / 4)))
    return response(request.request_id, request.session_id, text=text, usage=usage)


# --- the process ------------------------------------------------------------------------


def _leaf(exc: Exception) -> Exception:
    """The one exception inside (nested) single-member exception groups."""
    while isinstance(exc, ExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


@dataclass
class StartupFailure:
    exit_code: int
    error_code: str
    message: str


class ZeneFace:
    """One process: its stdio, its flags, the runtime once opened."""

    def __init__(self, args: argparse.Namespace, transport: StdioTransport) -> None:
        from appserver.transport.peer_writer import PeerWriter

        self.args = args
        self.transport = transport
        self.bridge_compat: bool = args.bridge_compat
        # Responses queue here (bounded) and one task writes them: a client
        # that stops reading is dropped, it cannot grow the process.
        self.writer = PeerWriter(
            transport.send_batch, max_bytes=args.max_client_backlog, on_stall=self._stalled
        )
        self._serving: Any = None  # the long-lived loop's cancel scope

    def _stalled(self) -> None:
        if self._serving is not None:
            self._serving.cancel()  # stop reading; the runtime cancels the turns in flight

    async def write(self, message: dict[str, Any]) -> None:
        """Queue one response line (never waits for the client)."""
        if not self.writer.put(encode(message)):
            why = self.writer.dropped or "stdout is closed"
            log.warning("response to %s lost: %s", message.get("request_id"), why)

    async def receive(self) -> str | Rejected | None:
        """The next request line, a :class:`Rejected` for an unusable one, or
        ``None`` at end of input."""
        from appserver.transport.base import FrameRejected, FrameTooLarge, TransportClosed

        limit = self.args.max_input_bytes
        try:
            return await self.transport.receive()
        except FrameTooLarge:
            return Rejected(f"request exceeds --max-input-bytes ({limit} bytes)")
        except FrameRejected as exc:
            return Rejected(f"request is not valid UTF-8 JSON: {exc.detail}")
        except TransportClosed:
            return None

    async def receive_first(self) -> str | Rejected | None:
        """The first request line within --stdin-timeout-ms (``None``: none came)."""
        import anyio

        wait = self.args.stdin_timeout_ms
        with anyio.move_on_after(wait / 1000 if wait else math.inf) as scope:
            return await self.receive()
        if scope.cancelled_caught:
            log.error("no request on stdin within %d ms", wait)
        return None

    async def open(
        self, host: Callable[[], Any], stack: Any, request: Request | None
    ) -> Runtime | StartupFailure:
        """Open the runtime into ``stack``, or say why it could not be."""
        from appserver.providers.base import ProviderConfigError
        from appserver.storage.failures import disk_failure
        from appserver.storage.lock import WorkspaceLocked
        from appserver.transport.base import ListenerError

        try:
            runtime: Runtime = await stack.enter_async_context(host())
            return runtime
        except Exception as error:
            exc = _leaf(error)  # task groups wrap what fails inside them
            if isinstance(exc, ProviderConfigError):
                log.error("provider configuration: %s", exc)
                message = f"provider configuration error: {exc}"
                return StartupFailure(EXIT_CONFIG, INTERNAL, message)
            if isinstance(exc, WorkspaceLocked):
                log.error("%s", exc)
                if request is not None and request.remaining() <= 0.05:
                    message = f"request exceeded timeout_ms waiting for the workspace: {exc}"
                    return StartupFailure(EXIT_OK, TIMEOUT, message)
                return StartupFailure(EXIT_RUNTIME, INTERNAL, str(exc))
            if isinstance(exc, ListenerError):  # e.g. the --websocket port is taken
                log.error("%s", exc)
                return StartupFailure(EXIT_RUNTIME, INTERNAL, f"host failure: {exc}")
            disk = disk_failure(exc)
            if disk is not None:  # a full or failing disk: one line, not a traceback
                log.error("cannot start: %s", disk)
                return StartupFailure(EXIT_RUNTIME, INTERNAL, f"cannot start: {disk}")
            log.exception("could not open the workspace runtime")
            message = f"host failure: {type(exc).__name__}: {exc}"
            return StartupFailure(EXIT_RUNTIME, INTERNAL, message)

    async def report(self, first: str | Rejected | None, fail: StartupFailure) -> int:
        """Answer the request read (if any) with a startup failure."""
        if first is None:
            return fail.exit_code
        if isinstance(first, Rejected):
            await self.write(invalid(first))
            return fail.exit_code
        try:
            request = parse_request(first, time.monotonic())
        except Rejected as rejected:
            await self.write(invalid(rejected))
            return fail.exit_code
        await self.write(failure(request, fail.error_code, fail.message))
        return fail.exit_code

    async def serve_one(self, options: Any, host: Callable[[], Any]) -> int:
        """``--single-request``: read, validate, answer, exit."""
        from contextlib import AsyncExitStack

        line = await self.receive_first()
        if line is None:
            log.error("no request: end of input before a request line")
            return EXIT_INPUT
        try:
            if isinstance(line, Rejected):
                raise line
            request = parse_request(line, time.monotonic())
        except Rejected as rejected:
            await self.write(invalid(rejected))
            return EXIT_OK if self.bridge_compat else EXIT_INPUT
        # One-shot processes of a workspace take turns on its lock: wait for
        # it as long as the request may take.
        options.lock_wait = request.remaining()
        async with AsyncExitStack() as stack:
            opened = await self.open(host, stack, request)
            if isinstance(opened, StartupFailure):
                await self.write(failure(request, opened.error_code, opened.message))
                return opened.exit_code
            await self.write(await Conversations(opened, self.args).answer(request))
        return EXIT_OK

    async def serve(self, options: Any, host: Callable[[], Any]) -> int:
        """Long-lived: one request per line until stdin closes."""
        from contextlib import AsyncExitStack

        import anyio

        options.lock_wait = LONG_LIVED_LOCK_WAIT
        async with AsyncExitStack() as stack:
            opened = await self.open(host, stack, None)
            if isinstance(opened, StartupFailure):
                return await self.report(await self.receive_first(), opened)
            conversations = Conversations(opened, self.args)
            # Each session's requests run in arrival order: a request waits
            # for the one before it in its session (a chain of events).
            tails: dict[str, anyio.Event] = {}
            pending = anyio.Semaphore(MAX_PENDING_REQUESTS)
            self._serving = anyio.CancelScope()

            async def run(
                request: Request, previous: anyio.Event | None, done: anyio.Event
            ) -> None:
                try:
                    if previous is not None:
                        # Waiting behind the session's earlier requests counts
                        # towards this one's timeout_ms.
                        with anyio.move_on_after(request.remaining()):
                            await previous.wait()
                        if not previous.is_set():
                            limit = f"{request.timeout_ms:g} ms"
                            await self.write(
                                failure(request, TIMEOUT, f"request exceeded timeout_ms ({limit})")
                            )
                            return
                    await self.write(await conversations.answer(request))
                finally:
                    if previous is not None and not previous.is_set():
                        # Timed out while waiting: the next request of the
                        # session still waits for the earlier ones.
                        with anyio.CancelScope(shield=True):
                            await previous.wait()
                    done.set()
                    if tails.get(request.session_id) is done:
                        del tails[request.session_id]
                    pending.release()

            with self._serving:
                async with anyio.create_task_group() as tg:
                    while True:
                        await pending.acquire()
                        line = await self.receive()
                        if line is None:
                            break
                        try:
                            if isinstance(line, Rejected):
                                raise line
                            request = parse_request(line, time.monotonic())
                        except Rejected as rejected:
                            await self.write(invalid(rejected))
                            pending.release()
                            continue
                        done = anyio.Event()
                        previous = tails.get(request.session_id)
                        tails[request.session_id] = done
                        tg.start_soon(run, request, previous, done)
        return EXIT_STALLED if self.writer.dropped is not None else EXIT_OK


async def main(
    args: argparse.Namespace, options: Any, host: Any, stdin: IO[bytes], stdout: IO[bytes]
) -> int:
    """Serve the protocol on stdin/stdout; returns the exit code."""
    import anyio

    from appserver.transport.stdio import StdioTransport

    # Lines up to --max-input-bytes are requests; longer ones are refused.
    transport = await StdioTransport.open(stdin, stdout, max_message_bytes=args.max_input_bytes)
    face = ZeneFace(args, transport)
    try:
        async with anyio.create_task_group() as writing:
            writing.start_soon(face.writer.run)
            try:
                if args.single_request:
                    # A one-shot process: what is loaded now lives until exit. Frozen
                    # objects are skipped by every collection, so the request's
                    # collections stay small and the interpreter's final one, which
                    # costs ~50 ms over the runtime's heap, has almost nothing to do.
                    gc.freeze()
                    try:
                        code = await face.serve_one(options, host)
                    finally:
                        gc.freeze()
                else:
                    code = await face.serve(options, host)
            finally:
                face.writer.close()  # the writer ends once the responses are out
    finally:
        await transport.close()
    return code
