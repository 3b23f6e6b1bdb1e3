"""Client side of bench/turns.py: a lean JSON-RPC client, subscriber worker
processes and the stuck subscriber.

The client speaks WebSocket itself (handshake, masked client frames, unmasked
server frames, ping/pong, close) on an asyncio Protocol, and JSON lines over a
child's pipes. It classifies notifications by their encoded prefix instead of
parsing them, so the two client cores spend little CPU per frame and the
figures measure the servers. The same code drives appserver and the floors.

    turns_client.py worker   # holds N subscriber connections; JSON-lines control on stdio
    turns_client.py stuck    # one subscriber that stops reading (small SO_RCVBUF)

Worker control (one JSON object per line in, one per line out):
    {"cmd":"connect","url":U,"n":N,"threads":[T..],"group":G} -> {"connected":N}
    {"cmd":"arm","group":G,"timeout":S}        -> {"armed":true}, later {"report":{...}}
    {"cmd":"close"}                             -> {"closed":N}
    {"cmd":"exit"} or EOF                       -> exits
Stuck control:
    {"cmd":"connect","url":U,"thread":T,"rcvbuf":B} -> {"connected":true,"rcvbuf":B'}
    {"cmd":"peek"}                                  -> {"recv_q":B,"server_send_q":B}
    {"cmd":"drain","expect":N,"turns":K,"timeout":S} -> {"deltas":..,"text_ok":..,"closed":..}
    {"cmd":"close"}                                 -> {"closed":true}
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

NOTIFICATION = b'{"jsonrpc":"2.0","method":"'
DELTA = b'{"jsonrpc":"2.0","method":"item/agentMessage/delta"'
TURN_END = (b"turn/completed", b"turn/failed", b"turn/cancelled")
IDLE_MARK = b'"running":false'
CALL_TIMEOUT = 30.0


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def expected_text(count: int) -> str:
    """What the offline model's ``?stream N`` streams, concatenated."""
    return "".join(f"chunk {i} " for i in range(1, count + 1))


# --- WebSocket framing ----------------------------------------------------------------


def client_frame(payload: bytes, opcode: int = 0x1) -> bytes:
    """One masked, unfragmented client frame."""
    length = len(payload)
    if length < 126:
        head = bytes([0x80 | opcode, 0x80 | length])
    elif length < 1 << 16:
        head = bytes([0x80 | opcode, 0x80 | 126]) + length.to_bytes(2, "big")
    else:
        head = bytes([0x80 | opcode, 0x80 | 127]) + length.to_bytes(8, "big")
    mask = os.urandom(4)
    if length:
        key = int.from_bytes((mask * (length // 4 + 1))[:length], "big")
        body = (int.from_bytes(payload, "big") ^ key).to_bytes(length, "big")
    else:
        body = b""
    return head + mask + body


def handshake_request(url: str) -> tuple[str, int, bytes]:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    key = base64.b64encode(os.urandom(16)).decode()
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    request = (
        f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    return host, port, request.encode()


class FrameParser:
    """Incremental parser of server->client frames (unmasked)."""

    def __init__(self) -> None:
        self._buf = b""
        self._fragments: list[bytes] = []
        self._fragment_opcode = 0x1

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """Complete messages as ``(opcode, payload)``; control frames included."""
        buf = self._buf + data if self._buf else data
        out: list[tuple[int, bytes]] = []
        pos, size = 0, len(buf)
        while size - pos >= 2:
            b0, b1 = buf[pos], buf[pos + 1]
            length, head = b1 & 0x7F, 2
            if length == 126:
                if size - pos < 4:
                    break
                length, head = (buf[pos + 2] << 8) | buf[pos + 3], 4
            elif length == 127:
                if size - pos < 10:
                    break
                length, head = int.from_bytes(buf[pos + 2 : pos + 10], "big"), 10
            mask = b""
            if b1 & 0x80:  # servers never mask, but be exact anyway
                if size - pos < head + 4:
                    break
                mask = buf[pos + head : pos + head + 4]
                head += 4
            end = pos + head + length
            if end > size:
                break
            payload = buf[pos + head : end]
            if mask and length:
                key = int.from_bytes((mask * (length // 4 + 1))[:length], "big")
                payload = (int.from_bytes(payload, "big") ^ key).to_bytes(length, "big")
            pos = end
            opcode = b0 & 0x0F
            if opcode >= 0x8:
                out.append((opcode, payload))
            elif not b0 & 0x80:  # a fragment (first or middle)
                if opcode:
                    self._fragment_opcode = opcode
                self._fragments.append(payload)
            elif opcode == 0:  # the final fragment
                self._fragments.append(payload)
                out.append((self._fragment_opcode, b"".join(self._fragments)))
                self._fragments = []
            else:
                out.append((opcode, payload))
        self._buf = buf[pos:] if pos < size else b""
        return out


# --- one JSON-RPC peer, frame classification shared by every transport -------------------


class TurnWatch:
    """What one connection saw of one turn."""

    __slots__ = ("deltas", "done", "end_method", "first", "idle", "t_done")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.deltas = 0
        self.first = 0.0
        self.t_done = 0.0
        self.end_method = ""
        self.done = loop.create_future()
        self.idle = loop.create_future()  # thread/runtimeChanged running:false after the end


class Peer:
    """JSON-RPC over some framing; subclasses provide ``_write_text``."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._next_id = 0
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.watch: TurnWatch | None = None
        self.capture: list[bytes] | None = None
        self.closed = self.loop.create_future()
        self.close_code: int | None = None

    def _write_text(self, data: bytes) -> None:
        raise NotImplementedError

    def arm(self) -> TurnWatch:
        self.watch = TurnWatch(self.loop)
        return self.watch

    def on_message(self, payload: bytes) -> None:
        if payload.startswith(NOTIFICATION):
            watch = self.watch
            if self.capture is not None:
                self.capture.append(payload)
            if payload.startswith(DELTA):
                if watch is not None:
                    if not watch.deltas:
                        watch.first = time.monotonic()
                    watch.deltas += 1
                return
            if watch is None:
                return
            start = len(NOTIFICATION)
            method = payload[start : payload.index(b'"', start)]
            if method in TURN_END and not watch.done.done():
                watch.t_done = time.monotonic()
                watch.end_method = method.decode()
                watch.done.set_result(None)
            elif (
                method == b"thread/runtimeChanged"
                and watch.done.done()
                and IDLE_MARK in payload
                and not watch.idle.done()
            ):
                watch.idle.set_result(None)
            return
        try:
            message = json.loads(payload)
        except ValueError:
            return
        if self.capture is not None and "result" in message:
            self.capture.append(payload)
        future = self._pending.pop(message.get("id"), None)
        if future is not None and not future.done():
            future.set_result(message)

    def lost(self) -> None:
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionError("connection closed"))
        self._pending.clear()
        for future in (self.watch.done, self.watch.idle) if self.watch else ():
            if not future.done():
                future.set_exception(ConnectionError("connection closed"))
                future.exception()  # mark retrieved
        if not self.closed.done():
            self.closed.set_result(None)

    def send_request(self, method: str, params: Any) -> asyncio.Future[dict[str, Any]]:
        self._next_id += 1
        future: asyncio.Future[dict[str, Any]] = self.loop.create_future()
        self._pending[self._next_id] = future
        frame = {"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params}
        self._write_text(dumps(frame).encode())
        return future

    async def call(self, method: str, params: Any = None, timeout: float = CALL_TIMEOUT) -> Any:
        reply = await asyncio.wait_for(self.send_request(method, params or {}), timeout)
        if "error" in reply:
            raise RpcFailure(method, reply["error"])
        return reply.get("result")

    def notify(self, method: str, params: Any = None) -> None:
        self._write_text(
            dumps({"jsonrpc": "2.0", "method": method, "params": params or {}}).encode()
        )

    async def initialize(self) -> None:
        await self.call("initialize", {"clientInfo": {"name": "bench-turns", "version": "1"}})
        self.notify("initialized")


class RpcFailure(Exception):
    def __init__(self, method: str, error: Any) -> None:
        super().__init__(f"{method}: {error}")
        self.error = error


class WsPeer(Peer, asyncio.Protocol):
    """A minimal WebSocket client."""

    def __init__(self, request: bytes) -> None:
        Peer.__init__(self)
        self._request = request
        self._head: bytes | None = b""
        self._parser = FrameParser()
        self.opened: asyncio.Future[None] = self.loop.create_future()
        self.transport: asyncio.Transport | None = None

    @classmethod
    async def open(cls, url: str, timeout: float = 15.0) -> WsPeer:
        host, port, request = handshake_request(url)
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(timeout):
            _, peer = await loop.create_connection(lambda: cls(request), host, port)
            await peer.opened
        return peer

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        transport.write(self._request)

    def data_received(self, data: bytes) -> None:
        if self._head is not None:
            self._head += data
            end = self._head.find(b"\r\n\r\n")
            if end < 0:
                return
            status, data = self._head[:end], self._head[end + 4 :]
            self._head = None
            if not status.startswith(b"HTTP/1.1 101"):
                if not self.opened.done():
                    self.opened.set_exception(ConnectionError(status.decode(errors="replace")))
                assert self.transport is not None
                self.transport.close()
                return
            self.opened.set_result(None)
            if not data:
                return
        for opcode, payload in self._parser.feed(data):
            if opcode == 0x1:
                self.on_message(payload)
            elif opcode == 0x9:  # ping
                self._write(client_frame(payload, 0xA))
            elif opcode == 0x8:
                self.close_code = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else 1005
                self._write(client_frame(payload[:2], 0x8))
                assert self.transport is not None
                self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.opened.done():
            self.opened.set_exception(ConnectionError("closed during handshake"))
        self.lost()

    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def _write_text(self, data: bytes) -> None:
        self._write(client_frame(data))

    async def aclose(self, timeout: float = 3.0) -> None:
        if self.transport is None or self.closed.done():
            return
        self._write(client_frame((1000).to_bytes(2, "big"), 0x8))
        try:
            await asyncio.wait_for(asyncio.shield(self.closed), timeout)
        except TimeoutError:
            self.transport.abort()


class PipePeer(Peer, asyncio.SubprocessProtocol):
    """JSON lines over a child's stdin/stdout (stderr kept as a tail)."""

    def __init__(self) -> None:
        Peer.__init__(self)
        self._buf = b""
        self.stderr = bytearray()
        self.transport: asyncio.SubprocessTransport | None = None
        self.exited: asyncio.Future[None] = self.loop.create_future()

    @classmethod
    async def spawn(cls, command: list[str], env: dict[str, str], cwd: Any = None) -> PipePeer:
        loop = asyncio.get_running_loop()
        _, peer = await loop.subprocess_exec(cls, *command, env=env, cwd=cwd)
        return peer

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.SubprocessTransport)
        self.transport = transport

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd == 2:
            self.stderr += data
            del self.stderr[:-16384]
            return
        buf = self._buf + data if self._buf else data
        start = 0
        while (end := buf.find(b"\n", start)) >= 0:
            self.on_message(buf[start:end])
            start = end + 1
        self._buf = buf[start:]

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 1:
            self.lost()

    def process_exited(self) -> None:
        self.lost()
        if not self.exited.done():
            self.exited.set_result(None)

    def _write_text(self, data: bytes) -> None:
        assert self.transport is not None
        pipe = self.transport.get_pipe_transport(0)
        if isinstance(pipe, asyncio.WriteTransport) and not pipe.is_closing():
            pipe.write(data + b"\n")

    async def aclose(self, timeout: float = 10.0) -> None:
        assert self.transport is not None
        pipe = self.transport.get_pipe_transport(0)
        if pipe is not None:
            pipe.close()  # EOF: a stdio server drains and exits
        try:
            await asyncio.wait_for(asyncio.shield(self.exited), timeout)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.transport.kill()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.exited), 5)
        self.transport.close()


# --- worker: N subscriber connections -------------------------------------------------------


def _reply(obj: dict[str, Any]) -> None:
    sys.stdout.write(dumps(obj) + "\n")
    sys.stdout.flush()


async def _open_subscriber(url: str, threads: list[str]) -> WsPeer:
    peer = await WsPeer.open(url)
    await peer.initialize()
    for thread in threads:
        await peer.call("thread/subscribe", {"threadId": thread})
    return peer


async def _report(peers: list[WsPeer], watches: list[TurnWatch], timeout: float) -> None:
    pending = [w.done for w in watches]
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.gather(*pending, return_exceptions=True), timeout)
    done = [w for w in watches if w.done.done() and not w.done.exception()]
    counts = [w.deltas for w in watches]
    _reply(
        {
            "report": {
                "deltas": sum(counts),
                "min": min(counts, default=0),
                "max": max(counts, default=0),
                "completed": len(done),
                "n": len(watches),
                "last": max((w.t_done for w in done), default=0.0),
                "first": min((w.first for w in watches if w.first), default=0.0),
                "closed": sum(1 for p in peers if p.closed.done()),
                "ends": sorted({w.end_method for w in done}),
            }
        }
    )


async def worker_main() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    groups: dict[str, list[WsPeer]] = {}
    reporter: asyncio.Task[None] | None = None
    try:
        while line := await reader.readline():
            command = json.loads(line)
            cmd = command["cmd"]
            if cmd == "connect":
                opened = await asyncio.gather(
                    *(
                        _open_subscriber(command["url"], command.get("threads", []))
                        for _ in range(command["n"])
                    )
                )
                group = groups.setdefault(command.get("group", ""), [])
                group.extend(opened)
                _reply({"connected": len(group)})
            elif cmd == "arm":
                peers = groups[command.get("group", "")]
                watches = [peer.arm() for peer in peers]
                reporter = loop.create_task(_report(peers, watches, command.get("timeout", 60)))
                _reply({"armed": True})
            elif cmd == "close":
                every = [peer for group in groups.values() for peer in group]
                await asyncio.gather(*(peer.aclose() for peer in every))
                _reply({"closed": len(every)})
                groups.clear()
            elif cmd == "exit":
                break
    finally:
        if reporter is not None:
            reporter.cancel()
        for group in groups.values():
            for peer in group:
                if peer.transport is not None:
                    peer.transport.abort()


# --- the stuck subscriber ---------------------------------------------------------------------


class StuckSubscriber:
    """A blocking raw socket that subscribes, then reads nothing until told."""

    def __init__(self) -> None:
        self.sock: socket.socket | None = None
        self.parser = FrameParser()
        self.queue: list[tuple[int, bytes]] = []
        self.server_port = 0

    def _frames(self, deadline: float) -> tuple[int, bytes] | None:
        assert self.sock is not None
        while not self.queue:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            self.sock.settimeout(remaining)
            data = self.sock.recv(1 << 16)
            if not data:
                return None
            self.queue.extend(self.parser.feed(data))
        return self.queue.pop(0)

    def connect(self, url: str, thread: str, rcvbuf: int, maxseg: int) -> dict[str, Any]:
        host, port, request = handshake_request(url)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # Before connect: a small window, and a small MSS so the server's kernel
        # does not grow its send buffer to megabytes (loopback MSS is ~64 KiB).
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        if maxseg:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, maxseg)
        sock.settimeout(15)
        sock.connect((host, port))
        self.sock, self.parser, self.queue = sock, FrameParser(), []
        sock.sendall(request)
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            if not chunk:
                raise ConnectionError("closed during handshake")
            head += chunk
        status, _, rest = head.partition(b"\r\n\r\n")
        if not status.startswith(b"HTTP/1.1 101"):
            raise ConnectionError(status.decode(errors="replace"))
        if rest:
            self.queue.extend(self.parser.feed(rest))
        calls = [
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {"clientInfo": {"name": "bench-stuck", "version": "1"}},
            },
            {"jsonrpc": "2.0", "method": "initialized", "params": {}},
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "thread/subscribe",
                "params": {"threadId": thread},
            },
        ]
        sock.sendall(b"".join(client_frame(dumps(c).encode()) for c in calls))
        deadline = time.monotonic() + 15
        while True:
            frame = self._frames(deadline)
            if frame is None:
                raise ConnectionError("closed before subscribing")
            if frame[0] == 0x1 and frame[1].startswith(b'{"jsonrpc":"2.0","id":2'):
                break
        self.server_port = port
        return {
            "connected": True,
            "rcvbuf": sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF),
            "mss": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG),
        }

    def peek(self) -> dict[str, Any]:
        """Bytes stuck in the kernel: our receive queue and the server's send
        queue for this connection (from /proc/net/tcp; loopback, same host)."""
        assert self.sock is not None
        mine = self.sock.getsockname()[1]
        server_send_q = recv_q = None
        with contextlib.suppress(OSError):
            for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
                fields = line.split()
                local, remote = int(fields[1].split(":")[1], 16), int(fields[2].split(":")[1], 16)
                tx, rx = (int(v, 16) for v in fields[4].split(":"))
                if local == self.server_port and remote == mine:
                    server_send_q = tx
                elif local == mine and remote == self.server_port:
                    recv_q = rx
        return {"recv_q": recv_q, "server_send_q": server_send_q}

    def drain(self, expect: int, turns: int, timeout: float) -> dict[str, Any]:
        """Read until ``turns`` turns have ended (or the server closed us)."""
        deadline = time.monotonic() + timeout
        deltas, biggest, pieces, ends = 0, 0, [], 0
        closed = False
        code: int | str | None = None
        try:
            while ends < turns:
                frame = self._frames(deadline)
                if frame is None:
                    closed = True
                    break
                opcode, payload = frame
                if opcode == 0x8:
                    closed, code = True, int.from_bytes(payload[:2], "big") if payload else 1005
                    break
                if opcode == 0x9:
                    assert self.sock is not None
                    self.sock.sendall(client_frame(payload, 0xA))
                    continue
                if payload.startswith(DELTA):
                    deltas += 1
                    biggest = max(biggest, len(payload))
                    pieces.append(json.loads(payload)["params"]["delta"])
                elif payload.startswith(NOTIFICATION + b"turn/"):
                    method = payload[len(NOTIFICATION) : payload.index(b'"', len(NOTIFICATION))]
                    ends += method in TURN_END
        except TimeoutError:
            pass
        except OSError as exc:
            closed, code = True, type(exc).__name__
        return {
            "deltas": deltas,
            "biggest": biggest,
            "text_ok": "".join(pieces) == expected_text(expect) * turns,
            "turns": ends,
            "closed": closed,
            "close_code": code,
        }

    def close(self) -> None:
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.close()
            self.sock = None


def stuck_main() -> None:
    stuck = StuckSubscriber()
    try:
        for line in sys.stdin:
            command = json.loads(line)
            cmd = command["cmd"]
            try:
                if cmd == "connect":
                    _reply(
                        stuck.connect(
                            command["url"], command["thread"], command["rcvbuf"],
                            command.get("maxseg", 0),
                        )
                    )  # fmt: skip
                elif cmd == "peek":
                    _reply(stuck.peek())
                elif cmd == "drain":
                    _reply(
                        stuck.drain(
                            command["expect"], command.get("turns", 1), command.get("timeout", 30)
                        )
                    )
                elif cmd == "close":
                    stuck.close()
                    _reply({"closed": True})
                elif cmd == "exit":
                    break
            except Exception as exc:  # report, never hang the controller
                _reply({"error": f"{type(exc).__name__}: {exc}"})
    finally:
        stuck.close()


if __name__ == "__main__":
    if sys.argv[1:] == ["worker"]:
        asyncio.run(worker_main())
    elif sys.argv[1:] == ["stuck"]:
        stuck_main()
    else:
        sys.exit("usage: turns_client.py worker|stuck")
