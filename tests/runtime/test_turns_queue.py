"""The input queue: turn/enqueue, turn/queue/remove and turn/steer (reference §3.3)."""

from __future__ import annotations

import re

import anyio

from tests.support.servers import ServerUnderTest
from tests.support.turns import (
    Approver,
    enqueue,
    interrupt_with_queue,
    items_completed,
    new_thread,
    one_item,
    start_turn,
    terminals,
    text_input,
    turn_events,
    wait_terminal,
)

SLOW = "?stream 40\n?delay 20"


async def test_enqueue_while_running_starts_after_completion(server: ServerUnderTest) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            await client.request("thread/subscribe", {"threadId": thread_id})
            mark = client.mark()
            first = await start_turn(client, thread_id, SLOW)
            result = await enqueue(client, thread_id, "queued question")
            queued = result["queuedInput"]
            assert re.fullmatch(r"queued_\d+_[0-9a-f]+", queued["id"])
            assert queued["threadId"] == thread_id
            assert queued["status"] == "queued"
            assert queued["displayText"] == "queued question"
            assert queued["readyAfterTurnId"] == first
            assert queued["nativeInputParts"] == text_input("queued question")
            assert [q["id"] for q in result["queuedInputs"]] == [queued["id"]]
            update = await client.notification("thread/queue/updated", start=mark)
            assert update["threadId"] == thread_id
            assert [q["id"] for q in update["queuedInputs"]] == [queued["id"]]

            terminal = await wait_terminal(client, first, start=mark)
            assert terminal["method"] == "turn/completed"
            started = await client.notification(
                "turn/started", start=mark, where=lambda p: p["turn"]["id"] != first
            )
            second = started["turn"]["id"]
            assert second == "turn_002"
            terminal = await wait_terminal(client, second, start=mark)
            assert terminal["method"] == "turn/completed"
            user = one_item(client, second, "userMessage", mark)
            assert user["payload"]["deliveryMode"] == "queued"
            assert user["payload"]["text"] == "queued question"
            agent = one_item(client, second, "agentMessage", mark)
            assert agent["payload"]["text"] == "You said: queued question"
            # The queue is empty again, and says so.
            updates = client.since(mark, "thread/queue/updated")
            assert updates[-1]["params"]["queuedInputs"] == []


async def test_queue_updates_reach_the_enqueuing_client(server: ServerUnderTest) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            thread_id = await new_thread(client)  # not subscribed: the inline path only
            mark = client.mark()
            first = await start_turn(client, thread_id, SLOW)
            await enqueue(client, thread_id, "queued question")
            await wait_terminal(client, first, start=mark)
            await wait_terminal(client, "turn_002", start=mark)
            await client.settle()
            updates = client.since(mark, "thread/queue/updated")
            assert updates[-1]["params"]["queuedInputs"] == []


async def test_thread_read_shows_the_queue(server: ServerUnderTest) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            mark = client.mark()
            turn_id = await start_turn(client, thread_id, SLOW)
            queued = (await enqueue(client, thread_id, "wait for me"))["queuedInput"]
            read = await client.request("thread/read", {"threadId": thread_id})
            assert [q["id"] for q in read["thread"]["queuedInputs"]] == [queued["id"]]
            await client.request("turn/interrupt", {"threadId": thread_id, "turnId": turn_id})
            await wait_terminal(client, turn_id, start=mark)


async def test_queue_is_fifo_one_turn_at_a_time(server: ServerUnderTest) -> None:
    with anyio.fail_after(20):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            mark = client.mark()
            await start_turn(client, thread_id, SLOW)
            for text in ("first", "second", "third"):
                await enqueue(client, thread_id, text)
            await wait_terminal(client, "turn_004", start=mark)
            await client.settle()
            started = [m["params"]["turn"]["id"] for m in client.since(mark, "turn/started")]
            assert started == ["turn_001", "turn_002", "turn_003", "turn_004"]
            texts = [one_item(client, t, "userMessage", mark)["payload"]["text"] for t in started]
            assert texts[1:] == ["first", "second", "third"]
            # Turns never overlap: each starts after the previous one's terminal.
            order = [
                (m["method"], m["params"]["turn"]["id"])
                for m in client.messages[mark:]
                if m.get("method") in ("turn/started", "turn/completed")
            ]
            assert order == [
                (method, turn) for turn in started for method in ("turn/started", "turn/completed")
            ]


async def test_enqueue_on_idle_thread_starts_at_once(server: ServerUnderTest) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            mark = client.mark()
            result = await enqueue(client, thread_id, "right away")
            assert result["queuedInput"]["displayText"] == "right away"
            started = await client.notification("turn/started", start=mark)
            turn_id = started["turn"]["id"]
            terminal = await wait_terminal(client, turn_id, start=mark)
            assert terminal["method"] == "turn/completed"
            user = one_item(client, turn_id, "userMessage", mark)
            assert user["payload"]["deliveryMode"] == "queued"
            assert one_item(client, turn_id, "agentMessage", mark)["payload"]["text"] == (
                "You said: right away"
            )


async def test_queue_remove(server: ServerUnderTest) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            mark = client.mark()
            first = await start_turn(client, thread_id, SLOW)
            drop = (await enqueue(client, thread_id, "drop me"))["queuedInput"]
            keep = (await enqueue(client, thread_id, "keep me"))["queuedInput"]
            removed_at = client.mark()
            result = await client.request(
                "turn/queue/remove", {"threadId": thread_id, "queuedInputId": drop["id"]}
            )
            assert [q["id"] for q in result["queuedInputs"]] == [keep["id"]]
            update = await client.notification("thread/queue/updated", start=removed_at)
            assert [q["id"] for q in update["queuedInputs"]] == [keep["id"]]
            failure = await client.fail(
                "turn/queue/remove", {"threadId": thread_id, "queuedInputId": drop["id"]}
            )
            assert failure.code == -32602

            await wait_terminal(client, first, start=mark)
            terminal = await wait_terminal(client, "turn_002", start=mark)
            assert terminal["method"] == "turn/completed"
            assert one_item(client, "turn_002", "userMessage", mark)["payload"]["text"] == (
                "keep me"
            )
            await client.settle()
            assert [m["params"]["turn"]["id"] for m in client.since(mark, "turn/started")] == [
                "turn_001",
                "turn_002",
            ]


async def test_queue_errors(server: ServerUnderTest) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            failure = await client.fail(
                "turn/enqueue", {"threadId": "thread_20200101_zzzzzz", "input": text_input("x")}
            )
            assert failure.code == -32010
            failure = await client.fail("turn/enqueue", {"threadId": thread_id, "input": []})
            assert failure.code == -32602
            failure = await client.fail(
                "turn/enqueue",
                {"threadId": thread_id, "input": [{"type": "skillRef", "name": "no-such-skill"}]},
            )
            assert failure.code == -32040
            await client.request("thread/pause", {"threadId": thread_id})
            failure = await client.fail(
                "turn/enqueue", {"threadId": thread_id, "input": text_input("x")}
            )
            assert failure.code == -32011


async def test_steer_needs_the_running_turn(server: ServerUnderTest) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            mark = client.mark()
            turn_id = await start_turn(client, thread_id, SLOW)
            queued = (await enqueue(client, thread_id, "later"))["queuedInput"]
            failure = await client.fail(
                "turn/steer",
                {
                    "threadId": thread_id,
                    "expectedTurnId": "turn_999",
                    "queuedInputId": queued["id"],
                },
            )
            assert failure.code == -32014
            failure = await client.fail(
                "turn/steer",
                {"threadId": thread_id, "expectedTurnId": turn_id, "queuedInputId": "queued_0_x"},
            )
            assert failure.code == -32602
            await wait_terminal(client, turn_id, start=mark)
            # Once the turn is over, steering into it is refused.
            await wait_terminal(client, "turn_002", start=mark)
            failure = await client.fail(
                "turn/steer",
                {"threadId": thread_id, "expectedTurnId": turn_id, "queuedInputId": queued["id"]},
            )
            assert failure.code == -32014


async def test_steer_injects_guidance_at_the_next_boundary(server: ServerUnderTest) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            approver = Approver(client, None)
            thread_id = await new_thread(client)
            await client.request("thread/subscribe", {"threadId": thread_id})
            mark = client.mark()
            turn_id = await start_turn(client, thread_id, "!echo steered")
            request = await approver.wait_request()  # the turn is parked at a boundary

            queued = (await enqueue(client, thread_id, "also be brief"))["queuedInput"]
            steer_at = client.mark()
            result = await client.request(
                "turn/steer",
                {"threadId": thread_id, "expectedTurnId": turn_id, "queuedInputId": queued["id"]},
            )
            assert result["turnId"] == turn_id
            assert [(q["id"], q["status"]) for q in result["queuedInputs"]] == [
                (queued["id"], "guidancePending")
            ]
            update = await client.notification("thread/queue/updated", start=steer_at)
            assert update["queuedInputs"][0]["status"] == "guidancePending"
            # Steering twice is harmless.
            await client.request(
                "turn/steer",
                {"threadId": thread_id, "expectedTurnId": turn_id, "queuedInputId": queued["id"]},
            )

            await approver.answer(request, "accept")
            terminal = await wait_terminal(client, turn_id, start=mark)
            assert terminal["method"] == "turn/completed"
            users = items_completed(client, turn_id, "userMessage", mark)
            assert [(u["payload"]["text"], u["payload"]["deliveryMode"]) for u in users] == [
                ("!echo steered", "normal"),
                ("also be brief", "guidance"),
            ]
            # The guidance joins after the tool result, before the next model call.
            order = [
                m["params"]["item"]["type"]
                for m in turn_events(client, turn_id, mark)
                if m["method"] == "item/completed"
            ]
            assert order.index("toolResult") < len(order) - 1 - order[::-1].index("userMessage")
            guidance_at = len(order) - 1 - order[::-1].index("userMessage")
            assert order[guidance_at + 1 :].count("agentMessage") == 1
            agent = items_completed(client, turn_id, "agentMessage", mark)
            assert agent[-1]["payload"]["text"] == "You said: also be brief"
            # Consumed: the queue is empty and no extra turn starts.
            await client.settle()
            assert client.since(mark, "thread/queue/updated")[-1]["params"]["queuedInputs"] == []
            assert len(client.since(mark, "turn/started")) == 1
            assert len(terminals(client, turn_id, mark)) == 1


async def test_steer_reverts_to_queued_when_the_turn_ends_first(server: ServerUnderTest) -> None:
    """A text-only turn has no boundary left: the steered input runs as the next turn."""
    with anyio.fail_after(15):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            mark = client.mark()
            turn_id = await start_turn(client, thread_id, SLOW)
            # Past the turn's only boundary (before its first model call).
            await client.wait(lambda m: m.get("method") == "item/agentMessage/delta", start=mark)
            queued = (await enqueue(client, thread_id, "too late"))["queuedInput"]
            await client.request(
                "turn/steer",
                {"threadId": thread_id, "expectedTurnId": turn_id, "queuedInputId": queued["id"]},
            )
            terminal = await wait_terminal(client, turn_id, start=mark)
            assert terminal["method"] == "turn/completed"
            assert [
                u["payload"]["deliveryMode"]
                for u in items_completed(client, turn_id, "userMessage", mark)
            ] == ["normal"]
            terminal = await wait_terminal(client, "turn_002", start=mark)
            assert terminal["method"] == "turn/completed"
            user = one_item(client, "turn_002", "userMessage", mark)
            assert (user["payload"]["text"], user["payload"]["deliveryMode"]) == (
                "too late",
                "queued",
            )


async def test_interrupted_turn_does_not_consume_the_queue(server: ServerUnderTest) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            mark = client.mark()
            _, (queued,), terminal = await interrupt_with_queue(
                client, thread_id, mark, SLOW, "wait for me"
            )
            assert terminal["method"] == "turn/cancelled"
            await client.settle()
            assert len(client.since(mark, "turn/started")) == 1
            # Still queued: it can be removed.
            result = await client.request(
                "turn/queue/remove", {"threadId": thread_id, "queuedInputId": queued["id"]}
            )
            assert result["queuedInputs"] == []


async def test_a_deleted_threads_lock_file_goes_with_it(server: ServerUnderTest) -> None:
    """A thread whose queue was used has a lock file (processes sharing the
    workspace take turns on its queue); deleting the thread removes it, and a
    turn that leaves nothing queued makes none."""
    locks = server.workspace / ".craft" / "locks"

    def lock_files() -> set[str]:
        return {path.name for path in locks.glob("*.lock")} if locks.exists() else set()

    with anyio.fail_after(15):
        async with server.connect() as client:
            quiet = await new_thread(client)
            mark = client.mark()
            await wait_terminal(client, await start_turn(client, quiet, "hello"), start=mark)
            before = lock_files()  # nothing queued: no lock was taken for it

            thread_id = await new_thread(client)
            mark = client.mark()
            first = await start_turn(client, thread_id, SLOW)
            await enqueue(client, thread_id, "next")
            await wait_terminal(client, first, start=mark)
            second = await client.notification(
                "turn/started", start=mark, where=lambda p: p["turn"]["id"] != first
            )
            await wait_terminal(client, second["turn"]["id"], start=mark)
            assert len(lock_files() - before) == 1
            await client.request("thread/delete", {"threadId": thread_id})
            assert lock_files() - before == set()
