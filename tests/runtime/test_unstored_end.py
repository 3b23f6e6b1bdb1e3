"""A turn whose end could not be stored (a full disk) is failed later by the
node's sweep, and the client that started it is told, subscribed or not."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import anyio

from appserver.runtime.emissions import Emission
from appserver.runtime.turns import EngineConfig
from tests.support.servers import running_server
from tests.support.turns import new_thread, start_turn, wait_terminal

TERMINAL = {"turn/completed", "turn/failed", "turn/cancelled"}


async def test_the_starter_gets_the_failure_of_a_turn_whose_end_was_not_stored(
    workspace: Path,
) -> None:
    engine = EngineConfig(node_lease=0.4)  # sweeps every 50 ms
    async with running_server("memory", workspace, engine=engine) as sut:
        assert sut.app is not None
        journal = sut.app.runtime.journal
        store_group = journal.emit_all
        refused: list[str] = []

        async def disk_full_at_the_end(thread_id: str, group: Sequence[Emission]) -> None:
            if not refused and any(emission.kind in TERMINAL for emission in group):
                refused.append(thread_id)
                raise OSError(28, "No space left on device")
            await store_group(thread_id, group)

        journal.emit_all = disk_full_at_the_end  # type: ignore[method-assign]
        with anyio.fail_after(20):
            async with sut.connect() as starter:
                thread_id = await new_thread(starter)
                mark = starter.mark()
                turn_id = await start_turn(starter, thread_id, "hello")  # not subscribed
                terminal = await wait_terminal(starter, turn_id, start=mark)
        assert refused == [thread_id]
        assert terminal["method"] == "turn/failed"
        assert "lost track" in terminal["params"]["error"]
        assert sut.app.runtime.engine.ending.take_watchers(thread_id, turn_id) == []
