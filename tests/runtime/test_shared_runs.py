"""SharedRuns: callers asking together share one run on a worker thread, and
every caller gets a run begun after it asked."""

from __future__ import annotations

import threading

import anyio
import pytest

from appserver.runtime.shared_runs import SharedRuns

pytestmark = pytest.mark.anyio


class Gate:
    """Work that counts its runs and blocks until released (thread-safe)."""

    def __init__(self) -> None:
        self.runs = 0
        self.started = threading.Event()
        self.release = threading.Event()
        self.lock = threading.Lock()

    def __call__(self) -> int:
        with self.lock:
            self.runs += 1
            number = self.runs
        self.started.set()
        self.release.wait(10)
        return number


async def test_callers_asking_together_share_one_run() -> None:
    runs: SharedRuns[int] = SharedRuns()
    gate = Gate()
    gate.release.set()
    results: list[int] = []

    async def ask() -> None:
        results.append(await runs.run("k", gate))

    async with anyio.create_task_group() as group:
        for _ in range(20):
            group.start_soon(ask)
    assert gate.runs <= 2
    assert len(results) == 20


async def test_a_caller_arriving_during_a_run_gets_a_later_run() -> None:
    runs: SharedRuns[int] = SharedRuns()
    gate = Gate()
    first: list[int] = []
    late: list[int] = []

    async with anyio.create_task_group() as group:

        async def leader() -> None:
            first.append(await runs.run("k", gate))

        group.start_soon(leader)
        await anyio.to_thread.run_sync(gate.started.wait, 10)

        async def latecomer() -> None:
            late.append(await runs.run("k", gate))

        group.start_soon(latecomer)
        group.start_soon(latecomer)
        await anyio.wait_all_tasks_blocked()
        gate.release.set()
    assert first == [1]
    assert late == [2, 2]  # one run begun after both asked, shared by them
    assert gate.runs == 2


async def test_different_keys_do_not_share() -> None:
    runs: SharedRuns[str] = SharedRuns()
    seen: list[str] = []

    async def ask(key: str) -> None:
        seen.append(await runs.run(key, lambda: key))

    async with anyio.create_task_group() as group:
        group.start_soon(ask, "a")
        group.start_soon(ask, "b")
    assert sorted(seen) == ["a", "b"]


async def test_an_error_reaches_every_sharer_and_the_next_run_starts_afresh() -> None:
    runs: SharedRuns[int] = SharedRuns()
    started = threading.Event()
    release = threading.Event()
    calls = 0

    def failing() -> int:
        nonlocal calls
        calls += 1
        started.set()
        release.wait(10)
        raise OSError("disk gone")

    errors: list[BaseException] = []

    async def ask() -> None:
        try:
            await runs.run("k", failing)
        except OSError as exc:
            errors.append(exc)

    async with anyio.create_task_group() as group:
        group.start_soon(ask)
        await anyio.to_thread.run_sync(started.wait, 10)
        group.start_soon(ask)
        group.start_soon(ask)
        await anyio.wait_all_tasks_blocked()
        release.set()
    assert len(errors) == 3
    assert calls == 2
    assert await runs.run("k", lambda: 7) == 7


async def test_a_cancelled_caller_still_sees_its_run_through_for_the_others() -> None:
    runs: SharedRuns[int] = SharedRuns()
    started = [threading.Event(), threading.Event()]
    release = [threading.Event(), threading.Event()]
    count = 0

    def work() -> int:
        nonlocal count
        count += 1
        number = count
        started[number - 1].set()
        release[number - 1].wait(10)
        return number

    answers: list[int] = []
    scopes: list[anyio.CancelScope] = []

    async def ask() -> None:
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            answers.append(await runs.run("k", work))

    async with anyio.create_task_group() as group:
        group.start_soon(ask)  # begins run 1
        await anyio.to_thread.run_sync(started[0].wait, 10)
        group.start_soon(ask)  # these two wait for run 1 to end; one begins run 2
        group.start_soon(ask)
        await anyio.wait_all_tasks_blocked()
        release[0].set()
        await anyio.to_thread.run_sync(started[1].wait, 10)
        # The first to wait woke first and began run 2; the other shares it.
        scopes[1].cancel()
        await anyio.wait_all_tasks_blocked()
        release[1].set()
    # Cancelled while its run was under way, it still saw the run through (its
    # cancellation comes at its next wait, as for any call to a thread); the
    # other got the same run.
    assert answers == [1, 2, 2]
    assert count == 2
