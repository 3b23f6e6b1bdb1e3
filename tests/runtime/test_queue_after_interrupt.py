"""The queue after a turn that did not complete (issue 27): it waits for the
user, says so on the wire (``thread/queue/updated {paused}``), and resumes in
order, the waiting inputs first, when the user sends the next input with
``turn/enqueue``."""

from __future__ import annotations

import anyio

from tests.support.servers import ServerUnderTest
from tests.support.turns import (
    enqueue,
    interrupt_with_queue,
    new_thread,
    one_item,
    start_turn,
    wait_terminal,
)

# Slow enough to interrupt without sleeping: it never ends on its own in a test's time.
ENDLESS = "?stream 1000\n?delay 20"


async def test_an_interrupt_pauses_the_queue_and_says_so(server: ServerUnderTest) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            mark = client.mark()
            first, (queued,), terminal = await interrupt_with_queue(
                client, thread_id, mark, ENDLESS, "wait for me"
            )
            assert terminal["method"] == "turn/cancelled"
            update = await client.notification(
                "thread/queue/updated", start=mark, where=lambda p: "paused" in p
            )
            assert update["threadId"] == thread_id
            assert update["paused"] == {"turnId": first, "reason": "interrupted"}
            assert [q["id"] for q in update["queuedInputs"]] == [queued["id"]]
            assert update["queuedInputs"][0]["status"] == "queued"
            # thread/read agrees: nothing runs, the input waits.
            read = await client.request("thread/read", {"threadId": thread_id})
            assert read["thread"]["runtime"]["running"] is False
            assert [q["id"] for q in read["thread"]["queuedInputs"]] == [queued["id"]]


async def test_the_next_enqueue_resumes_the_queue_in_order(server: ServerUnderTest) -> None:
    with anyio.fail_after(20):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            mark = client.mark()
            await interrupt_with_queue(client, thread_id, mark, ENDLESS, "older one", "older two")
            await client.notification(
                "thread/queue/updated", start=mark, where=lambda p: "paused" in p
            )
            await enqueue(client, thread_id, "newer")
            for turn_id in ("turn_002", "turn_003", "turn_004"):
                terminal = await wait_terminal(client, turn_id, start=mark)
                assert terminal["method"] == "turn/completed"
            texts = [
                one_item(client, turn_id, "userMessage", mark)["payload"]["text"]
                for turn_id in ("turn_002", "turn_003", "turn_004")
            ]
            assert texts == ["older one", "older two", "newer"]
            # Once resumed, no update says paused again.
            updates = client.since(mark, "thread/queue/updated")
            paused = [u for u in updates if "paused" in u["params"]]
            assert len(paused) == 1
            assert updates[-1]["params"]["queuedInputs"] == []


async def test_a_failed_turn_pauses_the_queue_too(server: ServerUnderTest) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            mark = client.mark()
            first = await start_turn(client, thread_id, "?stream 30\n?delay 20\n?fail unavailable")
            await enqueue(client, thread_id, "after the failure")
            terminal = await wait_terminal(client, first, start=mark)
            assert terminal["method"] == "turn/failed"
            update = await client.notification(
                "thread/queue/updated", start=mark, where=lambda p: "paused" in p
            )
            assert update["paused"] == {"turnId": first, "reason": "failed"}


async def test_no_pause_is_announced_for_an_empty_queue(server: ServerUnderTest) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            mark = client.mark()
            await interrupt_with_queue(client, thread_id, mark, ENDLESS)
            await client.settle()
            assert client.since(mark, "thread/queue/updated") == []
