"""Exceptions raised by the client."""

from __future__ import annotations

from typing import Any

# Codes the server uses beyond JSON-RPC's own (see the protocol reference).
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
SERVER_OVERLOADED = -32001
NOT_INITIALIZED = -32002
ALREADY_INITIALIZED = -32003
THREAD_NOT_FOUND = -32010
THREAD_NOT_ACTIVE = -32011
TURN_IN_PROGRESS = -32012
TURN_NOT_FOUND = -32013
TURN_NOT_RUNNING = -32014


class AppServerError(Exception):
    """Base class of every error this package raises."""


class RpcError(AppServerError):
    """The server answered a request with a JSON-RPC error object."""

    def __init__(self, code: int, message: str, data: Any = None, method: str = "") -> None:
        detail = ""
        if isinstance(data, dict) and isinstance(data.get("detail"), str):
            detail = f" ({data['detail']})"
        where = f"{method}: " if method else ""
        super().__init__(f"{where}{code} {message}{detail}")
        self.code = code
        self.message = message
        self.data = data
        self.method = method


class ConnectionLost(AppServerError):
    """The connection to the server went away.

    Raised by requests that were in flight when it happened (the client cannot
    know whether the server acted on them), by everything once the client gave
    up reconnecting, and at once for a stdio server whose process exited.
    """


class ClientClosed(AppServerError):
    """The client was closed with :meth:`AppServerClient.close`."""


class ConnectFailed(AppServerError):
    """The server could not be reached, or refused the connection.

    ``permanent`` is true when retrying cannot help (HTTP 401/403: wrong token
    or origin; a bad URL). ``status`` is the HTTP status of a refused WebSocket
    upgrade (401: the token was missing or wrong), else ``None``.
    """

    def __init__(self, message: str, *, permanent: bool = False, status: int | None = None) -> None:
        super().__init__(message)
        self.permanent = permanent
        self.status = status


class NotificationOverflow(AppServerError):
    """A notification iterator fell too far behind and stopped accepting events.

    Everything buffered before the overflow was delivered first; ``dropped``
    notifications after that were not. Re-read state (``thread/read``) and
    open a new iterator.
    """

    def __init__(self, dropped: int, buffer: int) -> None:
        super().__init__(
            f"notification iterator overflowed its buffer of {buffer}; "
            f"{dropped} notification(s) were not delivered"
        )
        self.dropped = dropped
        self.buffer = buffer
