"""What the shared log keeps per thread on this node (:mod:`appserver.runtime.shared_log`):
the events waiting for their seq, and the delivery cursor."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from appserver.runtime.events import Event, Participant


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
