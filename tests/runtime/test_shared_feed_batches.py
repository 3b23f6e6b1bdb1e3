"""What one commit of the shared log holds (runtime/shared_feed.next_batch): the
deltas queued and the first lifecycle event after them, with the events emitted
together with it, all of one turn."""

from __future__ import annotations

import asyncio

from appserver.runtime.events import Event
from appserver.runtime.shared_feed import Pending, next_batch


def delta(turn: str) -> Pending:
    event = Event("item/agentMessage/delta", None, thread_id="t", params_json="{}")
    return Pending(event, False, (), (), turn_id=turn)


def lifecycle(kind: str, turn: str | None, *, last: bool = True, together: bool = False) -> Pending:
    event = Event(kind, None, thread_id="t", params_json="{}")
    pending = Pending(event, False, (), (), turn_id=turn, together=together)
    pending.done = asyncio.Event() if last else None
    return pending


def kinds(batch: list[Pending]) -> list[str]:
    return [pending.event.kind.split("/")[-1] for pending in batch]


def test_the_deltas_and_the_first_lifecycle_event_after_them() -> None:
    queue = [delta("a"), delta("a"), lifecycle("item/completed", "a"), delta("a")]
    assert kinds(next_batch(queue)) == ["delta", "delta", "completed"]
    assert kinds(queue) == ["delta"]


def test_lifecycle_events_emitted_apart_are_two_commits() -> None:
    queue = [lifecycle("item/started", "a"), lifecycle("item/completed", "a")]
    assert kinds(next_batch(queue)) == ["started"]
    assert kinds(next_batch(queue)) == ["completed"]


def test_events_emitted_together_are_one_commit_with_the_deltas_before_them() -> None:
    queue = [
        delta("a"),
        lifecycle("item/started", "a", last=False, together=True),
        lifecycle("item/completed", "a", together=True),
    ]
    assert kinds(next_batch(queue)) == ["delta", "started", "completed"]
    assert queue == []


def test_a_commit_holds_one_turn() -> None:
    """Deltas of a turn that ended, then another turn's: each its own commit,
    each under its own turn's owner check."""
    queue = [delta("a"), delta("b"), lifecycle("item/completed", "b")]
    assert [p.turn_id for p in next_batch(queue)] == ["a"]
    assert [p.turn_id for p in next_batch(queue)] == ["b", "b"]
    assert queue == []


def test_events_of_no_turn_ride_with_any() -> None:
    queue = [delta("a"), lifecycle("thread/runtimeChanged", None, last=False, together=True)]
    queue.append(lifecycle("turn/started", None, together=True))
    assert kinds(next_batch(queue)) == ["delta", "runtimeChanged", "started"]
