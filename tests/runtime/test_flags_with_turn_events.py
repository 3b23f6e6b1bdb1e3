"""A thread's running flags are stored with the turn event that changes them
(``turn/started``, the terminal event: one commit, appserver/runtime/emissions.py)
and change here only once that is stored: ``thread/read`` never says idle while
the turn's end is not stored (a ``turn/start`` would still be refused), and a
start that is refused leaves them, and announces nothing."""

from __future__ import annotations

import sqlite3
from typing import Any

import anyio
import pytest

from appserver.runtime.shared_feed import Pending
from appserver.runtime.shared_log import SharedLog
from tests.support.turns import new_thread, start_turn, text_input

TERMINAL = {"turn/completed", "turn/failed", "turn/cancelled"}


async def running(client: Any, thread_id: str) -> bool:
    read = await client.request("thread/read", {"threadId": thread_id})
    return bool(read["thread"]["runtime"]["running"])


@pytest.mark.parametrize("server", ["memory"], indirect=True)
async def test_a_turn_is_running_until_its_end_is_stored(
    server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    commit = SharedLog._commit
    reached, release = anyio.Event(), anyio.Event()

    async def held_end(
        self: SharedLog, thread_id: str, feed: Any, batch: list[Pending], **options: Any
    ) -> bool:
        if any(pending.event.kind in TERMINAL for pending in batch):
            reached.set()
            await release.wait()
        return await commit(self, thread_id, feed, batch, **options)

    monkeypatch.setattr(SharedLog, "_commit", held_end)
    with anyio.fail_after(15):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            await start_turn(client, thread_id, "hi")
            await reached.wait()  # the end is being stored
            assert await running(client, thread_id)
            release.set()
            await client.notification("turn/completed")
            assert not await running(client, thread_id)


@pytest.mark.parametrize("server", ["memory"], indirect=True)
async def test_a_refused_start_changes_and_announces_no_flags(
    server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As when another node started a turn on the thread first."""
    commit = SharedLog._commit

    async def refused(
        self: SharedLog, thread_id: str, feed: Any, batch: list[Pending], **options: Any
    ) -> bool:
        if any(pending.event.kind == "turn/started" for pending in batch):
            self._fail(batch, sqlite3.IntegrityError("another node started a turn"))
            return False
        return await commit(self, thread_id, feed, batch, **options)

    monkeypatch.setattr(SharedLog, "_commit", refused)
    with anyio.fail_after(15):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            mark = client.mark()
            with pytest.raises(Exception, match="in progress"):
                await client.request(
                    "turn/start", {"threadId": thread_id, "input": text_input("x")}
                )
            assert not await running(client, thread_id)
            changed = [m for m in client.since(mark) if m.get("method") == "thread/runtimeChanged"]
            assert changed == []
