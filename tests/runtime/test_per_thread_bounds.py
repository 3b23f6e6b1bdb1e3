"""What the runtime keeps per thread in memory is bounded: a server that ran
turns on a million threads does not keep a million entries of each (turn
numbering; which threads' stored client tools were read). A thread whose entry
went reads it again from its stored record."""

from __future__ import annotations

from typing import Any

from appserver.runtime.turns import client_tools as client_tools_module
from appserver.runtime.turns import reservations as reservations_module
from appserver.runtime.turns.client_tools import ClientToolCalls
from appserver.runtime.turns.reservations import TurnReservations
from appserver.storage.records import ThreadRecord


def thread(thread_id: str, turn_serial: int = 0) -> ThreadRecord:
    return ThreadRecord(
        id=thread_id,
        workspace_path="/w",
        user_id="u",
        origin_channel="cli",
        status="active",
        created_at="2026-01-01T00:00:00.000Z",
        last_active_at="2026-01-01T00:00:00.000Z",
        turn_serial=turn_serial,
    )


async def test_turn_numbers_are_kept_for_the_newest_threads_and_busy_ones(monkeypatch: Any) -> None:
    monkeypatch.setattr(reservations_module, "REMEMBERED_THREADS", 3)
    numbers = TurnReservations()
    busy = numbers.reserve(thread("busy"), None, None)  # still running
    for name in ("a", "b"):
        numbers.release(numbers.reserve(thread(name), None, None))
    numbers.release(numbers.reserve(thread("c"), None, None))  # past the bound
    assert "busy" in numbers._numbers and "a" not in numbers._numbers
    assert set(numbers._numbers) == {"busy", "b", "c"}
    # A forgotten thread numbers on from its stored record.
    assert numbers.reserve(thread("a", turn_serial=1), None, None).record.id == "turn_002"
    numbers.release(busy)


def test_tools_read_are_remembered_for_the_newest_threads(monkeypatch: Any) -> None:
    monkeypatch.setattr(client_tools_module, "LOADED_THREADS", 10)
    tools: Any = object.__new__(ClientToolCalls)  # only its memory is exercised
    tools.tools, tools._loaded = {}, set()
    tool = {"name": "lookup", "description": "", "inputSchema": {"type": "object"}}
    tools._remember("with-tools", [tool])
    for index in range(12):
        tools._remember(f"t{index}", [])
    assert len(tools._loaded) <= 10
    assert "with-tools" in tools._loaded and "lookup" in tools.tools["with-tools"]
