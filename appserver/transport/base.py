"""The contract every transport fulfils for the JSON-RPC core."""

from __future__ import annotations

from typing import Protocol

PARSE_ERROR = -32700
INVALID_REQUEST = -32600

DEFAULT_MAX_BYTES = 16 * 1024 * 1024
"""A face's client may fall this far behind (``--max-client-backlog``; the
:class:`~appserver.transport.peer_writer.PeerWriter`'s bound, light to import
for the command line)."""


class FrameRejected(Exception):
    """An inbound frame was unusable; the core answers it with ``id: null``."""

    def __init__(self, code: int, message: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.message = message
        self.detail = detail


class FrameTooLarge(FrameRejected):
    """An inbound message exceeded the size cap and was skipped."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            INVALID_REQUEST,
            "Invalid request",
            f"message of at least {size} bytes exceeds the {limit}-byte limit",
        )


class TransportClosed(Exception):
    """The peer went away (EOF, closed socket, broken pipe)."""


class Transport(Protocol):
    """One peer connection that carries one JSON-RPC message per frame.

    ``receive`` returns the next frame, raises :class:`FrameRejected` for a
    frame it skipped and :class:`TransportClosed` when the peer is gone.
    ``send_batch`` writes frames in order and raises :class:`TransportClosed`
    when they cannot be written.
    """

    kind: str

    async def receive(self) -> str: ...

    async def send_batch(self, frames: list[str]) -> None: ...

    def try_send(self, frame: str) -> bool:
        """Write ``frame`` now without waiting, if the peer is keeping up;
        ``False`` means "queue it instead" (never an error)."""
        ...

    async def close(self, code: int = 1000, reason: str = "") -> None: ...


class ListenerError(Exception):
    """A listener refuses to start with these options (defined here, light to
    import, so a command can catch it without loading the WebSocket library)."""


class AddressInUse(ListenerError):
    """Another process already listens on ``host:port``."""

    def __init__(self, host: str, port: int) -> None:
        self.host = f"[{host}]" if ":" in host else host  # an IPv6 literal, as in a URL
        self.port = port
        super().__init__(f"address already in use: ws://{self.host}:{port} (another server?)")

    def advice(self, flag: str) -> str:
        """One line naming the address and what to do; ``flag``: the option that set it."""
        return (
            f"ws://{self.host}:{self.port} is already in use (another server?); "
            f"pick another port with {flag} ws://{self.host}:PORT or 0 for any free port"
        )
