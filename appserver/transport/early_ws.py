"""The WebSocket door's first answer, written before the server is built.

``appserver app-server --listen ws://...`` is launched by desktop apps and
scripts that connect as soon as it says where it listens, and then wait for
``initialize``. As on stdio (:mod:`appserver.transport.early`), that answer
depends on nothing the heavy modules provide; only reaching it needs more: a
listening socket, the WebSocket upgrade and one frame. This module does those
with the standard library, for the first connection and only in the plainest
case, and hands everything over to the ``websockets`` listener once the server
is built (:func:`appserver.transport.websocket.start_listener`):

* The listening socket is bound here and passed on: clients that connect
  meanwhile wait in its backlog, none is refused.
* The first connection's request is only peeked at (``MSG_PEEK``). Unless it is
  a plain upgrade that :class:`~appserver.transport.ws_admission.Admission` and
  the library would both accept without a question (``GET`` of ``/ws`` or
  ``/``, HTTP/1.1, no ``Origin``, no token configured, ``Host`` naming
  ``localhost`` or an IP address, the WebSocket headers well formed), it
  stays unread and the library does the whole handshake, admission checks
  included, as for any connection.
* A plain upgrade is answered with the library's ``101`` (no extension, no
  subprotocol, as the listener is configured); then the first frame is peeked
  at the same way. Only a complete, masked, unfragmented text frame that is a
  plain ``initialize`` is read and answered (the answer is the door's own,
  ``services/handshake.py``); anything else stays unread for the library.
* The connection is then served like any other, its first frame handled in
  full (validation, the state it sets) and its answer to it not sent again.

Every wait is bounded (:data:`~appserver.transport.early.FIRST_LINE_WAIT`
for the first connection and again for its request and frame).
"""

from __future__ import annotations

import base64
import errno
import hashlib
import select
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from appserver.transport.base import AddressInUse, ListenerError
from appserver.transport.early import FIRST_LINE_LIMIT, FIRST_LINE_WAIT, EarlyAnswer, one_line
from appserver.transport.listen_options import WS_PATHS, ListenerOptions, names_this_machine

REQUEST_LIMIT = 16 * 1024  # an upgrade request larger than this is left to the library
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455's, for Sec-WebSocket-Accept
_PEEK_PAUSE = 0.002  # between peeks at a request or frame that came in part
_LINE_LIMIT = 8190  # the longest request or header line the library reads
_HEADER_LIMIT = 128  # the most header lines it reads


@dataclass
class Accepted:
    """The first connection, accepted early. ``upgraded``: the ``101`` was sent
    (the library serves it as an open connection); ``early``: the first frame's
    text and the answer written to it, when one was."""

    sock: socket.socket
    upgraded: bool = False
    early: EarlyAnswer | None = None


@dataclass
class EarlyListener:
    """The listening socket bound early, and its first connection if one came."""

    sock: socket.socket
    accepted: Accepted | None = None

    @property
    def port(self) -> int:
        """The port bound (``--listen ws://HOST:0`` picks one)."""
        port: int = self.sock.getsockname()[1]
        return port


def listen_failure(options: ListenerOptions, exc: OSError) -> ListenerError:
    """What a bind failure is reported as (one line: the user's to fix)."""
    if exc.errno == errno.EADDRINUSE:
        return AddressInUse(options.host, options.port)
    address = f"ws://{options.host}:{options.port}"
    return ListenerError(f"cannot listen on {address}: {exc.strerror or exc}")


def bind(options: ListenerOptions) -> socket.socket:
    """A listening socket on ``options``' address (an IP literal), as the
    event loop's listener would open it; :class:`ListenerError` if it cannot."""
    family = socket.AF_INET6 if ":" in options.host else socket.AF_INET
    # The protocol is named, as the loop's listener names it (getaddrinfo gives
    # it): asyncio turns Nagle's algorithm off only on sockets whose ``proto``
    # says TCP, and a listener made with 0 (``socket.create_server``) passes
    # that 0 to every connection it accepts. Their small writes then waited for
    # the client's delayed ACK: ~40 ms before the rest of a turn's frames.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((options.host, options.port))
        sock.listen(100)
    except OSError as exc:
        sock.close()
        raise listen_failure(options, exc) from None
    return sock


def first_connection(
    listener: socket.socket,
    answer: Callable[[bytes], str | None],
    token_required: bool,
    wait: float = FIRST_LINE_WAIT,
) -> Accepted | None:
    """Accept the first connection within ``wait`` seconds and answer its first
    frame with ``answer(text)`` when both it and its upgrade are plain."""
    try:
        ready, _, _ = select.select([listener], [], [], wait)
        if not ready:
            return None
        sock, _ = listener.accept()
    except OSError:
        return None
    accepted = Accepted(sock)
    deadline = time.monotonic() + wait
    try:
        request = _peek(sock, _request_length, REQUEST_LIMIT, deadline)
        key = None if request is None or token_required else _plain_upgrade(request)
        if request is None or key is None:
            return accepted  # the library reads the request and does the handshake
    except OSError:
        return accepted  # the client is gone or slow: the library finds out, as it would have
    try:
        _consume(sock, len(request))
        sock.sendall(_switching_protocols(key))
        accepted.upgraded = True
        frame = _peek(sock, _frame_length, FIRST_LINE_LIMIT, deadline)
        text = None if frame is None else _text_payload(frame)
        reply = None if text is None else answer(text)
        if frame is None or text is None or reply is None or not one_line(reply):
            return accepted  # the library reads the frame
        _consume(sock, len(frame))
        sock.sendall(_server_frame(reply.encode("utf-8")))
        accepted.early = EarlyAnswer(text, reply)
    except OSError:
        # Something was read that the library will not see: this connection cannot
        # go on (the client finds it closed, as a broken connection).
        sock.close()
        return None
    return accepted


def _peek(
    sock: socket.socket, length: Callable[[bytes], int | None], limit: int, deadline: float
) -> bytes | None:
    """The first ``length(data)`` bytes waiting on ``sock``, left unread, or
    ``None`` when they do not come whole within ``limit`` bytes by ``deadline``
    (``length`` returns 0 for data that can never be a complete unit)."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        sock.settimeout(left)
        try:
            data = sock.recv(limit, socket.MSG_PEEK)
        except TimeoutError:
            return None
        if not data:
            return None  # closed
        needed = length(data)
        if needed == 0:
            return None
        if needed is not None and len(data) >= needed:
            return data[:needed]
        if len(data) >= limit:
            return None
        time.sleep(_PEEK_PAUSE)  # a peek returns at once while anything is unread


def _consume(sock: socket.socket, count: int) -> None:
    """Read the ``count`` bytes :func:`_peek` saw."""
    while count:
        chunk = sock.recv(count)
        if not chunk:
            raise ConnectionResetError
        count -= len(chunk)


def _request_length(data: bytes) -> int | None:
    end = data.find(b"\r\n\r\n")
    return None if end < 0 else end + 4


def _plain_upgrade(request: bytes) -> bytes | None:
    """The ``Sec-WebSocket-Key`` of ``request`` if it is an upgrade the listener
    accepts without a question, else ``None`` (anything odd is the library's)."""
    try:
        return _upgrade_key(request)
    except ValueError:  # a request-target urlsplit refuses, say
        return None


def _upgrade_key(request: bytes) -> bytes | None:
    head = request.decode("latin-1")
    if "\n" in head.replace("\r\n", "") or "\r" in head.replace("\r\n", ""):
        return None  # a bare line end: the library refuses it
    lines = head.split("\r\n")[:-2]
    if any(len(line) > _LINE_LIMIT or not line.isprintable() for line in lines):
        return None  # control characters, or a line longer than the library reads
    if len(lines) > _HEADER_LIMIT:
        return None
    parts = lines[0].split(" ")
    if len(parts) != 3 or parts[0] != "GET" or parts[2] != "HTTP/1.1":
        return None
    if urlsplit(parts[1]).path not in WS_PATHS:
        return None
    headers: dict[str, list[str]] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip() or not name.isascii():
            return None
        headers.setdefault(name.lower(), []).append(value.strip())
    if "origin" in headers or "authorization" in headers or len(headers.get("host", [])) != 1:
        return None  # a browser page, a token offered, not one Host: Admission decides
    if not names_this_machine(headers["host"][0]):
        return None  # Admission decides what a name in Host may be
    if "content-length" in headers or "transfer-encoding" in headers:
        return None  # a body: the library refuses it
    connection = {
        token.strip().lower()
        for value in headers.get("connection", [])
        for token in value.split(",")
    }
    if headers.get("upgrade", [""])[0].lower() != "websocket" or len(headers["upgrade"]) != 1:
        return None
    if "upgrade" not in connection or headers.get("sec-websocket-version") != ["13"]:
        return None
    keys = headers.get("sec-websocket-key", [])
    if len(keys) != 1:
        return None
    try:
        if len(base64.b64decode(keys[0], validate=True)) != 16:
            return None
    except ValueError:
        return None
    return keys[0].encode("ascii")


def _switching_protocols(key: bytes) -> bytes:
    """The library's ``101`` for ``key`` (no extension, no subprotocol)."""
    accept = base64.b64encode(hashlib.sha1(key + _GUID).digest())
    date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime())
    return (
        b"HTTP/1.1 101 Switching Protocols\r\n"
        + f"Date: {date}\r\n".encode("ascii")
        + b"Upgrade: websocket\r\nConnection: Upgrade\r\n"
        + b"Sec-WebSocket-Accept: "
        + accept
        + b"\r\nServer: appserver\r\n\r\n"
    )


def _frame_length(data: bytes) -> int | None:
    """The length of the client frame at the start of ``data`` (0: not one to
    answer early: anything but a final, masked text frame without extension bits)."""
    if len(data) < 2:
        return None
    if data[0] != 0x81 or not data[1] & 0x80:
        return 0
    size, header = data[1] & 0x7F, 2
    if size == 126:
        if len(data) < 4:
            return None
        (size,), header = struct.unpack("!H", data[2:4]), 4
    elif size == 127:
        return 0  # more than 64 KiB: no plain initialize
    return header + 4 + size


def _text_payload(frame: bytes) -> bytes | None:
    """The unmasked payload of a complete client text frame."""
    header = 4 if frame[1] & 0x7F == 126 else 2
    mask, payload = frame[header : header + 4], frame[header + 4 :]
    key = int.from_bytes((mask * (len(payload) // 4 + 1))[: len(payload)], "big")
    return (int.from_bytes(payload, "big") ^ key).to_bytes(len(payload), "big")


def _server_frame(payload: bytes) -> bytes:
    """A final, unmasked text frame (what a server sends)."""
    size = len(payload)
    if size < 126:
        return bytes((0x81, size)) + payload
    if size < 1 << 16:
        return bytes((0x81, 126)) + struct.pack("!H", size) + payload
    return bytes((0x81, 127)) + struct.pack("!Q", size) + payload
