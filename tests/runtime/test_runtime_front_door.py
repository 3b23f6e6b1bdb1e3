"""The runtime driven in-process by a front door written here: no JSON-RPC
connection anywhere. A whole turn with a shell call, an approval round trip
and an interrupt, then the stored items read back by a real JSON-RPC client
(an ``appserver`` subprocess over stdio) match what the front door saw."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from appserver.protocol.base import WireModel
from appserver.protocol.threads import Item
from appserver.protocol.turns import ApprovalRequestParams, ItemNotification, TextPart
from appserver.providers.offline import OfflineProvider
from appserver.runtime.events import Event, QuestionUnanswered
from appserver.runtime.fork import ForkSpec, fork_thread
from appserver.runtime.host import Runtime
from appserver.runtime.threads import NewThread
from appserver.storage.db import Database
from tests.support.servers import running_server


class RecordingDoor:
    """A front door's one client: records every event, answers approvals from a script."""

    def __init__(self, name: str, answers: list[str]) -> None:
        self.name = name
        self.closed = False
        self.events: list[Event] = []
        self.asked: list[ApprovalRequestParams] = []
        self.answers = answers
        self._arrived = anyio.Event()

    def wants(self, kind: str, topic: str | None) -> bool:
        return True  # this door wants everything, commandExecution items included

    def deliver(self, event: Event) -> None:
        self.events.append(event)
        self._arrived.set()
        self._arrived = anyio.Event()

    def can_answer_approvals(self) -> bool:
        return True

    async def ask_approval(self, request: WireModel, timeout: float) -> str:
        assert isinstance(request, ApprovalRequestParams)
        self.asked.append(request)
        if not self.answers:
            raise QuestionUnanswered("no scripted answer")
        return self.answers.pop(0)

    async def wait_for(self, kind: str, start: int = 0) -> Event:
        with anyio.fail_after(10):
            while True:
                for event in self.events[start:]:
                    if event.kind == kind:
                        return event
                await self._arrived.wait()

    def kinds(self, thread_id: str) -> list[str]:
        return [e.kind for e in self.events if e.thread_id == thread_id]

    def completed_items(self) -> list[Item]:
        items = []
        for event in self.events:
            if event.kind == "item/completed":
                assert isinstance(event.params, ItemNotification)
                items.append(event.params.item)
        return items


async def test_a_turn_through_the_in_process_api_alone(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / ".craft" / "appserver.db")
    door = RecordingDoor("in-process-door", answers=["accept"])
    try:
        runtime = Runtime(db, tmp_path, OfflineProvider())
        async with anyio.create_task_group() as tg:
            await tg.start(runtime.run)
            runtime.join(door)
            thread = await runtime.threads.create(NewThread(user_id="me", channel_name="test"))
            await runtime.threads.subscribe(thread.id, door)

            # A shell call that needs approval: asked through the door's port.
            first = await runtime.turns.start(
                thread.id, [TextPart(type="text", text="!echo from-the-door")], door
            )
            await first.done.wait()
            assert first.record.status == "completed"
            assert first.record.initiator == {"channelName": "test", "userId": "in-process-door"}
            assert [request.approval_type for request in door.asked] == ["shell"]
            kinds = door.kinds(thread.id)
            assert kinds[0] == "thread/started"
            for kind in ("turn/started", "item/approval/resolved", "turn/completed"):
                assert kinds.count(kind) == 1
            assert "item/commandExecution/outputDelta" in kinds
            output = [i for i in door.completed_items() if i.type == "commandExecution"]
            assert "from-the-door" in output[0].payload["aggregatedOutput"]
            assert first.final_text() == "The command exited with code 0."

            # A slow answer, interrupted once it streams.
            mark = len(door.events)
            second = await runtime.turns.start(
                thread.id, [TextPart(type="text", text="?stream 100\n?delay 50")], door
            )
            await door.wait_for("item/agentMessage/delta", mark)
            await runtime.turns.interrupt(thread.id, second.record.id)
            terminal = await door.wait_for("turn/cancelled", mark)
            assert terminal.seq is not None and terminal.seq > mark
            assert second.record.status == "cancelled"
            tg.cancel_scope.cancel()
        seen_items = door.completed_items()
        seen_turns = [
            event.params.model_dump(by_alias=True)["turn"]["id"]
            for event in door.events
            if event.kind in ("turn/completed", "turn/cancelled")
        ]
    finally:
        await db.close()

    # A JSON-RPC client reads back exactly the items the door saw complete.
    async with (
        running_server("stdio", tmp_path) as sut,
        sut.connect(capabilities={"commandExecutionStreaming": True}) as client,
    ):
        read: dict[str, Any] = await client.request(
            "thread/read", {"threadId": thread.id, "includeTurns": True}
        )
    turns = read["thread"]["turns"]
    assert [turn["id"] for turn in turns] == seen_turns
    assert [turn["status"] for turn in turns] == ["completed", "cancelled"]
    stored = [item for turn in turns for item in turn["items"]]
    assert stored == [item.to_wire() for item in seen_items]


class OutOfBandDoor(RecordingDoor):
    """A front door whose protocol answers approvals in frames of its own: it
    never answers through the port, but calls ``answer_approval``."""

    def __init__(self, name: str) -> None:
        super().__init__(name, answers=[])
        self.was_asked = anyio.Event()

    async def ask_approval(self, request: WireModel, timeout: float) -> str:
        assert isinstance(request, ApprovalRequestParams)
        self.asked.append(request)
        self.was_asked.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


async def test_an_approval_answered_out_of_band(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / ".craft" / "appserver.db")
    door = OutOfBandDoor("acp-like")
    try:
        runtime = Runtime(db, tmp_path, OfflineProvider())
        async with anyio.create_task_group() as tg:
            await tg.start(runtime.run)
            thread = await runtime.threads.create(NewThread(user_id="me", channel_name="test"))
            active = await runtime.turns.start(
                thread.id, [TextPart(type="text", text="!echo out-of-band")], door
            )
            with anyio.fail_after(10):
                await door.was_asked.wait()
            request = door.asked[0]
            assert not runtime.turns.answer_approval(thread.id, "not-the-request", "accept")
            assert runtime.turns.answer_approval(thread.id, request.request_id, "decline", door)
            await active.done.wait()
            assert active.record.status == "completed"
            assert active.final_text() == "The shell call was declined."
            tg.cancel_scope.cancel()
    finally:
        await db.close()


@asynccontextmanager
async def watched_runtime(
    tmp_path: Path, shared: bool = False
) -> AsyncIterator[tuple[Runtime, RecordingDoor]]:
    """A running runtime and a door that receives its broadcasts (``shared``: as
    a server runs, a node of the workspace's shared event log)."""
    db = await Database.open(tmp_path / ".craft" / "appserver.db")
    db.cluster = shared
    door = RecordingDoor("watching-door", answers=[])
    try:
        runtime = Runtime(db, tmp_path, OfflineProvider())
        async with anyio.create_task_group() as tg:
            await tg.start(runtime.run)
            runtime.join(door)
            yield runtime, door
            tg.cancel_scope.cancel()
    finally:
        await db.close()


def leave_after(
    monkeypatch: Any, target: object, method: str, caller: anyio.CancelScope
) -> list[Any]:
    """Make ``target.method`` cancel ``caller`` once it has done its work (a
    client that left just then); returns the arguments it was called with."""
    calls: list[Any] = []
    real = getattr(target, method)

    async def then_leave(argument: Any) -> None:
        await real(argument)
        calls.append(argument)
        caller.cancel()

    monkeypatch.setattr(target, method, then_leave)
    return calls


async def finished_turn(runtime: Runtime, door: RecordingDoor) -> tuple[str, str]:
    """A new thread with one finished turn: ``(thread id, turn id)``."""
    thread = await runtime.threads.create(NewThread(user_id="me", channel_name="test"))
    turn = await runtime.turns.start(thread.id, [TextPart(type="text", text="hi")], door)
    await turn.done.wait()
    return thread.id, turn.record.id


async def test_a_thread_stored_for_a_start_cancelled_meanwhile_is_announced(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A caller cancelled while its thread was being stored (a client that left
    during ``thread/start``): the stored thread is still announced to everyone,
    so no client lists a thread it never heard of."""
    async with watched_runtime(tmp_path) as (runtime, door):
        caller = anyio.CancelScope()
        stored = leave_after(monkeypatch, runtime.threads.repo, "create", caller)
        with caller:
            await runtime.threads.create(NewThread(user_id="me", channel_name="test"))
        assert caller.cancel_called
        started = await door.wait_for("thread/started")
    assert [started.thread_id] == [thread.id for thread in stored]


async def test_a_fork_stored_for_a_caller_cancelled_meanwhile_is_finished_and_announced(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Cancelled right after the fork's row is stored, the fork still gets the
    source's history and its metadata, and is announced."""
    async with watched_runtime(tmp_path) as (runtime, door):
        source_id, turn_id = await finished_turn(runtime, door)
        caller = anyio.CancelScope()
        stored = leave_after(monkeypatch, runtime.threads.repo, "create", caller)
        mark = len(door.events)
        with caller:
            await fork_thread(runtime.threads, ForkSpec(thread_id=source_id))
        assert caller.cancel_called
        started = await door.wait_for("thread/started", mark)
        fork = await runtime.threads.get(stored[0].id)
        copied, _cursor = await runtime.threads.repo.turns(fork.id, None, None)
    assert started.thread_id == fork.id
    assert fork.metadata["forkedFromId"] == source_id
    assert [record.id for record in copied] == [turn_id]


async def test_a_subagent_child_stored_for_a_cancelled_spawn_is_placed_and_announced(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """The parent's turn cancelled right after the child's spawn edge is stored:
    the child is still announced."""
    async with watched_runtime(tmp_path) as (runtime, door):
        parent_id, turn_id = await finished_turn(runtime, door)
        caller = anyio.CancelScope()
        edges = leave_after(monkeypatch, runtime.subagents.edges, "upsert", caller)
        mark = len(door.events)
        with caller:
            await runtime.subagents.spawn(parent_id, turn_id, {"agentPrompt": "go"})
        assert caller.cancel_called
        started = await door.wait_for("thread/started", mark)
    assert [started.thread_id] == [edge.child_thread_id for edge in edges]


async def test_an_idle_thread_keeps_no_runtime_flags(tmp_path: Path) -> None:
    """Idle is every thread's default: once its turn ends a thread keeps no
    flags here (a server that ran turns on a million threads keeps nothing
    for them), and still reads as idle."""
    async with watched_runtime(tmp_path, shared=True) as (runtime, door):
        runtimes = runtime.threads.runtimes
        thread_id, _turn_id = await finished_turn(runtime, door)
        view = await runtime.threads.view(await runtime.threads.get(thread_id))
    assert runtimes.key(thread_id) is None
    assert runtimes._flags == {}
    assert view.thread.runtime.running is False
