"""Steered input that belongs to its turn (``keep``: Codex's turn/steer): answered
within the turn when a model call is left, refused once none is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from appserver.runtime.errors import TurnNotRunning
from appserver.runtime.turns import EngineConfig, ending
from tests.support.servers import running_server
from tests.support.turns import enqueue, new_thread, start_turn, wait_terminal

SLOW = "?stream 40\n?delay 20"


async def test_a_kept_steer_on_the_last_allowed_call_does_not_fail_the_turn(
    workspace: Path,
) -> None:
    engine = EngineConfig(max_model_calls=1)
    with anyio.fail_after(20):
        async with (
            running_server("memory", workspace, engine=engine) as sut,
            sut.connect() as client,
        ):
            assert sut.app is not None
            thread_id = await new_thread(client)
            mark = client.mark()
            turn_id = await start_turn(client, thread_id, SLOW)
            await client.wait(lambda m: m.get("method") == "item/agentMessage/delta", start=mark)
            queued = (await enqueue(client, thread_id, "late"))["queuedInput"]
            await sut.app.runtime.turns.steer(thread_id, turn_id, queued["id"], keep=True)
            terminal = await wait_terminal(client, turn_id, start=mark)
    assert terminal["method"] == "turn/completed"


async def test_a_kept_steer_after_the_last_call_is_refused(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    finishing = anyio.Event()
    go_on = anyio.Event()
    finish = ending.TurnEnding.finish

    async def held_finish(self: Any, active: Any) -> None:
        finishing.set()  # the loop has returned; the end is not stored yet
        await go_on.wait()
        await finish(self, active)

    monkeypatch.setattr(ending.TurnEnding, "finish", held_finish)
    with anyio.fail_after(20):
        async with running_server("memory", workspace) as sut, sut.connect() as client:
            assert sut.app is not None
            thread_id = await new_thread(client)
            mark = client.mark()
            turn_id = await start_turn(client, thread_id, "hello")
            await finishing.wait()
            queued = (await enqueue(client, thread_id, "too late"))["queuedInput"]
            with pytest.raises(TurnNotRunning):
                await sut.app.runtime.turns.steer(thread_id, turn_id, queued["id"], keep=True)
            # A DotCraft steer (not kept) is still taken: it goes back to the queue.
            await sut.app.runtime.turns.steer(thread_id, turn_id, queued["id"])
            go_on.set()
            assert (await wait_terminal(client, turn_id, start=mark))["method"] == "turn/completed"
