"""Server->client requests of one connection: ids, the waiting, the first answer.

:meth:`ServerRequests.ask` sends a request and waits for the peer's answer;
:meth:`ServerRequests.settle` hands it the answer the read loop received;
:meth:`ServerRequests.fail_all` ends every wait when the connection closes.
The errors a caller sees are :class:`PeerClosed`, :class:`PeerTimeout` and
:class:`PeerErrorResponse`, all :class:`ServerRequestError`.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from typing import Any

import anyio

from appserver.protocol import errors as rpc_errors
from appserver.protocol.encoding import scrub_surrogates
from appserver.rpc import framing

log = logging.getLogger("appserver.rpc")


class ServerRequestError(Exception):
    """A server->client request got no usable answer."""


class PeerClosed(ServerRequestError):
    """The connection closed before the peer answered."""


class PeerTimeout(ServerRequestError):
    """The peer did not answer in time."""


class PeerErrorResponse(ServerRequestError):
    """The peer answered with a JSON-RPC error."""

    def __init__(self, error: Any) -> None:
        super().__init__(f"peer answered with an error: {error!r}")
        self.error = error


class _Waiter:
    __slots__ = ("done", "error", "result")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.result: Any = None
        self.error: ServerRequestError | None = None


class ServerRequests:
    """The server->client requests one connection sent and still waits for."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._waiting: dict[int, _Waiter] = {}

    async def ask(self, method: str, params: Any, send: Callable[[str], None], limit: float) -> Any:
        """Send a request with ``send`` and wait up to ``limit`` seconds for its result.

        Raises :class:`PeerClosed`, :class:`PeerTimeout` or :class:`PeerErrorResponse`.
        """
        request_id = next(self._ids)
        waiter = _Waiter()
        self._waiting[request_id] = waiter
        try:
            send(framing.request_frame(request_id, method, params))
            with anyio.move_on_after(limit):
                await waiter.done.wait()
            if not waiter.done.is_set():
                raise PeerTimeout(f"no answer to {method} within {limit:g}s")
            if waiter.error is not None:
                raise waiter.error
            return waiter.result
        finally:
            self._waiting.pop(request_id, None)

    def waits_for(self, raw_id: Any) -> bool:
        """Whether ``raw_id`` names a server->client request still waiting."""
        return isinstance(raw_id, int) and raw_id in self._waiting

    def settle(self, raw_id: Any, message: dict[str, Any], peer: object) -> None:
        """Settle the request ``raw_id`` names with its first answer (``peer``
        names the connection in the log).

        Only the first answer counts: a later one (two answers in one write
        both arrive before the waiting task wakes) must not replace it, or
        ``decline`` then ``accept`` would run what was declined. Later answers,
        and answers to requests nobody waits for any more, are ignored and
        logged. An answer with neither ``result`` nor ``error`` is an error
        answer (approvals fail closed on it).
        """
        waiter = self._waiting.get(raw_id) if isinstance(raw_id, int) else None
        if waiter is None or waiter.done.is_set():
            log.warning(
                "%r: ignored an answer to server request %.40r: %s",
                peer,
                raw_id,
                "it was already answered (the first answer counts)"
                if waiter is not None
                else "no request of that id is waiting (answered, timed out or never sent)",
            )
            return
        # What the client answers becomes items, tool results and stored rows.
        if "error" in message:
            waiter.error = PeerErrorResponse(scrub_surrogates(message["error"]))
        elif "result" in message:
            waiter.result = scrub_surrogates(message["result"])
        else:
            waiter.error = PeerErrorResponse(
                {
                    "code": rpc_errors.INVALID_REQUEST,
                    "message": "an answer with neither result nor error",
                }
            )
        waiter.done.set()

    def fail_all(self, reason: str) -> None:
        """The connection closed: every request still waiting fails with :class:`PeerClosed`."""
        for waiter in self._waiting.values():
            if waiter.done.is_set():
                continue  # answered before the close: that answer stands
            waiter.error = PeerClosed(f"connection closed: {reason}")
            waiter.done.set()
        self._waiting.clear()
