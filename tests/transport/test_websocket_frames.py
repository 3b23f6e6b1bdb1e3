"""Frames written in batches, each serialized once for every connection: what
clients see is whole and in order. The server never negotiates per-message
compression (a client offering it gets plain frames), so the shared bytes are
right for every connection."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import connect

from tests.support.helpers import IDENTITY
from tests.support.servers import running_server

DELTAS = 120


async def rpc(ws: Any, request_id: int, method: str, params: Any) -> dict[str, Any]:
    await ws.send(
        json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
    )
    while True:
        message = json.loads(await ws.recv())
        if message.get("id") == request_id:
            return dict(message["result"])


@pytest.mark.parametrize("compression", [None, "deflate"])
async def test_a_streamed_turn_arrives_whole_and_in_order(
    workspace: Path, compression: str | None
) -> None:
    async with running_server("websocket", workspace) as sut:
        assert sut.url is not None
        async with (
            connect(sut.url, compression=compression, max_size=None) as ws,
            connect(sut.url, compression=compression, max_size=None) as watcher,
        ):
            assert not ws.protocol.extensions and not watcher.protocol.extensions
            for client in (ws, watcher):
                await rpc(client, 1, "initialize", {"clientInfo": {"name": "t", "version": "1"}})
                await client.send(json.dumps({"jsonrpc": "2.0", "method": "initialized"}))
            thread = (await rpc(ws, 2, "thread/start", {"identity": IDENTITY}))["thread"]["id"]
            await rpc(watcher, 2, "thread/subscribe", {"threadId": thread})
            text = f"?stream {DELTAS}"
            input_ = [{"type": "text", "text": text}]
            await rpc(ws, 3, "turn/start", {"threadId": thread, "input": input_})
            for client in (ws, watcher):
                seqs: list[int] = []
                deltas = 0
                with anyio.fail_after(10):
                    while True:
                        message = json.loads(await client.recv())
                        params = message.get("params") or {}
                        if params.get("threadId") == thread and "seq" in params:
                            seqs.append(params["seq"])
                        if message.get("method") == "item/agentMessage/delta":
                            deltas += 1
                        if message.get("method") == "turn/completed":
                            break
                assert deltas == DELTAS
                assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
