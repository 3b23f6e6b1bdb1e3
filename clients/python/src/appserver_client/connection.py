"""One connection to an appserver: sending requests, reading frames, dispatching
notifications and server requests, and the bookkeeping a reconnect needs (the threads
followed, the last ``seq`` of each, the turns still running).

:class:`Connection` holds the state of :class:`~appserver_client.AppServerClient`;
opening and re-opening the transport is :mod:`appserver_client.reconnect`.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from appserver_client import __version__
from appserver_client.errors import AppServerError, ClientClosed, ConnectionLost, RpcError
from appserver_client.handlers import (
    ApprovalHandler,
    ChannelToolCallHandler,
    ReadTextFileHandler,
    ServerRequests,
    TerminalHandler,
    ToolCallHandler,
    WriteTextFileHandler,
)
from appserver_client.notifications import Notification, NotificationStream
from appserver_client.transport import Transport

log = logging.getLogger("appserver_client")

#: Called with the client after a reconnect, or when the connection drops.
ReconnectCallback = Callable[[Any], Any]


class Connection(ServerRequests):
    """The connection's state, its read loop and the sending of requests."""

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
        self.capabilities = dict(capabilities or {})
        self.approval_handler = approval_handler
        self.tool_call_handler = tool_call_handler
        self.channel_tool_call_handler = channel_tool_call_handler
        self.read_text_file_handler = read_text_file_handler
        self.write_text_file_handler = write_text_file_handler
        self.terminal_handler = terminal_handler
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
        self._request_handlers = {}
        self._reconnect_callbacks: list[ReconnectCallback] = []
        self._disconnect_callbacks: list[ReconnectCallback] = []
        self._server_tasks: set[asyncio.Task[None]] = set()
        self._ready = asyncio.Event()
        self._closing = False
        self._closed = asyncio.Event()
        self._failure: AppServerError | None = None

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
            # What it replays follows this answer in seq order, from afterSeq on, leaving
            # out what this connection already got as broadcasts: seqs below those are new.
            after_seq = params.get("afterSeq")
            if isinstance(after_seq, int):
                self._last_seq[thread_id] = after_seq
            elif params.get("replayRecent"):
                self._last_seq.pop(thread_id, None)
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
