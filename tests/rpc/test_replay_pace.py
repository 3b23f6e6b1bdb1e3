"""A replay larger than a connection's whole outbox budget streams at the
client's pace (Outbox.put_source) instead of closing the connection."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio

from appserver.rpc.connection import Connection, Limits
from appserver.rpc.outbox import Outbox
from appserver.transport.outbox import SOURCE_BATCH_BYTES
from tests.rpc.test_outbox import StuckTransport
from tests.support.servers import running_server
from tests.support.turns import new_thread, run_turn

# --- the Outbox -----------------------------------------------------------------------


async def test_a_source_is_taken_a_batch_at_a_time_and_what_follows_waits() -> None:
    outbox = Outbox(max_bytes=1024)
    frame = "x" * (SOURCE_BATCH_BYTES // 4)
    made: list[int] = []

    def replay() -> Iterator[str]:
        for number in range(10):
            made.append(number)
            yield f"{number}{frame}"

    assert outbox.put("before")
    assert outbox.put_source(replay())
    assert outbox.put("after")  # the budget counts only what is queued as frames
    assert made == []  # nothing is made before the writer asks
    first = await outbox.get_batch()
    assert first[0] == "before" and [text[0] for text in first[1:]] == ["0", "1", "2", "3"]
    assert made == [0, 1, 2, 3]
    second = await outbox.get_batch()
    assert [text[0] for text in second] == ["4", "5", "6", "7"]
    third = await outbox.get_batch()
    assert [text[0] for text in third[:2]] == ["8", "9"] and third[2:] == ["after"]
    assert outbox.queued_bytes == 0 and len(outbox) == 0


async def test_an_empty_source_is_skipped_and_closing_drains_past_it() -> None:
    outbox = Outbox(max_bytes=1024)
    outbox.put_source(iter(()))
    outbox.put("live")
    outbox.close()
    assert await outbox.get_batch() == ["live"]


# --- a connection ---------------------------------------------------------------------


class ReadingTransport(StuckTransport):
    """A client that reads everything, a batch at a time."""

    def __init__(self) -> None:
        super().__init__()
        self.frames: list[dict[str, Any]] = []
        self.changed = anyio.Event()

    async def send_batch(self, frames: list[str]) -> None:
        await anyio.sleep(0)  # the socket takes it
        self.frames.extend(json.loads(frame) for frame in frames)
        self.changed.set()
        self.changed = anyio.Event()


async def test_a_history_larger_than_the_budget_is_replayed_whole(workspace: Path) -> None:
    budget = 64 * 1024
    pasted = "p" * budget  # one user message: stored in several events, each over the budget
    with anyio.fail_after(30):
        async with running_server("memory", workspace) as sut, sut.connect("writer") as writer:
            assert sut.app is not None
            thread_id = await new_thread(writer)
            for _ in range(2):
                _, terminal = await run_turn(writer, thread_id, pasted)
                assert terminal["method"] == "turn/completed"
            last_seq = terminal["params"]["seq"]

            transport = ReadingTransport()
            reader = Connection(transport, sut.app.router, Limits(outbox_bytes=budget))
            requests: list[dict[str, Any]] = [
                {
                    "id": 1,
                    "method": "initialize",
                    "params": {"clientInfo": {"name": "r", "version": "1"}},
                },
                {"method": "initialized"},
                {
                    "id": 2,
                    "method": "thread/subscribe",
                    "params": {"threadId": thread_id, "afterSeq": 0},
                },
            ]
            async with anyio.create_task_group() as tg:
                tg.start_soon(reader.serve)
                for request in requests:
                    await transport.to_server.send(json.dumps({"jsonrpc": "2.0", **request}))
                while not any(f.get("params", {}).get("seq") == last_seq for f in transport.frames):
                    changed = transport.changed
                    await changed.wait()
                assert not reader.closed
                # Live events follow the replay, in order.
                mark = len(transport.frames)
                await run_turn(writer, thread_id, "after the replay")
                while not any(f.get("method") == "turn/completed" for f in transport.frames[mark:]):
                    changed = transport.changed
                    await changed.wait()
                tg.cancel_scope.cancel()
    answer = next(f for f in transport.frames if f.get("id") == 2)
    notifications = [f for f in transport.frames if "method" in f]
    assert transport.frames.index(answer) < transport.frames.index(notifications[0])
    seqs = [f["params"]["seq"] for f in notifications]
    assert seqs == sorted(seqs) and len(seqs) == len(set(seqs))
    assert seqs[0] == 1 and last_seq in seqs
    replayed = sum(len(json.dumps(f)) for f in notifications)
    assert replayed > 4 * budget  # well past what one burst could have held
