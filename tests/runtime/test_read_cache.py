"""thread/read answers from a cache; every kind of change must show at once."""

from __future__ import annotations

from typing import Any

import anyio

from tests.conftest import IDENTITY
from tests.support.client import RpcClient
from tests.support.servers import ServerUnderTest


async def read(client: RpcClient, thread_id: str) -> dict[str, Any]:
    thread: dict[str, Any] = (await client.request("thread/read", {"threadId": thread_id}))[
        "thread"
    ]
    return thread


async def test_reads_see_every_change(server: ServerUnderTest) -> None:
    with anyio.fail_after(20):
        async with server.connect() as client:
            thread_id = (await client.request("thread/start", {"identity": IDENTITY}))["thread"][
                "id"
            ]
            first = await read(client, thread_id)
            assert await read(client, thread_id) == first  # a hit answers the same bytes
            # The stored record.
            await client.request("thread/rename", {"threadId": thread_id, "displayName": "New"})
            assert (await read(client, thread_id))["displayName"] == "New"
            # Runtime flags and the queue, while a slow turn runs.
            start = await client.request(
                "turn/start",
                {
                    "threadId": thread_id,
                    "input": [{"type": "text", "text": "?stream 200\n?delay 20"}],
                },
            )
            await client.notification("turn/started")
            assert (await read(client, thread_id))["runtime"]["running"] is True
            queued = await client.request(
                "turn/enqueue",
                {"threadId": thread_id, "input": [{"type": "text", "text": "next"}]},
            )
            ids = [q["id"] for q in (await read(client, thread_id))["queuedInputs"]]
            assert ids == [queued["queuedInput"]["id"]]
            await client.request(
                "turn/queue/remove",
                {"threadId": thread_id, "queuedInputId": queued["queuedInput"]["id"]},
            )
            assert (await read(client, thread_id))["queuedInputs"] == []
            await client.request(
                "turn/interrupt", {"threadId": thread_id, "turnId": start["turn"]["id"]}
            )
            await client.notification("turn/cancelled")
            # runtimeChanged follows the terminal notification.
            await client.notification(
                "thread/runtimeChanged", where=lambda p: p["runtime"]["running"] is False
            )
            assert (await read(client, thread_id))["runtime"]["running"] is False
            # Deletion.
            await client.request("thread/delete", {"threadId": thread_id})
            failure = await client.fail("thread/read", {"threadId": thread_id})
            assert failure.code == -32010
