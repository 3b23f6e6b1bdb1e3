"""What the shared log keeps per thread on this node (:mod:`appserver.runtime.shared_log`):
the events waiting for their seq, and the delivery cursor."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from appserver.runtime.events import Event, Participant
from appserver.storage.cluster_common import SharedEvent
from appserver.storage.events import StoredEvent


@dataclass(eq=False)
class Pending:
    """An event waiting for its seq (and, for a lifecycle event, its caller)."""

    event: Event
    broadcast: bool
    include: tuple[Participant, ...]
    exclude: tuple[Participant, ...]
    statements: Sequence[tuple[str, Sequence[Any]]] = ()
    turn_id: str | None = None  # the turn whose rows it writes: this node must run it
    # Set once committed (lifecycle events). asyncio's, not anyio's: a turn
    # makes ~25 of these, and anyio's costs several calls more to make and a
    # turn of the loop to wait on once set (the server runs on asyncio).
    done: asyncio.Event | None = None
    error: BaseException | None = None
    created_at: str = ""  # empty (a delta): the time of the commit that stores it
    together: bool = False  # one of lifecycle events emitted together (one commit)


def next_batch(queue: list[Pending]) -> list[Pending]:
    """Take one commit's worth off the front of ``queue``: the deltas queued and
    the first lifecycle event after them (with the events emitted together with
    it, queued before it without a ``done`` of their own: one group is one
    commit), all of one turn (one owner check a commit). Lifecycle events
    emitted apart never share a commit: each one's rows may be refused."""
    count = next((i + 1 for i, p in enumerate(queue) if p.done is not None), len(queue))
    owner = next((p.turn_id for p in queue[:count] if p.turn_id is not None), None)
    cut = next((i for i, p in enumerate(queue[:count]) if p.turn_id not in (None, owner)), count)
    batch, queue[:cut] = queue[:cut], []
    return batch


@dataclass
class ThreadFeed:
    """One thread's delivery state on this node."""

    queue: list[Pending] = field(default_factory=list)
    flushing: bool = False
    drained: asyncio.Event = field(default_factory=asyncio.Event)
    delivered: int | None = None  # last seq delivered here (None: not following)
    subscribing: int = 0  # subscribe replays under way: announcements count meanwhile
    announced: int = 0  # highest seq other nodes announced
    # The first seq this feed delivers when it began following by this node's
    # own commit or a subscriber's replay: another node's broadcast before it
    # may still be announced (its notification was in flight), and is then
    # delivered late rather than skipped.
    followed_from: int = 0
    remote_seen: int = 0  # highest seq of another node's delivered here
    local: dict[int, Pending] = field(default_factory=dict)  # committed here, not yet delivered


def turn_id_of(params: Any) -> str | None:
    """The turn an event's params are about (``turnId``, or ``turn.id``)."""
    if not isinstance(params, dict):
        return None
    turn = params.get("turn")
    found = params.get("turnId") or (turn.get("id") if isinstance(turn, dict) else None)
    return found if isinstance(found, str) else None


def stored_event(thread_id: str, row: SharedEvent | StoredEvent) -> Event:
    """An event read back from the shared log or one node's event log (its
    params as stored)."""
    return Event(
        row.method,
        None,
        thread_id=thread_id,
        seq=row.seq,
        topic=row.topic,
        stream=getattr(row, "stream", None),
        params_json=row.params_json,
    )
