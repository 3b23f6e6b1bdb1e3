"""What the runtime keeps per thread in memory is bounded: a server that ran
turns on a million threads does not keep a million entries of each (turn and
item numbering; which threads' stored client tools were read). A thread whose
entry went reads it again from its stored record."""

from __future__ import annotations

from typing import Any

from appserver.runtime.turns import client_tools as client_tools_module
from appserver.runtime.turns import reservations as reservations_module
from appserver.runtime.turns.client_tools import ClientToolCalls
from appserver.runtime.turns.reservations import TurnReservations
from appserver.storage.records import ThreadRecord
from tests.support.records import thread_record


def thread(thread_id: str, turn_serial: int = 0, item_serial: int = 0) -> ThreadRecord:
    return thread_record(thread_id, turn_serial=turn_serial, item_serial=item_serial)


async def test_turn_numbers_are_kept_for_the_threads_used_last_and_busy_ones(
    monkeypatch: Any,
) -> None:
    monkeypatch.setattr(reservations_module, "REMEMBERED_THREADS", 3)
    numbers = TurnReservations()
    busy = numbers.reserve(thread("busy"), None, None)  # numbered first, still running
    for name in ("a", "b"):
        numbers.release(numbers.reserve(thread(name), None, None))
    # "a" runs again: used last now, so "b" (idle, least recently used) goes first.
    again = numbers.reserve(thread("a"), None, None)
    again.next_item_seq = 7  # the turn numbered items up to 7
    numbers.release(again)
    numbers.release(numbers.reserve(thread("c"), None, None))  # past the bound
    assert set(numbers._numbers) == {"busy", "a", "c"}
    # A stale record of "a" (read before its second turn) still numbers on.
    stale = numbers.reserve(thread("a", turn_serial=1, item_serial=2), None, None)
    assert (stale.record.id, stale.next_item_seq) == ("turn_003", 7)
    # A forgotten thread numbers on from its stored record.
    forgotten = numbers.reserve(thread("b", turn_serial=1, item_serial=4), None, None)
    assert (forgotten.record.id, forgotten.next_item_seq) == ("turn_002", 4)
    numbers.release(busy)


class StoredTools:
    """The repository's stored tools, counting reads."""

    def __init__(self, stored: dict[str, list[dict[str, Any]]]) -> None:
        self.stored = stored
        self.reads: list[str] = []

    async def dynamic_tools(self, thread_id: str) -> list[dict[str, Any]]:
        self.reads.append(thread_id)
        return self.stored.get(thread_id, [])


class Items:
    def __init__(self, repo: StoredTools) -> None:
        self.repo = repo


async def test_threads_read_without_tools_are_remembered_for_the_last_read(
    monkeypatch: Any,
) -> None:
    monkeypatch.setattr(client_tools_module, "LOADED_THREADS", 10)
    tool = {"name": "lookup", "description": "", "inputSchema": {"type": "object"}}
    repo = StoredTools({f"tools{index}": [tool] for index in range(12)})
    calls: Any = object.__new__(ClientToolCalls)  # its memory and reads only
    calls.items, calls.tools, calls._loaded = Items(repo), {}, {}
    for index in range(12):  # more threads with tools than the bound: all kept
        await calls.load(f"tools{index}")
        await calls.load(f"plain{index}")
    assert len(calls.tools) == 12 and len(calls._loaded) <= 10
    assert "plain0" not in calls._loaded and "plain11" in calls._loaded
    repo.reads.clear()
    for index in range(12):
        await calls.load(f"tools{index}")  # never read twice
    await calls.load("plain11")  # remembered
    await calls.load("plain0")  # forgotten: read again
    assert repo.reads == ["plain0"]
