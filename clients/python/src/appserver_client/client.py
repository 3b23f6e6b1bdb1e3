"""The asyncio client: requests, notifications, approvals, turns, reconnects."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import json
import logging
import math
import os
import random
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Generic, Protocol, Self, TypedDict, TypeVar, Unpack, cast

from appserver_client import __version__
from appserver_client._generated import (
    ApprovalRequestParams,
    ChannelToolCallParams,
    ChannelToolCallResult,
    ChatMessage,
    EditorTerminalCreateParams,
    EditorTerminalOutputResult,
    EditorTerminalParams,
    EditorTerminalWaitParams,
    GeneratedMethods,
    Item,
    ReadTextFileParams,
    ReadTextFileResult,
    SenderContext,
    ToolCallParams,
    ToolCallResult,
    Turn,
    WriteTextFileParams,
)
from appserver_client.errors import (
    SERVER_OVERLOADED,
    AppServerError,
    ClientClosed,
    ConnectFailed,
    ConnectionLost,
    RpcError,
)
from appserver_client.notifications import DEFAULT_BUFFER, Notification, NotificationStream
from appserver_client.transport import (
    StderrMode,
    StdioTransport,
    Transport,
    WebSocketTransport,
    websocket_url,
)

log = logging.getLogger("appserver_client")

DECISIONS = ("accept", "acceptForSession", "acceptAlways", "decline", "cancel")
Decision = str
ApprovalAnswer = Decision | Mapping[str, Any]
ApprovalHandler = Callable[[ApprovalRequestParams], ApprovalAnswer | Awaitable[ApprovalAnswer]]
"""Called with each ``item/approval/request``'s params; returns a decision
(``"accept"``, ``"acceptForSession"``, ``"acceptAlways"``, ``"decline"``,
``"cancel"``) or a whole result object, directly or as an awaitable."""
ToolCallAnswer = ToolCallResult | Mapping[str, Any]
ToolCallHandler = Callable[[ToolCallParams], ToolCallAnswer | Awaitable[ToolCallAnswer]]
"""Called with each ``item/tool/call``'s params (a tool this client declared in
``thread/start.dynamicTools``); returns the result ``{success, contentItems?,
structuredResult?, errorCode?, errorMessage?}``, directly or as an awaitable."""
ChannelToolCallAnswer = ChannelToolCallResult | Mapping[str, Any]
ChannelToolCallHandler = Callable[
    [ChannelToolCallParams], ChannelToolCallAnswer | Awaitable[ChannelToolCallAnswer]
]
"""Called with each ``ext/channel/toolCall``'s params (a tool this channel adapter
listed in ``capabilities.channelAdapter.channelTools``); returns the result, as
a :data:`ToolCallHandler` does."""
ReadTextFileAnswer = ReadTextFileResult | str | Mapping[str, Any]
ReadTextFileHandler = Callable[
    [ReadTextFileParams], ReadTextFileAnswer | Awaitable[ReadTextFileAnswer]
]
"""Called with each ``ext/acp/fs/readTextFile``'s params (``threadId``, absolute
``path``, ``line?``, ``limit?``); returns the editor's text of the file (a ``str``
or ``{"content": str}``), directly or as an awaitable."""
WriteTextFileHandler = Callable[[WriteTextFileParams], Any]
"""Called with each ``ext/acp/fs/writeTextFile``'s params (``threadId``, absolute
``path``, ``content``); writes the file in the editor. Its return value (sync or
awaited) is ignored unless it is a mapping (then sent as the result)."""
TerminalAnswer = EditorTerminalOutputResult | Mapping[str, Any]


class TerminalHandler(Protocol):
    """Runs the agent's ``shell`` commands in this client's terminals (an IDE:
    ``ext/acp/terminal/*``). Each method may be sync or async; one that raises
    answers a JSON-RPC error, which fails the agent's ``shell`` call, not the turn.
    """

    def create(
        self, params: EditorTerminalCreateParams
    ) -> str | Mapping[str, Any] | Awaitable[str | Mapping[str, Any]]:
        """Start ``params["command"]`` in ``params["cwd"]``; the new terminal's id
        (a ``str`` or ``{"terminalId": str}``)."""

    def wait_for_exit(
        self, params: EditorTerminalWaitParams
    ) -> TerminalAnswer | Awaitable[TerminalAnswer]:
        """Wait at most ``params["timeout"]`` seconds; ``{"output", "exitCode"}``
        (no ``exitCode``: still running, the server will kill it)."""

    def get_output(
        self, params: EditorTerminalParams
    ) -> TerminalAnswer | Awaitable[TerminalAnswer]:
        """What the terminal printed so far: ``{"output", "exitCode"?}``."""

    def kill(self, params: EditorTerminalParams) -> object:
        """Kill the command (the terminal stays until ``release``)."""

    def release(self, params: EditorTerminalParams) -> object:
        """The server is done with the terminal."""


RequestHandler = Callable[[Any], Any]
ReconnectCallback = Callable[["AppServerClient"], Any]

C = TypeVar("C", bound="AppServerClient")


class ClientOptions(TypedDict, total=False):
    """Keyword options of :meth:`AppServerClient.spawn` and :meth:`~AppServerClient.connect`."""

    client_name: str  # clientInfo.name (default "appserver-client")
    client_version: str  # clientInfo.version (default: this package's version)
    capabilities: Mapping[str, Any]  # initialize capabilities (server defaults if absent)
    approval_handler: ApprovalHandler | None  # None: every approval is declined
    tool_call_handler: ToolCallHandler | None  # None: every tool call fails ("no handler")
    channel_tool_call_handler: ChannelToolCallHandler | None  # None: channel tools fail
    read_text_file_handler: ReadTextFileHandler | None  # advertises acpExtensions.fsReadTextFile
    write_text_file_handler: WriteTextFileHandler | None  # advertises ...fsWriteTextFile
    terminal_handler: TerminalHandler | None  # advertises acpExtensions.terminalCreate
    request_timeout: float  # seconds per request (default 60)
    overload_retries: int  # retries of -32001 "Server overloaded" (default 4)


@dataclass
class TurnOutcome:
    """How a turn run with :meth:`AppServerClient.run_turn` ended.

    ``text`` is the last agent message's text (``""`` if there was none);
    ``items`` are the turn's completed items, in order; ``turn`` is the turn
    object from the terminal notification; ``status`` is ``completed``,
    ``failed`` or ``cancelled`` (with ``error`` / ``reason``).
    """

    text: str
    items: list[Item]
    turn: Turn
    status: str
    error: str | None = None
    reason: str | None = None
    notifications: list[Notification] = field(default_factory=list, repr=False)

    @property
    def ok(self) -> bool:
        return self.status == "completed"


class Opening(Generic[C]):
    """What :meth:`AppServerClient.spawn` / :meth:`~AppServerClient.connect` return:
    ``await`` it for a client, or ``async with`` it to close the client on exit."""

    def __init__(self, factory: Callable[[], Awaitable[C]]) -> None:
        self._factory = factory
        self._client: C | None = None

    def __await__(self) -> Generator[Any, None, C]:
        return self._factory().__await__()

    async def __aenter__(self) -> C:
        self._client = await self._factory()
        return self._client

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._client is not None:
            await self._client.close()


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


def _seconds(timeout: float | None) -> float | None:
    return None if timeout is None or math.isinf(timeout) else timeout


class AppServerClient(GeneratedMethods):
    """A connection to an appserver, with one typed method per protocol method.

    Open one with :meth:`spawn` (a child process over stdio) or :meth:`connect`
    (WebSocket). The ``initialize`` handshake is done for you. Requests may be
    issued concurrently from any number of tasks. Runs on asyncio (also under
    anyio's asyncio backend).
    """

    def __init__(
        self,
        *,
        client_name: str = "appserver-client",
        client_version: str = __version__,
        capabilities: Mapping[str, Any] | None = None,
        approval_handler: ApprovalHandler | None = None,
        tool_call_handler: ToolCallHandler | None = None,
        channel_tool_call_handler: ChannelToolCallHandler | None = None,
        read_text_file_handler: ReadTextFileHandler | None = None,
        write_text_file_handler: WriteTextFileHandler | None = None,
        terminal_handler: TerminalHandler | None = None,
        request_timeout: float = 60.0,
        overload_retries: int = 4,
    ) -> None:
        """Not usually called directly: use :meth:`spawn` or :meth:`connect`."""
        self.client_name = client_name
        self.client_version = client_version
        self.capabilities: dict[str, Any] = dict(capabilities or {})
        self.approval_handler: ApprovalHandler | None = approval_handler
        self.tool_call_handler: ToolCallHandler | None = tool_call_handler
        self.channel_tool_call_handler: ChannelToolCallHandler | None = channel_tool_call_handler
        self.read_text_file_handler: ReadTextFileHandler | None = read_text_file_handler
        self.write_text_file_handler: WriteTextFileHandler | None = write_text_file_handler
        self.terminal_handler: TerminalHandler | None = terminal_handler
        self.request_timeout = request_timeout
        self.overload_retries = overload_retries
        self.server_info: dict[str, Any] = {}
        self.server_capabilities: dict[str, Any] = {}
        self.reconnects = 0  # successful reconnects so far
        self.duplicates_dropped = 0  # notifications the seq check discarded
        # Reconnect policy (WebSocket only).
        self.reconnect = False
        self.backoff_initial = 0.5
        self.backoff_max = 30.0
        self.max_reconnect_attempts: int | None = None
        self._opener: Callable[[], Awaitable[Transport]] | None = None
        self._transport: Transport | None = None
        self._reader: asyncio.Task[BaseException] | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[asyncio.Future[Any], str, Any]] = {}
        self._streams: set[NotificationStream] = set()
        self._last_seq: dict[str, int] = {}
        self._subscribed: set[str] = set()
        self._running_turns: dict[str, set[str]] = {}
        self._holding: dict[str, list[Notification]] = {}
        self._request_handlers: dict[str, RequestHandler] = {}
        self._reconnect_callbacks: list[ReconnectCallback] = []
        self._disconnect_callbacks: list[ReconnectCallback] = []
        self._server_tasks: set[asyncio.Task[None]] = set()
        self._ready = asyncio.Event()
        self._closing = False
        self._closed = asyncio.Event()
        self._failure: AppServerError | None = None

    # --- opening ----------------------------------------------------------------

    @classmethod
    def spawn(
        cls,
        argv: Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        stderr: StderrMode = "inherit",
        close_timeout: float = 5.0,
        **options: Unpack[ClientOptions],
    ) -> Opening[Self]:
        """Start ``argv`` (e.g. ``["appserver", "app-server", "--workspace", W]``)
        and talk to it over its stdin/stdout.

        ``stderr``: ``"inherit"`` (default) passes the server's log through,
        ``"capture"`` keeps its last lines for error messages, ``"discard"``.
        The child runs in its own session, so a terminal's Ctrl-C reaches only
        this process. :meth:`close` closes its stdin, waits ``close_timeout``
        seconds for it to exit, then terminates it. If the process dies,
        pending and later requests raise :class:`ConnectionLost` (no reconnect).
        ``options``: see :class:`ClientOptions`.
        """

        async def opener() -> Transport:
            return await StdioTransport.start(
                argv, cwd=cwd, env=env, stderr=stderr, close_timeout=close_timeout
            )

        async def factory() -> Self:
            client = cls(**options)
            await client._open(opener, reconnect=False)
            return client

        return Opening(factory)

    @classmethod
    def connect(
        cls,
        url: str,
        *,
        token: str | None = None,
        reconnect: bool = True,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        max_reconnect_attempts: int | None = None,
        open_timeout: float = 10.0,
        **options: Unpack[ClientOptions],
    ) -> Opening[Self]:
        """Connect to ``ws://HOST:PORT[/ws]`` (``token`` is sent as ``?token=``).

        With ``reconnect`` (default), a lost connection is re-opened with
        exponential backoff and jitter (``backoff_initial`` doubling up to
        ``backoff_max`` seconds, forever unless ``max_reconnect_attempts``);
        the client re-initializes and re-subscribes every thread it follows
        with ``afterSeq`` = the last ``seq`` it saw, so notification iterators
        continue with no gap and no duplicate. Requests that were in flight
        raise :class:`ConnectionLost`; new requests wait for the reconnect.
        The first connection is not retried: failure raises :class:`ConnectFailed`.
        ``options``: see :class:`ClientOptions`.
        """
        full_url = websocket_url(url, token)

        async def opener() -> Transport:
            return await WebSocketTransport.open(full_url, open_timeout)

        async def factory() -> Self:
            client = cls(**options)
            client.backoff_initial = backoff_initial
            client.backoff_max = backoff_max
            client.max_reconnect_attempts = max_reconnect_attempts
            await client._open(opener, reconnect=reconnect)
            return client

        return Opening(factory)

    async def _open(self, opener: Callable[[], Awaitable[Transport]], reconnect: bool) -> None:
        self._opener = opener
        self.reconnect = reconnect
        transport = await opener()
        self._attach(transport)
        try:
            await self._handshake()
        except ConnectionLost as exc:
            # The server went away before answering (a spawned one that exited
            # at start): the message carries its exit code and stderr tail.
            await self._abandon(transport)
            raise ConnectFailed(f"the server did not start: {exc}") from exc
        except BaseException:
            await self._abandon(transport)
            raise
        self._ready.set()
        self._supervisor = asyncio.get_running_loop().create_task(
            self._supervise(), name="appserver-client supervisor"
        )

    async def _abandon(self, transport: Transport) -> None:
        """Give up a first connection whose handshake failed."""
        self._closing = True
        self._closed.set()
        await transport.close()

    def _attach(self, transport: Transport) -> None:
        self._transport = transport
        self._reader = asyncio.get_running_loop().create_task(
            self._read_loop(transport), name="appserver-client reader"
        )

    async def _handshake(self) -> None:
        result = await self._call(
            "initialize",
            {
                "clientInfo": {"name": self.client_name, "version": self.client_version},
                "capabilities": self.initialize_capabilities(),
            },
            self.request_timeout,
        )
        self.server_info = dict(result.get("serverInfo") or {})
        self.server_capabilities = dict(result.get("capabilities") or {})
        await self._send({"jsonrpc": "2.0", "method": "initialized", "params": {}})

    def initialize_capabilities(self) -> dict[str, Any]:
        """The ``capabilities`` sent in ``initialize``: :attr:`capabilities`, plus
        ``acpExtensions.fsReadTextFile`` / ``fsWriteTextFile`` /
        ``terminalCreate`` for the editor handlers that are set, unless
        :attr:`capabilities` has ``acpExtensions`` (then it is sent as given)."""
        capabilities = dict(self.capabilities)
        if "acpExtensions" not in capabilities:
            acp: dict[str, Any] = {}
            if self.read_text_file_handler is not None:
                acp["fsReadTextFile"] = True
            if self.write_text_file_handler is not None:
                acp["fsWriteTextFile"] = True
            if self.terminal_handler is not None:
                acp["terminalCreate"] = True
            if acp:
                capabilities["acpExtensions"] = acp
        return capabilities

    # --- public API -------------------------------------------------------------

    @property
    def kind(self) -> str:
        """``"stdio"`` or ``"websocket"``."""
        return self._transport.kind if self._transport is not None else ""

    @property
    def connected(self) -> bool:
        """Whether the connection is up and initialized right now."""
        return self._ready.is_set() and not self._closing and self._failure is None

    @property
    def transport(self) -> Transport | None:
        """The current transport (a new one after each reconnect)."""
        return self._transport

    @property
    def subscribed_threads(self) -> frozenset[str]:
        """Threads this client re-subscribes after a reconnect."""
        return frozenset(self._subscribed)

    def last_seq(self, thread_id: str) -> int | None:
        """The highest ``seq`` seen for the thread (``None``: none yet)."""
        return self._last_seq.get(thread_id)

    def on_reconnect(self, callback: ReconnectCallback) -> None:
        """Call ``callback(client)`` (sync or async) after each successful reconnect
        (re-initialized and re-subscribed)."""
        self._reconnect_callbacks.append(callback)

    def on_disconnect(self, callback: ReconnectCallback) -> None:
        """Call ``callback(client)`` (sync or async) once each time the
        connection drops and the client starts reconnecting; :meth:`on_reconnect`
        says when it is back. Not called for a stdio server (it is not restarted)."""
        self._disconnect_callbacks.append(callback)

    def on_tool_call(self, handler: ToolCallHandler | None) -> None:
        """Run the tools this client declares in ``thread/start(dynamic_tools=...)``:
        ``handler(params)`` (sync or async) answers each ``item/tool/call``
        (same as setting :attr:`tool_call_handler`). Without a handler a call
        fails with ``errorMessage: "no handler"`` (unless a
        :meth:`set_request_handler` handler for ``item/tool/call`` answers it
        raw); a handler that raises or returns something that is not a result
        fails it with the reason."""
        self.tool_call_handler = handler

    def on_channel_tool_call(self, handler: ChannelToolCallHandler | None) -> None:
        """Run the channel tools this adapter lists in
        ``capabilities.channelAdapter.channelTools``: ``handler(params)`` (sync or
        async) answers each ``ext/channel/toolCall`` (same as setting
        :attr:`channel_tool_call_handler`), with the rules of :meth:`on_tool_call`
        (no handler: ``errorCode: "noHandler"`` unless a raw
        :meth:`set_request_handler` handler answers; a failing handler:
        ``"handlerFailed"``)."""
        self.channel_tool_call_handler = handler

    def on_read_text_file(self, handler: ReadTextFileHandler | None) -> None:
        """Serve ``ext/acp/fs/readTextFile`` (the agent reading a file as the editor
        has it): ``handler(params)`` (sync or async) returns the text, a ``str`` or
        ``{"content": str}``. A handler that raises or returns something else
        answers a JSON-RPC error (-32603), which fails the agent's tool call
        (``the editor refused ...``), not the turn. Without a handler the request
        goes to a raw :meth:`set_request_handler` handler if one is set, else is
        answered -32601 (the same failed tool call).

        The server only sends it if ``initialize`` advertised
        ``acpExtensions.fsReadTextFile``, which the client adds when this handler
        is set at that moment (``read_text_file_handler=`` of :meth:`spawn` /
        :meth:`connect`; set later, it counts from the next reconnect) and
        :attr:`capabilities` has no ``acpExtensions`` of its own."""
        self.read_text_file_handler = handler

    def on_write_text_file(self, handler: WriteTextFileHandler | None) -> None:
        """Serve ``ext/acp/fs/writeTextFile`` (the agent writing a file through the
        editor): ``handler(params)`` (sync or async) writes ``params["content"]``
        to ``params["path"]``; the answer is ``{}``. Errors, the fallback and the
        ``acpExtensions.fsWriteTextFile`` advertisement as in
        :meth:`on_read_text_file`."""
        self.write_text_file_handler = handler

    def on_terminal(self, handler: TerminalHandler | None) -> None:
        """Run the agent's ``shell`` commands in this client's terminals (an IDE):
        ``handler`` (a :class:`TerminalHandler`) answers
        ``ext/acp/terminal/create|waitForExit|getOutput|kill|release``. The
        server sends them after its sandbox and approvals, when ``initialize``
        advertised ``acpExtensions.terminalCreate`` (added as for
        :meth:`on_read_text_file`). Errors and the fallback as in
        :meth:`on_read_text_file`."""
        self.terminal_handler = handler

    def set_request_handler(self, method: str, handler: RequestHandler | None) -> None:
        """Answer server->client requests ``method`` with ``handler(params)`` (sync
        or async; its return value is the result). ``item/approval/request`` uses
        :attr:`approval_handler` instead. Unhandled methods get -32601."""
        if handler is None:
            self._request_handlers.pop(method, None)
        else:
            self._request_handlers[method] = handler

    async def request(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> Any:
        """Send ``method`` and return its result.

        ``timeout`` (seconds, default :attr:`request_timeout`; ``math.inf`` for
        none) covers waiting for a reconnect too; it raises ``TimeoutError``.
        A JSON-RPC error raises :class:`RpcError`; ``-32001 Server overloaded``
        is retried with backoff (``overload_retries`` times) first.
        """
        limit = _seconds(self.request_timeout if timeout is None else timeout)
        async with asyncio.timeout(limit):
            for attempt in itertools.count():
                await self._wait_ready()
                try:
                    return await self._call(method, params, None)
                except RpcError as exc:
                    if exc.code != SERVER_OVERLOADED or attempt >= self.overload_retries:
                        raise
                    await asyncio.sleep(0.05 * 2**attempt * (0.5 + random.random()))
        raise AssertionError("unreachable")  # pragma: no cover

    async def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        """Send a client->server notification (the server ignores all but ``initialized``)."""
        await self._wait_ready()
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = dict(params)
        await self._send(message)

    def notifications(
        self,
        *,
        thread_id: str | None = None,
        turn_id: str | None = None,
        methods: Iterable[str] | None = None,
        buffer: int | None = DEFAULT_BUFFER,
    ) -> NotificationStream:
        """A new iterator over the notifications matching every given filter.

        It collects from the moment it is created. ``methods`` are exact names
        or globs (``"item/*"``). A stream that falls ``buffer`` notifications
        behind overflows (see :class:`NotificationStream`); the read loop never
        waits for it. Close it (``async with`` / ``aclose()``) when done.
        """
        stream = NotificationStream(
            self._streams.discard,
            thread_id=thread_id,
            turn_id=turn_id,
            methods=methods,
            buffer=buffer,
        )
        if self._closing or self._failure is not None:
            stream._end(self._failure)
        else:
            self._streams.add(stream)
        return stream

    async def run_turn(
        self,
        thread_id: str,
        text: str | None = None,
        *,
        input: Sequence[Mapping[str, Any]] | None = None,
        sender: SenderContext | None = None,
        messages: list[ChatMessage] | None = None,
        on_notification: Callable[[Notification], Any] | None = None,
        timeout: float | None = None,
    ) -> TurnOutcome:
        """Start a turn with ``text`` (or ``input`` parts) and wait for it to end.

        Needs no subscription: it reads the events the server sends to the
        turn's originator (and, after a reconnect, through the re-subscription).
        ``on_notification`` (sync or async) sees each of the turn's
        notifications as it arrives, e.g. to print ``item/agentMessage/delta``.
        Approvals go to :attr:`approval_handler`. ``timeout`` bounds the whole
        turn (default: none). A failed or cancelled turn is returned, not raised.
        """
        if input is None:
            if text is None:
                raise ValueError("run_turn needs text or input")
            input = [{"type": "text", "text": text}]
        async with self.notifications(thread_id=thread_id, buffer=None) as stream:
            started = await self.turn_start(
                thread_id=thread_id,
                input=cast(Any, list(input)),
                sender=sender,
                messages=messages,
            )
            turn_id = started["turn"]["id"]
            items: list[Item] = []
            seen: list[Notification] = []
            async with asyncio.timeout(_seconds(timeout)):
                async for notification in stream:
                    if notification.turn_id != turn_id:
                        continue
                    seen.append(notification)
                    if on_notification is not None:
                        await _maybe_await(on_notification(notification))
                    if notification.method == "item/completed":
                        items.append(cast(Item, notification.params["item"]))
                    elif notification.is_terminal:
                        return _outcome(notification, items, seen)
        raise self._failure or ClientClosed("client closed before the turn ended")

    async def close(self) -> None:
        """Close the connection (stdio: the server process exits). Idempotent.

        Pending requests raise :class:`ClientClosed`; notification iterators end.
        """
        if self._closing:
            await self._closed.wait()
            return
        self._closing = True
        self._ready.set()  # wake waiters; they see _closing
        if self._transport is not None:
            await self._transport.close()
        if self._reader is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._reader), 5)
        for task in (self._reader, self._supervisor):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._shutdown(None)
        self._closed.set()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # --- internals: sending and receiving ---------------------------------------

    async def _wait_ready(self) -> None:
        if self._failure is not None:
            raise self._failure
        if self._closing:
            raise ClientClosed("client is closed")
        await self._ready.wait()
        if self._failure is not None:
            raise self._failure
        if self._closing:
            raise ClientClosed("client is closed")

    async def _send(self, message: Mapping[str, Any]) -> None:
        transport = self._transport
        if transport is None:
            raise ConnectionLost("not connected")
        await transport.send(json.dumps(message, separators=(",", ":"), ensure_ascii=False))

    async def _call(
        self, method: str, params: Mapping[str, Any] | None, timeout: float | None
    ) -> Any:
        """One request on the current connection (no readiness wait, no retry)."""
        request_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        wire_params = dict(params) if params is not None else {}
        self._pending[request_id] = (future, method, wire_params)
        try:
            if self._reader is None or self._reader.done():
                raise ConnectionLost("not connected")
            await self._send(
                {"jsonrpc": "2.0", "id": request_id, "method": method, "params": wire_params}
            )
            async with asyncio.timeout(timeout):
                return await future
        finally:
            self._pending.pop(request_id, None)

    async def _read_loop(self, transport: Transport) -> BaseException:
        """Read frames until the connection ends; returns why it ended."""
        while True:
            try:
                frame = await transport.receive()
            except Exception as exc:  # anything but ConnectionLost is a lost connection too
                lost = exc if isinstance(exc, ConnectionLost) else None
                lost = lost or ConnectionLost(f"connection failed: {exc!r}")
                if not self._closing:
                    # Fail what waits for an answer now: the supervisor only
                    # runs after the handshake, and a server that exits at
                    # start must not leave `initialize` waiting for its timeout.
                    self._fail_pending(lost)
                return lost
            try:
                message = json.loads(frame)
            except ValueError:
                log.warning("ignoring a frame that is not JSON: %.200s", frame)
                continue
            if isinstance(message, dict):
                try:
                    self._on_message(transport, message)
                except Exception:  # a bug here must not stop the read loop
                    log.exception("failed to handle %.200s", frame)

    def _on_message(self, transport: Transport, message: dict[str, Any]) -> None:
        method = message.get("method")
        if isinstance(method, str):
            if "id" in message:
                task = asyncio.get_running_loop().create_task(
                    self._answer(transport, message["id"], method, message.get("params"))
                )
                self._server_tasks.add(task)
                task.add_done_callback(self._server_tasks.discard)
            else:
                params = message.get("params")
                self._on_notification(
                    Notification(method, params if isinstance(params, dict) else {})
                )
            return
        request_id = message.get("id")
        entry = self._pending.get(request_id) if isinstance(request_id, int) else None
        if entry is None:
            if "error" in message:
                log.warning("server error without a request: %s", message["error"])
            return
        future, sent_method, sent_params = entry
        if future.done():
            return
        if "error" in message:
            error = message["error"] if isinstance(message["error"], dict) else {}
            future.set_exception(
                RpcError(
                    int(error.get("code", 0)),
                    str(error.get("message", "")),
                    error.get("data"),
                    sent_method,
                )
            )
        else:
            result = message.get("result")
            self._observe_result(sent_method, sent_params, result)
            future.set_result(result)

    def _observe_result(self, method: str, params: dict[str, Any], result: Any) -> None:
        """Bookkeeping for reconnects, done as the response is read (before any
        later notification is dispatched)."""
        thread_id = params.get("threadId")
        if not isinstance(thread_id, str):
            return
        if method == "thread/subscribe":
            self._subscribed.add(thread_id)
            seq = result.get("seq") if isinstance(result, dict) else None
            if isinstance(seq, int) and thread_id not in self._last_seq:
                self._last_seq[thread_id] = seq  # a server that reports its position
        elif method in ("thread/unsubscribe", "thread/delete"):
            self._subscribed.discard(thread_id)
            if method == "thread/delete":
                self._forget_thread(thread_id)
        elif method == "turn/start" and isinstance(result, dict):
            turn = result.get("turn")
            if (
                isinstance(turn, dict)
                and isinstance(turn.get("id"), str)
                and turn.get("status") in ("running", "waitingApproval")
            ):
                self._running_turns.setdefault(thread_id, set()).add(turn["id"])

    def _forget_thread(self, thread_id: str) -> None:
        self._subscribed.discard(thread_id)
        self._running_turns.pop(thread_id, None)

    def _on_notification(self, notification: Notification) -> None:
        thread_id = notification.thread_id
        seq = notification.seq
        if thread_id is not None and seq is not None:
            held = self._holding.get(thread_id)
            if held is not None:
                held.append(notification)
                return
            last = self._last_seq.get(thread_id)
            if last is not None and seq <= last:
                self.duplicates_dropped += 1
                return
            self._last_seq[thread_id] = seq
        if thread_id is not None:
            if notification.is_terminal:
                running = self._running_turns.get(thread_id)
                if running is not None:
                    running.discard(notification.turn_id or "")
                    if not running:
                        del self._running_turns[thread_id]
            elif notification.method == "thread/deleted":
                self._forget_thread(thread_id)
        for stream in list(self._streams):
            stream._offer(notification)

    async def _answer(
        self, transport: Transport, request_id: Any, method: str, params: Any
    ) -> None:
        """Answer one server->client request (never raises)."""
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
        try:
            if method == "item/approval/request":
                reply["result"] = await self._approve(params)
            elif method == "item/tool/call" and (
                self.tool_call_handler is not None or method not in self._request_handlers
            ):
                reply["result"] = await self._call_tool(params)
            elif method == "ext/channel/toolCall" and (
                self.channel_tool_call_handler is not None or method not in self._request_handlers
            ):
                reply["result"] = await self._call_channel_tool(params)
            elif method == "ext/acp/fs/readTextFile" and self.read_text_file_handler is not None:
                reply["result"] = await self._read_text_file(self.read_text_file_handler, params)
            elif method == "ext/acp/fs/writeTextFile" and self.write_text_file_handler is not None:
                answer = await _maybe_await(
                    self.write_text_file_handler(cast(WriteTextFileParams, params))
                )
                reply["result"] = dict(answer) if isinstance(answer, Mapping) else {}
            elif method.startswith(TERMINAL_PREFIX) and self.terminal_handler is not None:
                reply["result"] = await _run_terminal(self.terminal_handler, method, params)
            elif method in self._request_handlers:
                reply["result"] = await _maybe_await(self._request_handlers[method](params))
            else:
                reply["error"] = {"code": -32601, "message": f"Method not found: {method}"}
        except Exception as exc:
            log.exception("handler for server request %s failed", method)
            reply["error"] = {
                "code": -32603,
                "message": "Internal error",
                "data": {"detail": str(exc)},
            }
        with contextlib.suppress(Exception):
            await transport.send(json.dumps(reply, separators=(",", ":"), ensure_ascii=False))

    async def _approve(self, params: Any) -> dict[str, Any]:
        handler = self.approval_handler
        if handler is None:
            return {"decision": "decline"}
        try:
            answer = await _maybe_await(handler(cast(ApprovalRequestParams, params)))
        except Exception:
            log.exception("approval handler failed; declining")
            return {"decision": "decline"}
        if isinstance(answer, str):
            answer = {"decision": answer}
        if not isinstance(answer, Mapping) or answer.get("decision") not in DECISIONS:
            log.warning("approval handler returned %r; declining", answer)
            return {"decision": "decline"}
        return dict(answer)

    async def _call_tool(self, params: Any) -> dict[str, Any]:
        handler = self.tool_call_handler
        return await _run_tool(
            None if handler is None else lambda: handler(cast(ToolCallParams, params))
        )

    async def _call_channel_tool(self, params: Any) -> dict[str, Any]:
        handler = self.channel_tool_call_handler
        return await _run_tool(
            None if handler is None else lambda: handler(cast(ChannelToolCallParams, params))
        )

    @staticmethod
    async def _read_text_file(handler: ReadTextFileHandler, params: Any) -> dict[str, Any]:
        answer = await _maybe_await(handler(cast(ReadTextFileParams, params)))
        if isinstance(answer, str):
            return {"content": answer}
        if isinstance(answer, Mapping) and isinstance(answer.get("content"), str):
            return dict(answer)
        raise TypeError(f"the read_text_file handler returned {answer!r:.200}, not the text")

    # --- internals: connection loss and reconnect -------------------------------

    async def _supervise(self) -> None:
        try:
            await self._supervise_loop()
        except Exception as exc:  # a bug must not leave callers waiting forever
            log.exception("appserver-client supervisor failed")
            self._shutdown(ConnectionLost(f"client failed: {exc!r}"))

    async def _supervise_loop(self) -> None:
        while True:
            assert self._reader is not None
            reason = await self._reader
            if self._closing:
                return
            self._ready.clear()
            lost = reason if isinstance(reason, ConnectionLost) else ConnectionLost(str(reason))
            self._fail_pending(lost)
            if not self.reconnect or self._opener is None:
                self._shutdown(lost)
                return
            log.warning("connection lost (%s); reconnecting", lost)
            await self._run_callbacks(self._disconnect_callbacks, "on_disconnect")
            failure = await self._reconnect_loop()
            if failure is not None:
                self._shutdown(failure)
                return

    async def _reconnect_loop(self) -> AppServerError | None:
        """Reconnect until it works (``None``), or give up (the error)."""
        assert self._opener is not None
        for attempt in itertools.count():
            if self._closing:
                return ClientClosed("client is closed")
            if self.max_reconnect_attempts is not None and attempt >= self.max_reconnect_attempts:
                return ConnectionLost(f"gave up reconnecting after {attempt} attempt(s)")
            delay = min(self.backoff_max, self.backoff_initial * 2**attempt)
            await asyncio.sleep(delay * (0.5 + random.random() / 2))
            try:
                transport = await self._opener()
            except ConnectFailed as exc:
                if exc.permanent:
                    return exc
                log.info("reconnect attempt %d failed: %s", attempt + 1, exc)
                continue
            if self._closing:
                await transport.close()
                return ClientClosed("client is closed")
            self._attach(transport)
            try:
                await self._handshake()
                await self._resubscribe()
            except (AppServerError, TimeoutError, OSError) as exc:
                log.info("reconnect attempt %d failed during setup: %s", attempt + 1, exc)
                self._holding.clear()
                await transport.close()
                if self._reader is not None:
                    await self._reader
                self._fail_pending(ConnectionLost("connection lost during reconnect"))
                continue
            self.reconnects += 1
            self._ready.set()
            self._release_held()
            log.info("reconnected (%d thread(s) re-subscribed)", len(self._subscribed))
            await self._run_callbacks(self._reconnect_callbacks, "on_reconnect")
            return None
        raise AssertionError("unreachable")  # pragma: no cover

    async def _run_callbacks(self, callbacks: list[ReconnectCallback], what: str) -> None:
        for callback in list(callbacks):
            try:
                await _maybe_await(callback(self))
            except Exception:  # a user's callback must not stop reconnecting
                log.exception("%s callback failed", what)

    async def _resubscribe(self) -> None:
        """Re-subscribe followed threads, replaying what was missed.

        Each thread's notifications are held back from ``thread/subscribe
        {afterSeq}`` until a second (idempotent) ``thread/subscribe`` answers:
        the server runs it only after the replay was queued, so by then every
        replayed event is in. :meth:`_release_held` then delivers them in
        ``seq`` order through the usual duplicate check (live broadcasts that
        overtook the replay included).
        """
        threads = sorted(self._subscribed | set(self._running_turns))
        for thread_id in threads:
            self._holding[thread_id] = []
        await asyncio.gather(*(self._resubscribe_one(thread_id) for thread_id in threads))

    async def _resubscribe_one(self, thread_id: str) -> None:
        params = {"threadId": thread_id, "afterSeq": self._last_seq.get(thread_id, 0)}
        try:
            await self._call("thread/subscribe", params, self.request_timeout)
        except RpcError as exc:
            if exc.code == SERVER_OVERLOADED:
                raise  # this attempt fails; the next one tries again
            log.warning("could not re-subscribe %s: %s", thread_id, exc)
            self._forget_thread(thread_id)
            return
        # The barrier: answered only after the replay above was queued.
        await self._call("thread/subscribe", {"threadId": thread_id}, self.request_timeout)

    def _release_held(self) -> None:
        holding, self._holding = self._holding, {}
        for held in holding.values():
            for notification in sorted(held, key=lambda n: n.seq or 0):
                self._on_notification(notification)

    def _fail_pending(self, error: AppServerError) -> None:
        for future, _, _ in list(self._pending.values()):
            if not future.done():
                future.set_exception(error)
        for task in list(self._server_tasks):
            task.cancel()

    def _shutdown(self, error: AppServerError | None) -> None:
        """The client is finished: fail everything, end every stream."""
        if error is not None and self._failure is None:
            self._failure = error
        self._fail_pending(error or ClientClosed("client is closed"))
        for stream in list(self._streams):
            stream._end(error)
        self._streams.clear()
        self._ready.set()  # wake waiters so they raise


def _outcome(terminal: Notification, items: list[Item], seen: list[Notification]) -> TurnOutcome:
    turn = cast(Turn, terminal.params.get("turn") or {})
    final_items = turn.get("items")
    if isinstance(final_items, list) and final_items:
        items = list(final_items)
    text = ""
    for item in items:
        if item.get("type") == "agentMessage":
            payload = item.get("payload") or {}
            text = str(payload.get("text", ""))
    status = terminal.method.split("/", 1)[1]
    error = terminal.params.get("error")
    reason = terminal.params.get("reason")
    return TurnOutcome(
        text=text,
        items=items,
        turn=turn,
        status=status,
        error=error if isinstance(error, str) else None,
        reason=reason if isinstance(reason, str) else None,
        notifications=seen,
    )


TERMINAL_PREFIX = "ext/acp/terminal/"
_TERMINAL_METHODS = {
    "create": "create",
    "waitForExit": "wait_for_exit",
    "getOutput": "get_output",
    "kill": "kill",
    "release": "release",
}


async def _run_terminal(handler: TerminalHandler, method: str, params: Any) -> dict[str, Any]:
    """Answer one ``ext/acp/terminal/*`` request with ``handler``."""
    name = _TERMINAL_METHODS.get(method[len(TERMINAL_PREFIX) :])
    if name is None:
        raise LookupError(f"unknown terminal request {method}")
    answer = await _maybe_await(getattr(handler, name)(params))
    if name == "create" and isinstance(answer, str):
        return {"terminalId": answer}
    if isinstance(answer, Mapping):
        return dict(answer)
    if name in ("kill", "release"):
        return {}
    raise TypeError(f"the terminal handler's {name} returned {answer!r:.200}, not an object")


async def _run_tool(call: Callable[[], Any] | None) -> dict[str, Any]:
    """A tool-call result from a handler (``None``: no handler); never raises."""
    if call is None:
        return {"success": False, "errorCode": "noHandler", "errorMessage": "no handler"}
    try:
        answer = await _maybe_await(call())
    except Exception as exc:
        log.exception("tool call handler failed")
        return {"success": False, "errorCode": "handlerFailed", "errorMessage": str(exc)}
    if not isinstance(answer, Mapping) or not isinstance(answer.get("success"), bool):
        log.warning("tool call handler returned %r; failing the call", answer)
        return {
            "success": False,
            "errorCode": "handlerFailed",
            "errorMessage": "the tool call handler returned no result",
        }
    return dict(answer)
