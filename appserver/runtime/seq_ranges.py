"""The seqs of a thread that one participant received: sorted, merged runs."""

from __future__ import annotations

import bisect

SEEN_RANGES = 256  # separate runs of seqs remembered per (connection, thread)


class SeqRanges:
    """A set of seqs stored as sorted, merged ``[first, last]`` runs.

    A connection that watches a turn receives long unbroken runs of seqs, so
    this stays tiny however long the turn; only the oldest runs are dropped
    past :data:`SEEN_RANGES`.
    """

    __slots__ = ("_firsts", "_lasts")

    def __init__(self) -> None:
        self._firsts: list[int] = []
        self._lasts: list[int] = []

    def add(self, seq: int) -> None:
        if self._lasts and seq == self._lasts[-1] + 1:
            self._lasts[-1] = seq  # the common case: the next seq of a run
            return
        if self._lasts and seq > self._lasts[-1]:
            self._firsts.append(seq)
            self._lasts.append(seq)
        elif seq not in self:
            index = bisect.bisect_left(self._firsts, seq)
            self._firsts.insert(index, seq)
            self._lasts.insert(index, seq)
        else:
            return
        if len(self._firsts) > SEEN_RANGES:
            del self._firsts[0], self._lasts[0]

    def __contains__(self, seq: object) -> bool:
        if not isinstance(seq, int):
            return False
        index = bisect.bisect_right(self._firsts, seq) - 1
        return index >= 0 and seq <= self._lasts[index]
