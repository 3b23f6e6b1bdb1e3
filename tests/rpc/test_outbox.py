"""Slow consumers: the bounded outbox (coalescing, overflow) and a peer that
never reads, which is closed while the others get the whole turn."""

from __future__ import annotations

import json
import math
from pathlib import Path

import anyio
import pytest

from appserver.rpc import framing
from appserver.rpc.connection import Connection, Limits
from appserver.rpc.outbox import Outbox, OutboxClosed
from appserver.services.peer import merge_delta_frames
from appserver.transport.base import TransportClosed
from tests.support.servers import running_server
from tests.support.turns import new_thread, one_item, start_turn, streamed_text, wait_terminal


def delta(seq: int, text: str, item: str = "item_002") -> str:
    params = {"threadId": "t", "turnId": "turn_001", "itemId": item, "delta": text}
    return framing.notification_frame_json("item/agentMessage/delta", framing.dumps(params), seq)


def lifecycle(seq: int) -> str:
    return framing.notification_frame_json("item/usage/delta", '{"threadId":"t"}', seq)


def key(item: str = "item_002") -> tuple[object, object]:
    return (("t", item, "item/agentMessage/delta"), merge_delta_frames)


def texts(frames: list[str]) -> list[tuple[int, str]]:
    out = []
    for frame in frames:
        params = json.loads(frame)["params"]
        out.append((params["seq"], params.get("delta", "<lifecycle>")))
    return out


# --- the Outbox itself ----------------------------------------------------------------


async def test_below_the_soft_bound_frames_are_queued_as_is() -> None:
    box = Outbox(max_bytes=10_000, soft_bytes=5_000)
    for seq in range(1, 6):
        assert box.put(delta(seq, f"d{seq} "), key())
    assert box.coalesced == 0 and len(box) == 5
    batch = await box.get_batch()
    assert texts(batch) == [(n, f"d{n} ") for n in range(1, 6)]
    assert box.queued_bytes == 0 and len(box) == 0


async def test_above_the_soft_bound_same_key_deltas_merge_in_order() -> None:
    box = Outbox(max_bytes=100_000, soft_bytes=1)
    assert box.put(lifecycle(1))
    assert box.put(delta(2, "a"), key())  # the lifecycle frame before it has no key
    assert box.put(delta(3, "b"), key())
    assert box.put(delta(4, "c"), key())
    assert box.put(delta(5, "x", "item_009"), key("item_009"))  # another item: no merge
    assert box.put(delta(6, "y", "item_009"), key("item_009"))
    assert box.put(lifecycle(7))
    assert box.put(delta(8, "d"), key())  # a lifecycle frame ends the run
    assert box.coalesced == 3
    batch = await box.get_batch()
    assert texts(batch) == [
        (1, "<lifecycle>"),
        (4, "abc"),  # the merged frame carries the newest seq and all the text
        (6, "xy"),
        (7, "<lifecycle>"),
        (8, "d"),
    ]
    assert box.queued_bytes == 0


async def test_frames_being_written_are_never_merged_into() -> None:
    box = Outbox(max_bytes=100_000, soft_bytes=1)
    box.put(delta(1, "a"), key())
    box.put(delta(2, "b"), key())
    assert texts(await box.get_batch()) == [(2, "ab")]
    box.put(delta(3, "c"), key())  # the batch taken above is gone: a new frame
    assert texts(await box.get_batch()) == [(3, "c")]


async def test_past_the_hard_bound_put_refuses() -> None:
    box = Outbox(max_bytes=1_000, soft_bytes=500)
    big = lifecycle(1) + " " * 600
    assert box.put(big)
    assert not box.put(big)  # would exceed max_bytes
    assert len(box) == 1 and box.queued_bytes == len(big)
    # One frame larger than the whole budget is still accepted on an empty queue.
    huge = Outbox(max_bytes=100)
    assert huge.put(lifecycle(1) + " " * 1_000)


async def test_merging_never_takes_the_queue_past_the_hard_bound() -> None:
    box = Outbox(max_bytes=2_000, soft_bytes=100)
    accepted = [box.put(delta(seq, "x" * 50), key()) for seq in range(1, 200)]
    assert not all(accepted)
    assert box.queued_bytes <= box.max_bytes


async def test_close_drains_then_stops() -> None:
    box = Outbox(max_bytes=10_000)
    box.put(lifecycle(1))
    box.close()
    assert not box.put(lifecycle(2))
    assert texts(await box.get_batch()) == [(1, "<lifecycle>")]
    with pytest.raises(OutboxClosed):
        await box.get_batch()


async def test_discard_drops_what_is_queued_and_stops_the_writer() -> None:
    box = Outbox(max_bytes=10_000, soft_bytes=1)
    frames = [lifecycle(1), delta(2, "a"), delta(3, "b")]
    box.put(frames[0])
    box.put(frames[1], key())
    box.put(frames[2], key())
    assert box.discard() == sum(len(frame) for frame in frames)
    assert box.queued_bytes == 0 and len(box) == 0
    assert not box.put(lifecycle(4))
    with pytest.raises(OutboxClosed):
        await box.get_batch()  # nothing is written after an abort


def test_merge_delta_frames_keeps_the_newer_envelope() -> None:
    merged = json.loads(merge_delta_frames([delta(3, "ab"), delta(5, ""), delta(9, "cd")]))
    assert merged["method"] == "item/agentMessage/delta"
    assert merged["params"]["seq"] == 9 and merged["params"]["delta"] == "abcd"
    assert merged["params"]["itemId"] == "item_002"


# --- a peer that never reads ------------------------------------------------------------------


class StuckTransport:
    """Accepts frames from a test and never gets its output written."""

    kind = "memory"

    def __init__(self) -> None:
        self.to_server, self._inbox = anyio.create_memory_object_stream[str](math.inf)
        self.sent = 0
        self.closed = anyio.Event()

    async def receive(self) -> str:
        try:
            return await self._inbox.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError) as exc:
            raise TransportClosed from exc

    def try_send(self, frame: str) -> bool:
        return False  # never keeps up

    async def send_batch(self, frames: list[str]) -> None:
        self.sent += len(frames)
        await anyio.sleep_forever()  # the socket buffer is full: the write never returns

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self._inbox.close()
        self.to_server.close()
        self.closed.set()


async def test_a_peer_that_never_reads_is_closed_others_get_the_turn(workspace: Path) -> None:
    count = 600
    with anyio.fail_after(20):
        async with running_server("memory", workspace) as sut, sut.connect("good") as good:
            assert sut.app is not None
            thread_id = await new_thread(good)

            transport = StuckTransport()
            stuck = Connection(
                transport, sut.app.router, Limits(outbox_bytes=8_192, outbox_soft_bytes=1_024)
            )
            requests = [
                {
                    "id": 1,
                    "method": "initialize",
                    "params": {"clientInfo": {"name": "stuck", "version": "1"}},
                },
                {"method": "initialized"},
                {"id": 2, "method": "thread/subscribe", "params": {"threadId": thread_id}},
            ]
            async with anyio.create_task_group() as tg:
                served = anyio.Event()

                async def serve_stuck() -> None:
                    await stuck.serve()
                    served.set()

                tg.start_soon(serve_stuck)
                for request in requests:
                    await transport.to_server.send(json.dumps({"jsonrpc": "2.0", **request}))
                # Subscribed once a thread event reaches its outbox.
                with anyio.fail_after(5):
                    while not sut.app.bus.is_subscribed(thread_id, stuck.session):
                        await anyio.sleep(0.01)

                mark = good.mark()
                turn_id = await start_turn(good, thread_id, f"?stream {count}")
                terminal = await wait_terminal(good, turn_id, start=mark)
                assert terminal["method"] == "turn/completed"
                with anyio.fail_after(5):
                    await served.wait()
                assert stuck.closed
                assert stuck._close_reason == "outbox overflow"
                assert stuck.outbox.queued_bytes == 0  # dropped at the abort, not held
                assert stuck.outbox.coalesced > 0  # it lagged and got merged deltas first
                tg.cancel_scope.cancel()

            # The good client got every delta, each once, and the full text.
            agent = one_item(good, turn_id, "agentMessage", mark)
            parts = [
                m["params"]
                for m in good.messages[mark:]
                if m.get("method") == "item/agentMessage/delta"
            ]
            assert len(parts) == count
            assert "".join(p["delta"] for p in parts) == agent["payload"]["text"]
            assert agent["payload"]["text"] == streamed_text(count)
            # The server is fine: the next turn runs.
            mark = good.mark()
            turn_id = await start_turn(good, thread_id, "after the stuck peer")
            assert (await wait_terminal(good, turn_id, start=mark))["method"] == "turn/completed"


async def test_a_write_that_never_completes_closes_the_peer(workspace: Path) -> None:
    """Keepalive pings queue behind a full buffer, so only a send timeout catches this."""
    with anyio.fail_after(10):
        async with running_server("memory", workspace) as sut:
            assert sut.app is not None
            transport = StuckTransport()
            stuck = Connection(transport, sut.app.router, Limits(send_timeout=0.2))
            request = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {"clientInfo": {"name": "stuck", "version": "1"}},
            }
            await transport.to_server.send(json.dumps(request))
            await stuck.serve()  # returns once the connection gave up on the peer
            assert transport.sent == 1  # the initialize answer got stuck in the socket
            assert transport.closed.is_set()
            assert stuck.closed
