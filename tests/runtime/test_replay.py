"""Reconnect and catch up: ``thread/subscribe {afterSeq}`` replays what a client
missed, streaming items as one coalesced delta, with no gap and no duplicate."""

from __future__ import annotations

from typing import Any

import anyio

from tests.support.servers import ServerUnderTest
from tests.support.turns import (
    DELTA_METHODS,
    TERMINAL,
    assert_increasing,
    is_notification,
    new_thread,
    one_item,
    run_turn,
    start_turn,
    streamed_text,
    wait_count,
    wait_terminal,
)

STREAM = 300
SCRIPT = f"?stream {STREAM}\n?delay 5"


def _agent_deltas(messages: list[dict[str, Any]], item_id: str) -> list[dict[str, Any]]:
    return [
        m["params"]
        for m in messages
        if is_notification(m)
        and m["method"] == "item/agentMessage/delta"
        and m["params"]["itemId"] == item_id
    ]


def _thread_seqs(messages: list[dict[str, Any]]) -> list[int]:
    return [m["params"]["seq"] for m in messages if is_notification(m) and "seq" in m["params"]]


async def test_reconnect_with_after_seq_reproduces_the_text(
    multi_server: ServerUnderTest,
) -> None:
    """A disconnects mid-stream, comes back as A2 with afterSeq = the last seq it
    saw; an observer O watched everything live and checks A2's catch-up delta."""
    with anyio.fail_after(20):
        async with multi_server.connect("observer") as obs:
            async with multi_server.connect("a") as a:
                thread_id = await new_thread(a)
                await obs.request("thread/subscribe", {"threadId": thread_id})
                turn_id = await start_turn(a, thread_id, SCRIPT)
                seen = await wait_count(
                    a, lambda m: m.get("method") == "item/agentMessage/delta", 10
                )
            # A is gone; the turn goes on without it.
            item_id = seen[0]["params"]["itemId"]
            before = "".join(d["delta"] for d in _agent_deltas(a.messages, item_id))
            last_seq = max(_thread_seqs(a.messages))
            # Let the stream move on well past what A saw.
            await wait_count(
                obs,
                lambda m: (
                    m.get("method") == "item/agentMessage/delta"
                    and m["params"]["seq"] > last_seq + 20
                ),
                1,
            )
            async with multi_server.connect("a2") as a2:
                mark = a2.mark()
                await a2.request("thread/subscribe", {"threadId": thread_id, "afterSeq": last_seq})
                terminal = await wait_terminal(a2, turn_id, start=mark)
                assert terminal["method"] == "turn/completed"
                await wait_terminal(obs, turn_id)
                await a2.settle()
                got = a2.messages[mark:]

                numbers = _thread_seqs(got)  # one thread in play
                assert numbers and min(numbers) > last_seq
                assert_increasing(numbers)  # strictly: no seq twice

                after = _agent_deltas(got, item_id)
                final = one_item(a2, turn_id, "agentMessage", mark)["payload"]["text"]
                assert final == streamed_text(STREAM)
                assert before + "".join(d["delta"] for d in after) == final

                # The first delta A2 got is the coalesced catch-up: exactly the text O
                # saw live between A's last seq and that delta's seq.
                first = after[0]
                missed = [
                    d["delta"]
                    for d in _agent_deltas(obs.messages, item_id)
                    if last_seq < d["seq"] <= first["seq"]
                ]
                assert len(missed) > 1, "expected several missed deltas to coalesce"
                assert first["delta"] == "".join(missed)

                # Lifecycle events after afterSeq arrive exactly once.
                completed = [
                    m
                    for m in got
                    if m.get("method") == "item/completed" and m["params"]["item"]["id"] == item_id
                ]
                assert len(completed) == 1
                assert [m["method"] for m in got if m.get("method") in TERMINAL] == [
                    "turn/completed"
                ]
                # The observer saw every seq once, and the same text.
                obs_numbers = _thread_seqs(obs.messages)
                assert len(obs_numbers) == len(set(obs_numbers))
                assert "".join(d["delta"] for d in _agent_deltas(obs.messages, item_id)) == final


async def test_subscribe_mid_turn_from_zero_replays_everything(
    multi_server: ServerUnderTest,
) -> None:
    with anyio.fail_after(20):
        async with multi_server.connect("a") as a, multi_server.connect("b") as b:
            thread_id = await new_thread(a)
            turn_id = await start_turn(a, thread_id, SCRIPT)
            await wait_count(a, lambda m: m.get("method") == "item/agentMessage/delta", 20)
            mark = b.mark()
            await b.request("thread/subscribe", {"threadId": thread_id, "afterSeq": 0})
            terminal = await wait_terminal(b, turn_id, start=mark)
            assert terminal["method"] == "turn/completed"
            await b.settle()
            got = [m for m in b.messages[mark:] if is_notification(m)]
            # Broadcasts B got before subscribing (thread/started, runtimeChanged) are
            # not replayed again: over the whole connection every seq comes once.
            assert_increasing(_thread_seqs(b.messages))
            methods = [m["method"] for m in b.messages if is_notification(m)]
            assert methods.index("thread/started") < methods.index("turn/started")
            item = one_item(b, turn_id, "agentMessage", mark)
            text = "".join(d["delta"] for d in _agent_deltas(got, item["id"]))
            assert text == item["payload"]["text"] == streamed_text(STREAM)
            # The missed part came as one delta, not hundreds.
            assert len(_agent_deltas(got, item["id"])) < len(_agent_deltas(a.messages, item["id"]))
            # A and B saw the same numbered events for the turn.
            ids_a = {m["params"]["seq"] for m in a.messages if m.get("method") in TERMINAL}
            ids_b = {m["params"]["seq"] for m in got if m["method"] in TERMINAL}
            assert ids_a == ids_b


async def test_replay_after_the_turn_has_only_lifecycle_events(
    multi_server: ServerUnderTest,
) -> None:
    idle = lambda p: not p["runtime"]["running"]  # noqa: E731
    with anyio.fail_after(15):
        async with multi_server.connect("a") as a:
            thread_id = await new_thread(a)
            turn_id, terminal = await run_turn(a, thread_id, "?stream 30\nreplayed")
            await a.notification("thread/runtimeChanged", where=idle)
            live = [m for m in a.messages if is_notification(m) and "seq" in m["params"]]
            async with multi_server.connect("b") as b:
                mark = b.mark()
                await b.request("thread/subscribe", {"threadId": thread_id, "afterSeq": 0})
                await b.settle()
                replay = [m for m in b.messages[mark:] if is_notification(m)]
            assert_increasing([m["params"]["seq"] for m in replay])
            methods = [m["method"] for m in replay]
            # Deltas of completed items are not kept: the item/completed carries the text.
            assert not [m for m in methods if m in DELTA_METHODS]
            assert methods.count("turn/completed") == 1
            assert replay[methods.index("turn/completed")] == terminal
            # Every non-delta event A saw live is replayed, identically and in order.
            assert replay == [m for m in live if m["method"] not in DELTA_METHODS]
            assert turn_id == "turn_001"


async def test_subscribing_later_never_repeats_what_the_connection_saw(
    server: ServerUnderTest,
) -> None:
    """The turn's starter got every event inline; afterSeq 0 adds nothing twice."""
    idle = lambda p: not p["runtime"]["running"]  # noqa: E731
    with anyio.fail_after(15):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            await run_turn(client, thread_id, "?stream 30\nseen")
            await client.notification("thread/runtimeChanged", where=idle)
            mark = client.mark()
            await client.request("thread/subscribe", {"threadId": thread_id, "afterSeq": 0})
            await client.quiet_after(mark)
            mark = client.mark()
            turn_id, _ = await run_turn(client, thread_id, "again")
            await client.notification("thread/runtimeChanged", start=mark, where=idle)
            assert turn_id == "turn_002"
            assert_increasing(_thread_seqs(client.messages))


async def test_long_inline_turn_then_subscribe_repeats_nothing(server: ServerUnderTest) -> None:
    """More deltas than any small per-connection memory of seen seqs."""
    idle = lambda p: not p["runtime"]["running"]  # noqa: E731
    with anyio.fail_after(20):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            await run_turn(client, thread_id, "?stream 1500")
            await client.notification("thread/runtimeChanged", where=idle)
            mark = client.mark()
            await client.request("thread/subscribe", {"threadId": thread_id, "afterSeq": 0})
            await client.quiet_after(mark)
            assert_increasing(_thread_seqs(client.messages))


async def test_subscribe_twice_does_not_replay_twice(multi_server: ServerUnderTest) -> None:
    with anyio.fail_after(15):
        async with multi_server.connect("a") as a:
            thread_id = await new_thread(a)
            turn_id, _ = await run_turn(a, thread_id, "hello")
            assert turn_id == "turn_001"
            idle = lambda p: not p["runtime"]["running"]  # noqa: E731
            await a.notification("thread/runtimeChanged", where=idle)
            async with multi_server.connect("b") as b:
                await b.request("thread/subscribe", {"threadId": thread_id, "afterSeq": 0})
                await b.settle()  # the replay follows the response
                mark = b.mark()
                params = {"threadId": thread_id, "afterSeq": 0}
                assert await b.request("thread/subscribe", params) == {}
                await b.quiet_after(mark)
                await run_turn(a, thread_id, "more")
                await wait_terminal(b, "turn_002")
                await b.notification("thread/runtimeChanged", start=mark, where=idle)
                # Replayed (deltas of completed items are not kept), then live: each once.
                assert_increasing(_thread_seqs(b.messages))


async def test_reconnect_gets_no_seq_twice_when_a_broadcast_came_first(
    multi_server: ServerUnderTest,
) -> None:
    with anyio.fail_after(20):
        async with multi_server.connect("other") as other:
            async with multi_server.connect("a") as a:
                thread_id = await new_thread(a)
                await a.request("thread/subscribe", {"threadId": thread_id})
                turn_id = await start_turn(a, thread_id, SCRIPT)
                await wait_count(a, lambda m: m.get("method") == "item/agentMessage/delta", 5)
            last_seq = max(_thread_seqs(a.messages))
            async with multi_server.connect("a2") as a2:
                # Connected, not yet subscribed: a broadcast about the thread arrives.
                await other.request(
                    "thread/rename", {"threadId": thread_id, "displayName": "renamed"}
                )
                await a2.notification("thread/renamed")
                await a2.request("thread/subscribe", {"threadId": thread_id, "afterSeq": last_seq})
                await wait_terminal(a2, turn_id)
                await a2.settle()
                numbers = _thread_seqs(a2.messages)
                assert len(numbers) == len(set(numbers)), "a seq was delivered twice"


async def test_a_broadcast_before_a_connection_opened_is_replayed_to_it(
    multi_server: ServerUnderTest,
) -> None:
    """Broadcasts are remembered per event (who was connected then), not per
    connection: one that opened later never got it, so its replay has it, once;
    one that was connected and got it is not sent it again."""
    with anyio.fail_after(20):
        async with multi_server.connect("a") as a, multi_server.connect("early") as early:
            thread_id = await new_thread(a)
            await a.request("thread/rename", {"threadId": thread_id, "displayName": "renamed"})
            await early.notification("thread/renamed")
            async with multi_server.connect("late") as late:
                for client in (early, late):
                    params = {"threadId": thread_id, "afterSeq": 0}
                    await client.request("thread/subscribe", params)
                    await client.settle()  # the replay follows the response
                renamed = [m for m in late.messages if m.get("method") == "thread/renamed"]
                assert [m["params"]["displayName"] for m in renamed] == ["renamed"]
                early_renamed = [m for m in early.messages if m.get("method") == "thread/renamed"]
                assert len(early_renamed) == 1
                for client in (early, late):
                    numbers = _thread_seqs(client.messages)
                    assert len(numbers) == len(set(numbers)), "a seq was delivered twice"
