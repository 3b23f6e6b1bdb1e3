"""An in-memory transport pair: the default fixture for tests."""

from __future__ import annotations

import math

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from appserver.transport.base import TransportClosed


class MemoryTransport:
    """One end of an in-memory pair. Frames are strings, as on the wire."""

    kind = "memory"

    def __init__(
        self, receive: MemoryObjectReceiveStream[str], send: MemoryObjectSendStream[str]
    ) -> None:
        self._receive = receive
        self._send = send

    async def receive(self) -> str:
        try:
            return await self._receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError) as exc:
            raise TransportClosed from exc

    def try_send(self, frame: str) -> bool:
        try:
            self._send.send_nowait(frame)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            return False
        return True

    async def send(self, frame: str) -> None:
        await self.send_batch([frame])

    async def send_batch(self, frames: list[str]) -> None:
        try:
            for frame in frames:
                self._send.send_nowait(frame)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise TransportClosed from exc

    async def close(self, code: int = 1000, reason: str = "") -> None:
        await self._send.aclose()
        await self._receive.aclose()


def memory_pair() -> tuple[MemoryTransport, MemoryTransport]:
    """Return ``(client_end, server_end)`` connected to each other."""
    to_server_send, to_server_receive = anyio.create_memory_object_stream[str](math.inf)
    to_client_send, to_client_receive = anyio.create_memory_object_stream[str](math.inf)
    client = MemoryTransport(to_client_receive, to_server_send)
    server = MemoryTransport(to_server_receive, to_client_send)
    return client, server
