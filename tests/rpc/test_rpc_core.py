"""The JSON-RPC core with an application of its own (no DotCraft handshake):
what a method causes follows its response only where the application holds
it, the application admits requests and names its overload error, and client
notifications reach it in order."""

from __future__ import annotations

import json
from typing import Any

import anyio

from appserver.protocol.errors import RpcError
from appserver.rpc.connection import Connection, Limits, RequestContext
from appserver.transport.memory import MemoryTransport, memory_pair


class EchoApp:
    """`held` and `loose` notify the caller before answering; `blocked` is refused."""

    def __init__(self) -> None:
        self.notifications: list[tuple[str, Any]] = []
        self.release = anyio.Event()

    def admit(self, connection: Connection, method: str) -> RpcError | None:
        return RpcError(-31000, "blocked") if method == "blocked" else None

    def access(self, method: str) -> str:
        return "detached" if method == "slow" else "write"

    def holds(self, method: str) -> bool:
        return method == "held"

    def overloaded(self) -> RpcError:
        return RpcError(-31001, "busy")

    async def handle_request(self, ctx: RequestContext, params: Any) -> Any:
        if ctx.method == "slow":
            await self.release.wait()
        else:
            ctx.connection.notify("caused", {"by": ctx.method})
            await anyio.sleep(0)  # let the writer run: a held frame must still wait
        return {"method": ctx.method}

    def handle_notification(self, connection: Connection, method: str, params: Any) -> None:
        self.notifications.append((method, params))

    def connection_closed(self, connection: Connection) -> None:
        pass


async def exchange(client: MemoryTransport, frames: list[dict[str, Any]], count: int) -> list[Any]:
    for frame in frames:
        await client.send(json.dumps({"jsonrpc": "2.0", **frame}))
    with anyio.fail_after(5):
        return [json.loads(await client.receive()) for _ in range(count)]


async def test_a_held_method_answers_before_what_it_caused() -> None:
    app = EchoApp()
    client, server_end = memory_pair()
    connection = Connection(server_end, app, Limits(max_in_flight=1))
    async with anyio.create_task_group() as tg:
        tg.start_soon(connection.serve)
        held = await exchange(client, [{"id": 1, "method": "held"}], 2)
        assert [m.get("id") for m in held] == [1, None]
        assert held[1] == {"jsonrpc": "2.0", "method": "caused", "params": {"by": "held"}}

        loose = await exchange(client, [{"id": 2, "method": "loose"}], 2)
        assert [m.get("method") for m in loose] == ["caused", None]
        assert loose[1]["id"] == 2

        refused = await exchange(client, [{"id": 3, "method": "blocked"}], 1)
        assert refused[0]["error"] == {"code": -31000, "message": "blocked"}

        await client.send(json.dumps({"jsonrpc": "2.0", "method": "hello", "params": [1]}))
        busy = await exchange(client, [{"id": 4, "method": "slow"}, {"id": 5, "method": "x"}], 1)
        assert busy[0] == {"jsonrpc": "2.0", "id": 5, "error": {"code": -31001, "message": "busy"}}
        assert app.notifications == [("hello", [1])]
        app.release.set()
        assert (await exchange(client, [], 1))[0]["id"] == 4
        await client.close()


class LeavingApp(EchoApp):
    """Its handler's connection ends (the client left) while it runs: the part it
    shields from cancellation still runs, the rest does not."""

    def __init__(self) -> None:
        super().__init__()
        self.shielded_part_ran = False
        self.unshielded_part_ran = False
        self.ended = anyio.Event()

    async def handle_request(self, ctx: RequestContext, params: Any) -> Any:
        try:
            ctx.connection.close("client gone", code=1001, abort=True)  # cancels this request
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0)  # a checkpoint the cancellation must not reach
                self.shielded_part_ran = True
            await anyio.sleep(0)
            self.unshielded_part_ran = True
        finally:
            self.ended.set()
        return {}


async def test_a_request_cancelled_as_its_connection_ends_keeps_its_shields() -> None:
    app = LeavingApp()
    client, server_end = memory_pair()
    connection = Connection(server_end, app, Limits())
    async with anyio.create_task_group() as tg:
        tg.start_soon(connection.serve)
        await client.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "store"}))
        with anyio.fail_after(5):
            await app.ended.wait()
        await client.close()
    assert app.shielded_part_ran and not app.unshielded_part_ran
