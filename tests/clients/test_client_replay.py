"""A caller's ``thread/subscribe {afterSeq}``: the replay reaches the handlers
even when the connection already saw later broadcasts of that thread.

A page or chat connected before it opens a thread gets the thread's broadcasts
(``thread/runtimeChanged``, ``thread/started``) with their seqs. The server's
replay then leaves those out, so the client must not take the replayed, lower
seqs for duplicates (the web page once showed an empty thread this way).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from appserver_client import AppServerClient

from tests.support.servers import running_server

IDENTITY: Any = {"channelName": "cli", "userId": "local"}


async def test_a_replay_asked_after_broadcasts_is_delivered_whole(workspace: Path) -> None:
    async with running_server("websocket", workspace) as sut:
        assert sut.url is not None
        async with (
            AppServerClient.connect(sut.url) as watcher,
            AppServerClient.connect(sut.url) as worker,
        ):
            everything = watcher.notifications()
            thread_id = (await worker.thread_start(identity=IDENTITY))["thread"]["id"]
            done = await worker.run_turn(thread_id, "before anyone looked")
            broadcasts: list[int] = []
            async with asyncio.timeout(10):
                async for seen in everything:  # the watcher saw the thread go idle
                    if seen.thread_id == thread_id and seen.seq is not None:
                        broadcasts.append(seen.seq)
                    if (
                        seen.method == "thread/runtimeChanged"
                        and not seen.params["runtime"]["running"]
                    ):
                        break
            assert watcher.last_seq(thread_id) == max(broadcasts)
            stream = watcher.notifications(thread_id=thread_id)
            await watcher.thread_subscribe(thread_id=thread_id, after_seq=0)
            replayed = []
            async with asyncio.timeout(10):
                while not replayed or not replayed[-1].is_terminal:
                    replayed.append(await stream.next())
            methods = [n.method for n in replayed if n.turn_id == done.turn["id"]]
            assert methods[0] == "turn/started" and methods[-1] == "turn/completed"
            assert not set(broadcasts) & {n.seq for n in replayed}  # none twice
            assert watcher.duplicates_dropped == 0
            # From now on the live stream is checked again: the next turn comes once.
            await worker.run_turn(thread_id, "now it is watched")
            async with asyncio.timeout(10):
                while not (await stream.next()).is_terminal:
                    pass
            assert watcher.last_seq(thread_id) == worker.last_seq(thread_id)
