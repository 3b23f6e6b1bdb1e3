"""Which thread runs a turn, and the numbers its turns and items get.

One running turn per thread: reserving a thread for a turn is synchronous,
so no request can slip in between a caller's "the thread is idle" check and
the reservation. Turn and item numbers are handed out here and never twice
in one process, even when a caller's thread record is stale.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from appserver.protocol.ids import now_iso
from appserver.runtime.bounded import make_room
from appserver.runtime.events import Participant
from appserver.runtime.turns.model import ActiveTurn, initiator
from appserver.storage.records import ThreadRecord, TurnRecord

if TYPE_CHECKING:
    from appserver.protocol import turns as turn_wire

#: Threads whose numbers are kept; past it, the tenth least recently used goes
#: (never a busy one). The guard is against a thread record read moments before
#: another turn on it started and ended: a thread dropped had ~9,000 other
#: threads' turns start or end since its own last one did.
REMEMBERED_THREADS = 10_000


class TurnReservations:
    """The running turn of each thread and the numbers handed out so far."""

    def __init__(self) -> None:
        #: The running turn of each busy thread.
        self.active: dict[str, ActiveTurn] = {}
        # The highest turn and item numbers handed out per thread in this
        # process. A caller's thread record may be stale (read before another
        # turn started and ended), so numbering never trusts it alone.
        self._numbers: dict[str, tuple[int, int]] = {}

    def reserve(
        self,
        thread: ThreadRecord,
        origin: Participant | None,
        sender: turn_wire.SenderContext | None,
    ) -> ActiveTurn:
        """Number a new turn on the idle ``thread`` and mark the thread busy with it."""
        assert thread.id not in self.active
        last_turn, last_item = self._numbers.get(thread.id, (0, 0))
        seq = max(thread.turn_serial, last_turn) + 1
        thread.turn_serial = seq
        thread.item_serial = max(thread.item_serial, last_item)
        self._keep(thread.id, seq, thread.item_serial)
        record = TurnRecord(
            thread_id=thread.id,
            id=f"turn_{seq:03d}",
            seq=seq,
            status="running",
            started_at=now_iso(),
            origin_channel=thread.origin_channel,
            initiator=initiator(thread, sender, origin),
        )
        active = ActiveTurn(thread=thread, record=record, origin=origin)
        active.next_item_seq = thread.item_serial
        self.active[thread.id] = active
        return active

    def withdraw(self, thread_id: str) -> None:
        """Free a thread whose turn never started (its numbers stay used)."""
        self.active.pop(thread_id, None)

    def release(self, active: ActiveTurn) -> None:
        """Free the thread of a finished turn; the next turn numbers its items
        on from the ones this turn numbered."""
        self.active.pop(active.thread_id, None)
        last_turn, last_item = self._numbers.get(active.thread_id, (0, 0))
        self._keep(active.thread_id, last_turn, max(last_item, active.next_item_seq))

    def forget(self, thread_id: str) -> None:
        """Drop a deleted thread's numbers."""
        self._numbers.pop(thread_id, None)

    def _keep(self, thread_id: str, last_turn: int, last_item: int) -> None:
        """Store the thread's numbers as its most recently used (the dict's last)."""
        if self._numbers.pop(thread_id, None) is None:
            make_room(self._numbers, REMEMBERED_THREADS, keep=self.active)  # busy ones stay
        self._numbers[thread_id] = (last_turn, last_item)
