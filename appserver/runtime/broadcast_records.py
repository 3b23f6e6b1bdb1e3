"""Which joined participants got each broadcast of a thread, so that a later
``thread/subscribe {afterSeq}`` replay leaves those out (runtime/journal.py).

One record per broadcast, not one per connection: ``(seq, a join mark above
everyone joined then, the marks of those joined then that did not get it)``.
A participant joined now got it if its mark is below the second and not in
the third (runtime/bus.py, ``marks``).

Bounded both ways, so that a server whose clients stay connected for days
does not keep a record of every thread it ever broadcast about (~2 KB a
thread, before): the newest :data:`SEEN_BROADCASTS` of a thread, and the
:data:`REMEMBERED_THREADS` most recently broadcast threads. A replay of a
thread whose records were dropped repeats broadcasts the participant may
have got (a duplicate, never a gap).
"""

from __future__ import annotations

from appserver.runtime.bounded import make_room

SEEN_BROADCASTS = 1024  # broadcasts per thread whose recipients are remembered
REMEMBERED_THREADS = 10_000  # threads whose broadcasts are remembered

Record = tuple[int, int, frozenset[int]]
# Most broadcasts reach every joined participant: one shared empty set, not a
# new one (~200 bytes) per record.
_NOBODY: frozenset[int] = frozenset()


class BroadcastRecords:
    """The records of each thread, the most recently broadcast threads last."""

    def __init__(self) -> None:
        self._threads: dict[str, list[Record]] = {}

    def note(self, thread_id: str, seq: int, mark: int, missed: list[int]) -> None:
        """Record broadcast ``seq``: every participant joined below ``mark`` got
        it but those whose marks are in ``missed``."""
        threads = self._threads
        records = threads.pop(thread_id, None)  # put back last: the most recent
        if records is None:
            make_room(threads, REMEMBERED_THREADS)  # the least recently broadcast go
            records = []
        elif len(records) >= SEEN_BROADCASTS:
            del records[0]
        records.append((seq, mark, frozenset(missed) if missed else _NOBODY))
        threads[thread_id] = records

    def got(self, thread_id: str, mark: int) -> set[int]:
        """The seqs of the thread's remembered broadcasts that the participant
        joined at ``mark`` got."""
        return {
            seq
            for seq, later, missed in self._threads.get(thread_id, ())
            if mark < later and mark not in missed
        }

    def records(self, thread_id: str) -> list[Record]:
        """The thread's records, oldest first (empty: none kept)."""
        return list(self._threads.get(thread_id, ()))

    def __contains__(self, thread_id: object) -> bool:
        return thread_id in self._threads

    def __len__(self) -> int:
        return len(self._threads)

    def forget_before(self, oldest: int | None) -> None:
        """Drop the records of broadcasts sent before anyone still joined
        (``oldest``: the oldest join mark still there; ``None``: nobody is)."""
        for thread_id in list(self._threads):
            records = self._threads[thread_id]
            cut = 0
            while cut < len(records) and (oldest is None or records[cut][1] <= oldest):
                cut += 1
            if cut == len(records):
                del self._threads[thread_id]
            elif cut:
                del records[:cut]

    def forget_thread(self, thread_id: str) -> None:
        """Drop a deleted thread's records."""
        self._threads.pop(thread_id, None)
