"""End-to-end: thread lifecycle and turns through the project's own Python
client, over a real stdio subprocess and a real WebSocket listener."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from appserver_client import AppServerClient, Notification, RpcError

from tests.clients.test_client_api import IDENTITY, open_client

KINDS = ["stdio", "websocket"]


async def next_method(stream: object, method: str, timeout: float = 5) -> Notification:
    """The next notification named ``method`` from ``stream``."""
    async with asyncio.timeout(timeout):
        async for notification in stream:  # type: ignore[attr-defined]
            if notification.method == method:
                return notification  # type: ignore[no-any-return]
    raise AssertionError(f"stream ended before {method}")


@pytest.mark.parametrize("kind", KINDS)
async def test_thread_lifecycle(kind: str, workspace: Path) -> None:
    async with open_client(kind, workspace) as client:
        events = client.notifications(methods=["thread/*"])
        thread = (await client.thread_start(identity=IDENTITY, display_name="e2e"))["thread"]
        thread_id = thread["id"]
        assert thread["status"] == "active" and thread["displayName"] == "e2e"
        started = await next_method(events, "thread/started")
        assert started.thread_id == thread_id and started.seq is not None

        await client.thread_rename(thread_id=thread_id, display_name="renamed")
        renamed = await next_method(events, "thread/renamed")
        assert renamed.params["displayName"] == "renamed"

        await client.thread_pause(thread_id=thread_id)
        paused = await next_method(events, "thread/statusChanged")
        assert (paused.params["previousStatus"], paused.params["newStatus"]) == (
            "active",
            "paused",
        )
        resumed = (await client.thread_resume(thread_id=thread_id))["thread"]
        assert resumed["status"] == "active"

        await client.thread_archive(thread_id=thread_id)
        listed = await client.thread_list(identity=IDENTITY)
        assert thread_id not in [summary["id"] for summary in listed["data"]]
        archived = await client.thread_list(identity=IDENTITY, include_archived=True)
        assert [summary["status"] for summary in archived["data"]] == ["archived"]
        with pytest.raises(RpcError) as not_active:
            await client.thread_resume(thread_id=thread_id)
        assert not_active.value.code == -32011
        await client.thread_unarchive(thread_id=thread_id)

        await client.thread_delete(thread_id=thread_id)
        with pytest.raises(RpcError) as gone:
            await client.thread_read(thread_id=thread_id)
        assert gone.value.code == -32010
        await events.aclose()


@pytest.mark.parametrize("kind", KINDS)
async def test_turns_history_and_rollback(kind: str, workspace: Path) -> None:
    async with open_client(kind, workspace) as client:
        thread_id = (await client.thread_start(identity=IDENTITY))["thread"]["id"]
        first = await client.run_turn(thread_id, "first message")
        second = await client.run_turn(thread_id, "second message")
        assert (first.text, second.text) == ("You said: first message", "You said: second message")
        usage = second.turn.get("tokenUsage") or {}
        assert usage.get("outputTokens", 0) > 0

        read = await client.thread_read(thread_id=thread_id, include_turns=True)
        turns = read["thread"]["turns"]
        assert [turn["id"] for turn in turns] == [first.turn["id"], second.turn["id"]]
        assert all(turn["status"] == "completed" for turn in turns)

        rolled = await client.thread_rollback(thread_id=thread_id, num_turns=1)
        assert [turn["id"] for turn in rolled["thread"]["turns"]] == [first.turn["id"]]
        # The model's history follows the rollback: the next turn still works.
        third = await client.run_turn(thread_id, "third")
        assert third.ok


@pytest.mark.parametrize("kind", KINDS)
async def test_interrupt_and_queue(kind: str, workspace: Path) -> None:
    async with open_client(kind, workspace) as client:
        thread_id = (await client.thread_start(identity=IDENTITY))["thread"]["id"]
        stream = client.notifications(thread_id=thread_id)
        running = asyncio.create_task(client.run_turn(thread_id, "?stream 50\n?delay 50"))
        delta = await next_method(stream, "item/agentMessage/delta")
        assert delta.turn_id is not None
        # A second turn while one runs is refused; queue it instead.
        with pytest.raises(RpcError) as busy:
            await client.turn_start(thread_id=thread_id, input=[{"type": "text", "text": "x"}])
        assert busy.value.code == -32012
        queued = await client.turn_enqueue(
            thread_id=thread_id, input=[{"type": "text", "text": "queued one"}]
        )
        assert queued["queuedInput"]["displayText"] == "queued one"
        await client.turn_interrupt(thread_id=thread_id, turn_id=delta.turn_id)
        outcome = await asyncio.wait_for(running, 5)
        assert (outcome.status, outcome.reason) == ("cancelled", "interrupted")
        # A cancelled turn does not consume the queue; remove the entry by hand.
        left = await client.turn_queue_remove(
            thread_id=thread_id, queued_input_id=queued["queuedInput"]["id"]
        )
        assert left["queuedInputs"] == []
        await stream.aclose()


async def test_two_clients_see_each_others_turns_through_a_subscription(workspace: Path) -> None:
    async with open_client("websocket", workspace) as first:
        url = first.transport.ws.request.path  # type: ignore[union-attr]
        assert url.startswith("/ws")
        host, port = first.transport.ws.remote_address[:2]  # type: ignore[union-attr]
        async with AppServerClient.connect(f"ws://{host}:{port}/ws") as second:
            thread_id = (await first.thread_start(identity=IDENTITY))["thread"]["id"]
            await second.thread_subscribe(thread_id=thread_id)
            watching = second.notifications(thread_id=thread_id, methods=["turn/*"])
            outcome = await first.run_turn(thread_id, "hi from the first client")
            started = await next_method(watching, "turn/started")
            completed = await next_method(watching, "turn/completed")
            assert started.turn_id == completed.turn_id == outcome.turn["id"]
            assert second.subscribed_threads == {thread_id}
            await second.thread_unsubscribe(thread_id=thread_id)
            assert second.subscribed_threads == frozenset()
