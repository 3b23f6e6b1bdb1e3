"""A client that left is not kept alive by what it did: the threads it started
hold it as their bound client only weakly (runtime/turns/client_tools.py), so
its connection, buffers and session go once it closes. A server whose
clients come and go (reconnecting apps, short scripts) used to keep every
one of them that ever started a thread."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import anyio
import pytest

from appserver.services.peer import Peer
from tests.support.turns import new_thread, start_turn


def peer_named(name: str) -> Peer:
    """The server's session of the client called ``name`` (in-process servers)."""
    found = [each for each in gc.get_objects() if type(each) is Peer and each.name == name]
    assert len(found) == 1
    return found[0]


async def freed(ref: weakref.ref[Any]) -> bool:
    """Whether ``ref``'s object goes once the server has let go of it."""
    with anyio.fail_after(10):
        while ref() is not None:
            gc.collect()
            await anyio.lowlevel.checkpoint()  # the server's side of the close runs
    return True


async def test_a_client_that_started_a_thread_is_freed_once_it_left(multi_server: Any) -> None:
    async with multi_server.connect("leaving") as client:
        thread_id = await new_thread(client)
        await start_turn(client, thread_id, "hi")
        await client.notification("turn/completed")
        ref = weakref.ref(peer_named("leaving"))
    assert await freed(ref)
    # The thread goes on without it: another client takes its seat and runs a turn.
    async with multi_server.connect("next") as client:
        await client.request("thread/resume", {"threadId": thread_id})
        await start_turn(client, thread_id, "again")
        await client.notification("turn/completed")


@pytest.mark.parametrize("multi_server", ["memory"], indirect=True)
async def test_a_client_that_declared_tools_is_freed_once_it_left(multi_server: Any) -> None:
    tool = {"name": "lookup", "description": "Look it up.", "inputSchema": {"type": "object"}}
    async with multi_server.connect("declaring") as client:
        started = await client.request(
            "thread/start",
            {"identity": {"channelName": "cli", "userId": "local"}, "dynamicTools": [tool]},
        )
        assert started["thread"]["id"]
        ref = weakref.ref(peer_named("declaring"))
    assert await freed(ref)
