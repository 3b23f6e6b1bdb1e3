"""WebSocket transport and listener (the ``websockets`` library).

One JSON-RPC message per text frame on path ``/ws``. The same listener
answers ``GET /healthz`` and ``GET /readyz``. Before the upgrade it checks
the ``Origin`` header (browsers only; refused unless allowed) and the
``?token=`` query parameter (constant-time compare).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import Server, ServerConnection, broadcast, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response
from websockets.protocol import State

from appserver.transport.base import INVALID_REQUEST, FrameRejected, TransportClosed

log = logging.getLogger("appserver.websocket")

DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024
WS_PATH = "/ws"


class WebSocketTransport:
    """One accepted WebSocket connection."""

    kind = "websocket"

    def __init__(self, ws: ServerConnection) -> None:
        self._ws = ws

    async def receive(self) -> str:
        try:
            message = await self._ws.recv()
        except ConnectionClosed as exc:
            raise TransportClosed from exc
        if isinstance(message, bytes):
            raise FrameRejected(
                INVALID_REQUEST, "Invalid request", "binary frames are not supported; send text"
            )
        return message

    def try_send(self, frame: str) -> bool:
        ws = self._ws
        # `paused` is set while the socket's write buffer is above its high-water
        # mark: then the frame waits in the outbox, where it can be coalesced.
        if ws.paused or ws.protocol.state is not State.OPEN:
            return False
        try:
            # The library's own synchronous send path (no task switch, no drain).
            broadcast([ws], frame, raise_exceptions=True)
        except ExceptionGroup:
            return False
        return True

    async def send_batch(self, frames: list[str]) -> None:
        try:
            for frame in frames:
                await self._ws.send(frame)
        except ConnectionClosed as exc:
            raise TransportClosed from exc

    async def close(self, code: int = 1000, reason: str = "") -> None:
        await self._ws.close(code, reason[:120])


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class ListenerOptions:
    """How the WebSocket listener admits connections."""

    host: str = "127.0.0.1"
    port: int = 9100
    token: str | None = None
    allowed_origins: Sequence[str] = field(default_factory=tuple)
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    ping_interval: float = 30.0
    ping_timeout: float = 10.0


class ListenerError(Exception):
    """The listener refuses to start with these options."""


def _json_response(status: HTTPStatus, body: dict[str, Any]) -> Response:
    data = (json.dumps(body) + "\n").encode()
    headers = Headers(
        [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(data))),
            ("Cache-Control", "no-store"),
        ]
    )
    return Response(status.value, status.phrase, headers, data)


class Admission:
    """The pre-upgrade HTTP checks (health, path, Origin, token)."""

    def __init__(self, options: ListenerOptions, is_ready: Callable[[], bool]) -> None:
        self.options = options
        self.is_ready = is_ready
        self._token = options.token.encode() if options.token else None
        self._origins = {origin.rstrip("/").lower() for origin in options.allowed_origins}

    def __call__(self, connection: ServerConnection, request: Request) -> Response | None:
        url = urlsplit(request.path)
        origin = request.headers.get("Origin")
        if origin is not None and origin.rstrip("/").lower() not in self._origins:
            return _json_response(HTTPStatus.FORBIDDEN, {"error": "origin not allowed"})
        if url.path == "/healthz":
            return _json_response(HTTPStatus.OK, {"status": "ok"})
        if url.path == "/readyz":
            if self.is_ready():
                return _json_response(HTTPStatus.OK, {"status": "ok"})
            return _json_response(HTTPStatus.SERVICE_UNAVAILABLE, {"status": "starting"})
        if url.path != WS_PATH:
            return _json_response(HTTPStatus.NOT_FOUND, {"error": "not found"})
        if self._token is not None:
            offered = parse_qs(url.query).get("token", [""])[0].encode()
            if not hmac.compare_digest(offered, self._token):
                return _json_response(HTTPStatus.UNAUTHORIZED, {"error": "unauthorized"})
        return None


def check_options(options: ListenerOptions) -> None:
    """Raise :class:`ListenerError` for options the listener refuses."""
    if not options.token and not is_loopback(options.host):
        raise ListenerError(
            f"refusing to listen on non-loopback address {options.host!r} without a token "
            "(pass --token or set APPSERVER_TOKEN)"
        )


async def start_listener(
    options: ListenerOptions,
    on_connection: Callable[[WebSocketTransport], Awaitable[None]],
    is_ready: Callable[[], bool],
) -> Server:
    """Bind and start accepting. Raises :class:`ListenerError` for unsafe options."""
    check_options(options)

    async def handler(ws: ServerConnection) -> None:
        await on_connection(WebSocketTransport(ws))

    return await serve(
        handler,
        options.host,
        options.port,
        process_request=Admission(options, is_ready),
        max_size=options.max_message_bytes,
        ping_interval=options.ping_interval,
        ping_timeout=options.ping_timeout,
        close_timeout=2,
        compression=None,
        server_header="appserver",
    )


def bound_port(server: Server) -> int:
    """The TCP port actually bound (useful with port 0)."""
    for sock in server.sockets:
        port: int = sock.getsockname()[1]
        return port
    raise RuntimeError("listener has no socket")
