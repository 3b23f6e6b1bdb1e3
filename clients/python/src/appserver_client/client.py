"""The asyncio client: opening one, its public API (requests, notifications, turns,
handlers, reconnect callbacks) and the outcome of a turn.

Its parts: :mod:`appserver_client.handlers` (the server's requests to the client),
:mod:`appserver_client.connection` (one connection) and
:mod:`appserver_client.reconnect` (opening and re-opening it).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import os
import random
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Generic, Self, TypedDict, TypeVar, Unpack, cast

from appserver_client._generated import ChatMessage, GeneratedMethods, Item, SenderContext, Turn
from appserver_client.errors import SERVER_OVERLOADED, ClientClosed, RpcError
from appserver_client.handlers import (
    DECISIONS,
    ApprovalHandler,
    ChannelToolCallHandler,
    ReadTextFileHandler,
    TerminalHandler,
    ToolCallHandler,
    WriteTextFileHandler,
    maybe_await,
)
from appserver_client.notifications import DEFAULT_BUFFER, Notification, NotificationStream
from appserver_client.reconnect import Reconnecting
from appserver_client.transport import (
    StderrMode,
    StdioTransport,
    Transport,
    WebSocketTransport,
    websocket_url,
)

__all__ = [
    "DECISIONS",
    "AppServerClient",
    "ApprovalHandler",
    "ChannelToolCallHandler",
    "ClientOptions",
    "Opening",
    "ReadTextFileHandler",
    "TerminalHandler",
    "ToolCallHandler",
    "TurnOutcome",
    "WriteTextFileHandler",
]

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


def _seconds(timeout: float | None) -> float | None:
    return None if timeout is None or math.isinf(timeout) else timeout


class AppServerClient(Reconnecting, GeneratedMethods):
    """A connection to an appserver, with one typed method per protocol method.

    Open one with :meth:`spawn` (a child process over stdio) or :meth:`connect`
    (WebSocket). The ``initialize`` handshake is done for you. Requests may be
    issued concurrently from any number of tasks. Runs on asyncio (also under
    anyio's asyncio backend).
    """

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
                        await maybe_await(on_notification(notification))
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
