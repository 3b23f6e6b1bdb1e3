"""Other nodes' broadcasts this node delivered lately, so that reading back
what a ``LISTEN`` outage may have hidden delivers none of them twice
(runtime/cluster.py's catch-up after the feed reconnects)."""

from __future__ import annotations

import time


class RecentBroadcasts:
    """``(thread, seq)`` of other nodes' broadcasts delivered here, with when."""

    def __init__(self) -> None:
        self._delivered: dict[tuple[str, int], float] = {}
        self._latest: dict[str, int] = {}  # thread -> highest seq noted

    def note(self, thread_id: str, seq: int) -> None:
        """``seq`` of ``thread_id`` was delivered here just now."""
        self._delivered[(thread_id, seq)] = time.time()
        self._latest[thread_id] = max(self._latest.get(thread_id, 0), seq)

    def seen(self, thread_id: str, seq: int) -> bool:
        return (thread_id, seq) in self._delivered

    def latest(self, thread_id: str) -> int:
        """The highest seq of the thread noted (0: none)."""
        return self._latest.get(thread_id, 0)

    def prune(self, older_than: float) -> None:
        """Forget what was delivered more than ``older_than`` seconds ago."""
        horizon = time.time() - older_than
        self._delivered = {key: at for key, at in self._delivered.items() if at >= horizon}
        kept = {thread_id for thread_id, _seq in self._delivered}
        self._latest = {thread: seq for thread, seq in self._latest.items() if thread in kept}

    def __len__(self) -> int:
        return len(self._delivered)
