"""A small JSON-RPC test client that records everything it receives, in order."""

from __future__ import annotations

import itertools
import json
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import anyio
from anyio.abc import TaskGroup

TIMEOUT = 10.0


class ClientStream(Protocol):
    async def send(self, frame: str) -> None: ...

    async def receive(self) -> str: ...

    async def close(self) -> None: ...


class RpcFailure(Exception):
    """The server answered a request with a JSON-RPC error."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(f"{error.get('code')}: {error.get('message')} {error.get('data') or ''}")
        self.code: int = error["code"]
        self.message: str = error["message"]
        self.data: Any = error.get("data")
        self.error = error


ServerRequestHandler = Callable[[str, Any], Awaitable[Any] | Any]


class RpcClient:
    """Sends requests, matches responses, keeps notifications for assertions."""

    def __init__(self, stream: ClientStream, name: str = "test-client") -> None:
        self.stream = stream
        self.name = name
        self._ids = itertools.count(1)
        self._sent: set[int] = set()  # ids of requests sent with request()
        self.messages: list[dict[str, Any]] = []  # every parsed inbound message, in order
        self.raw: list[str] = []
        self._changed = anyio.Event()
        self.closed = False
        self.on_server_request: ServerRequestHandler | None = None
        self._tg: TaskGroup | None = None

    async def run(self, tg: TaskGroup) -> None:
        self._tg = tg
        tg.start_soon(self._read_loop)

    def _wake(self) -> None:
        """Wake every waiter and arm a fresh event for the next wait."""
        self._changed.set()
        self._changed = anyio.Event()

    async def _read_loop(self) -> None:
        try:
            while True:
                frame = await self.stream.receive()
                self.raw.append(frame)
                message = json.loads(frame)
                self.messages.append(message)
                self._wake()
                if "method" in message and "id" in message and self._tg is not None:
                    self._tg.start_soon(self._answer, message)
        except Exception:
            pass
        finally:
            self.closed = True
            self._wake()

    async def _answer(self, message: dict[str, Any]) -> None:
        handler = self.on_server_request
        if handler is None:
            return
        outcome = handler(message["method"], message.get("params"))
        if hasattr(outcome, "__await__"):
            outcome = await outcome
        if outcome is None:
            return  # the test answers by hand
        await self.send({"jsonrpc": "2.0", "id": message["id"], "result": outcome})

    async def send(self, message: Any) -> None:
        await self.stream.send(json.dumps(message))

    async def send_raw(self, frame: str) -> None:
        await self.stream.send(frame)

    async def wait(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = TIMEOUT, start: int = 0
    ) -> dict[str, Any]:
        """The first message (from index ``start``) matching ``predicate``."""
        index = start
        with anyio.fail_after(timeout):
            while True:
                # Take the event before looking, so a message that lands in
                # between still wakes us; every waiter shares the same event.
                changed = self._changed
                while index < len(self.messages):
                    message = self.messages[index]
                    index += 1
                    if predicate(message):
                        return message
                if self.closed:
                    raise ConnectionError("connection closed while waiting")
                await changed.wait()

    async def response(self, request_id: Any, timeout: float = TIMEOUT) -> dict[str, Any]:
        return await self.wait(
            lambda m: (
                "method" not in m and m.get("id") == request_id and ("result" in m or "error" in m)
            ),
            timeout,
        )

    async def request(self, method: str, params: Any = None, timeout: float = TIMEOUT) -> Any:
        """Send a request and return its result (raises :class:`RpcFailure`)."""
        request_id = next(self._ids)
        self._sent.add(request_id)
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)
        reply = await self.response(request_id, timeout)
        if "error" in reply:
            raise RpcFailure(reply["error"])
        return reply["result"]

    async def notify(self, method: str, params: Any = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)

    async def initialize(self, capabilities: dict[str, Any] | None = None) -> Any:
        result = await self.request(
            "initialize",
            {
                "clientInfo": {"name": self.name, "version": "1.0"},
                "capabilities": capabilities or {},
            },
        )
        await self.notify("initialized")
        return result

    async def notification(
        self,
        method: str,
        timeout: float = TIMEOUT,
        start: int = 0,
        where: Callable[[dict[str, Any]], bool] | None = None,
    ) -> dict[str, Any]:
        """Params of the first ``method`` notification (from message index ``start``)."""
        message = await self.wait(
            lambda m: (
                m.get("method") == method
                and "id" not in m
                and (where is None or where(m["params"]))
            ),
            timeout,
            start,
        )
        return message["params"]

    def notifications(self, method: str | None = None) -> list[dict[str, Any]]:
        return [
            m
            for m in self.messages
            if "method" in m and "id" not in m and (method is None or m["method"] == method)
        ]

    async def settle(self) -> None:
        """Round-trip a cheap request so everything sent before it has been answered."""
        await self.request("thread/unsubscribe", {"threadId": "__settle__"})

    async def close(self) -> None:
        await self.stream.close()

    # --- assertion helpers --------------------------------------------------

    def mark(self) -> int:
        """A position in :attr:`messages`, for :meth:`since`."""
        return len(self.messages)

    def since(self, mark: int, method: str | None = None) -> list[dict[str, Any]]:
        """Messages received from ``mark`` on (only ``method`` notifications if given)."""
        found = self.messages[mark:]
        if method is None:
            return found
        return [m for m in found if m.get("method") == method and "id" not in m]

    async def fail(self, method: str, params: Any = None, timeout: float = TIMEOUT) -> RpcFailure:
        """Send a request that must fail; return the error."""
        try:
            result = await self.request(method, params, timeout)
        except RpcFailure as failure:
            return failure
        raise AssertionError(f"{method} succeeded with {result!r}; expected an error")

    async def exchange(
        self, frame: str, request_id: Any, timeout: float = TIMEOUT
    ) -> dict[str, Any]:
        """Send a raw frame and return the response carrying ``request_id``."""
        start = self.mark()
        await self.send_raw(frame)
        return await self.wait(
            lambda m: (
                "method" not in m
                and m.get("id") == request_id
                and type(m.get("id")) is type(request_id)
            ),
            timeout,
            start,
        )

    async def quiet_after(self, mark: int) -> None:
        """Settle, then assert that since ``mark`` only answers to our own
        :meth:`request` calls arrived: no notification, no other response."""
        await self.settle()
        extra = [
            m
            for m in self.messages[mark:]
            if "method" in m or not (isinstance(m.get("id"), int) and m["id"] in self._sent)
        ]
        assert extra == [], f"unexpected messages: {extra}"
