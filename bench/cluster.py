"""Several nodes on one PostgreSQL database against one node (issue 17).

Prints two tables:

1. Delivery: one turn streams ``--deltas`` deltas to ``--subscribers``
   WebSocket subscribers spread round-robin over the nodes; notifications
   delivered per second (every subscriber's every notification of the thread,
   from ``turn/start`` until the last subscriber saw ``turn/completed``). For
   one node on SQLite (the embedded default), one node on PostgreSQL and three
   nodes on PostgreSQL. Median of ``--runs``.
2. Burst: ``--threads`` clients spread round-robin over the nodes each start
   a thread and run ``--turns`` short offline turns on it one after another,
   all clients at once; turns per second (all turns over the wall time) and
   p95 turn latency (``turn/start`` sent -> its ``turn/completed``), for the
   same three set-ups, all kept up and taking turns burst by burst, and each
   rate as a share of one SQLite node's. Median of ``--runs`` bursts (each
   client on a fresh thread per burst).
3. Cross-node latency: a paced turn (``--pace-ms`` between deltas) watched by
   one subscriber on node A, where the turn runs, and one on node B; for each
   delta, B's arrival minus A's. Median and p95.

A throwaway PostgreSQL is started (tests/support/postgres.py) and stopped.
Run: ``.venv/bin/python bench/cluster.py`` (PYTHONDONTWRITEBYTECODE unset, as users run).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench._common import percentile  # noqa: E402
from tests.support.postgres import PostgresCluster  # noqa: E402


class Sub:
    """A subscriber: counts a thread's notifications and notes when each seq arrived."""

    def __init__(self, ws: ClientConnection, node: int) -> None:
        self.ws = ws
        self.node = node
        self.count = 0
        self.arrivals: dict[int, float] = {}
        self.done = asyncio.Event()
        self._ids = 0
        self._answers: dict[int, asyncio.Future[Any]] = {}
        self.task = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        async for frame in self.ws:
            now = time.perf_counter()
            message = json.loads(frame)
            if "method" in message:
                params = message.get("params") or {}
                seq = params.get("seq")
                if seq is not None:
                    self.count += 1
                    self.arrivals[seq] = now
                if message["method"] == "turn/completed":
                    self.done.set()
            elif message.get("id") in self._answers:
                self._answers.pop(message["id"]).set_result(message)

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        self._ids += 1
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._answers[self._ids] = future
        await self.ws.send(
            json.dumps({"jsonrpc": "2.0", "id": self._ids, "method": method, "params": params})
        )
        reply = await asyncio.wait_for(future, 60)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply["result"]

    async def start(self) -> None:
        await self.call("initialize", {"clientInfo": {"name": "bench", "version": "1"}})
        await self.ws.send(json.dumps({"jsonrpc": "2.0", "method": "initialized"}))

    def reset(self) -> None:
        self.count = 0
        self.arrivals = {}
        self.done = asyncio.Event()


@contextlib.asynccontextmanager
async def nodes(count: int, workspace: Path, store: str | None) -> AsyncIterator[list[str]]:
    """Start ``count`` node processes; yields their WebSocket URLs."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("APPSERVER_TOKEN", None)
    processes = []
    urls = []
    try:
        for _ in range(count):
            command = [
                sys.executable,
                "-m",
                "appserver",
                "app-server",
                "--workspace",
                str(workspace),
                "--listen",
                "ws://127.0.0.1:0",
                "--log-level",
                "warning",
            ]
            if store:
                command += ["--store", store]
            process = await asyncio.create_subprocess_exec(
                *command,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
                cwd=HERE.parent,
            )
            processes.append(process)
            assert process.stderr is not None
            seen = b""
            while (match := re.search(rb"listening on (ws://\S+)", seen)) is None:
                line = await asyncio.wait_for(process.stderr.readline(), 30)
                if not line:
                    raise RuntimeError(f"node exited: {seen.decode(errors='replace')}")
                seen += line
            urls.append(match.group(1).decode())
            asyncio.get_running_loop().create_task(_drain(process))
        yield urls
    finally:
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
        for process in processes:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(process.wait(), 15)


async def _drain(process: asyncio.subprocess.Process) -> None:
    assert process.stderr is not None
    while await process.stderr.readline():
        pass


async def open_subs(urls: list[str], count: int) -> list[Sub]:
    subs = []
    for index in range(count):
        node = index % len(urls)
        ws = await connect(urls[node], max_size=None)
        sub = Sub(ws, node)
        await sub.start()
        subs.append(sub)
    return subs


async def one_turn(driver: Sub, subs: list[Sub], text: str) -> tuple[float, int, str]:
    """Start a turn on the driver's node; (seconds, notifications delivered, thread)."""
    thread = await driver.call(
        "thread/start", {"identity": {"channelName": "bench", "userId": "b"}}
    )
    thread_id = thread["thread"]["id"]
    await asyncio.gather(*(s.call("thread/subscribe", {"threadId": thread_id}) for s in subs))
    for sub in subs:
        sub.reset()
    started = time.perf_counter()
    await driver.call(
        "turn/start", {"threadId": thread_id, "input": [{"type": "text", "text": text}]}
    )
    await asyncio.wait_for(asyncio.gather(*(s.done.wait() for s in subs)), 120)
    elapsed = time.perf_counter() - started
    return elapsed, sum(s.count for s in subs), thread_id


async def delivery(label: str, node_count: int, store: str | None, args: Any) -> dict[str, Any]:
    workspace = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    try:
        async with nodes(node_count, workspace, store) as urls:
            subs = await open_subs(urls, args.subscribers)
            driver = (await open_subs(urls[:1], 1))[0]
            rates, seconds = [], []
            text = f"?stream {args.deltas}\nbench"
            await one_turn(driver, subs, text)  # warm-up
            for _ in range(args.runs):
                elapsed, delivered, _ = await one_turn(driver, subs, text)
                rates.append(delivered / elapsed)
                seconds.append(elapsed)
            for sub in [*subs, driver]:
                await sub.ws.close()
            return {
                "label": label,
                "rate": statistics.median(rates),
                "seconds": statistics.median(seconds),
                "per_turn": delivered,
            }
    finally:
        shutil.rmtree(workspace, ignore_errors=True)


class BurstSetup:
    """One set-up's nodes and clients, kept up while the set-ups take turns."""

    def __init__(self, label: str, clients: list[Sub]) -> None:
        self.label = label
        self.clients = clients
        self.rates: list[float] = []
        self.p95s: list[float] = []

    async def burst(self, turns: int) -> None:
        """Every client runs ``turns`` turns on a fresh thread of its own, all at once."""
        latencies: list[float] = []

        async def run(client: Sub) -> None:
            thread = await client.call(
                "thread/start", {"identity": {"channelName": "bench", "userId": "b"}}
            )
            thread_id = thread["thread"]["id"]
            for _ in range(turns):
                client.reset()
                started = time.perf_counter()
                await client.call(
                    "turn/start",
                    {"threadId": thread_id, "input": [{"type": "text", "text": "hello"}]},
                )
                await asyncio.wait_for(client.done.wait(), 120)
                latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        await asyncio.gather(*(run(client) for client in self.clients))
        self.rates.append(len(latencies) / (time.perf_counter() - started))
        self.p95s.append(percentile(latencies, 95))


async def bursts(setups: list[tuple[str, int, str | None]], args: Any) -> list[dict[str, Any]]:
    """Bring every set-up up, then run their bursts in turn (A B C A B C ...),
    so a machine that slows down mid-run slows each set-up alike."""
    async with contextlib.AsyncExitStack() as stack:
        kept: list[BurstSetup] = []
        for label, node_count, store in setups:
            workspace = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
            stack.callback(shutil.rmtree, workspace, True)
            urls = await stack.enter_async_context(nodes(node_count, workspace, store))
            setup = BurstSetup(label, await open_subs(urls, args.threads))
            await setup.burst(1)  # warm-up
            setup.rates.clear()
            setup.p95s.clear()
            kept.append(setup)
        for _ in range(args.runs):
            for setup in kept:
                await setup.burst(args.turns)
        for setup in kept:
            for client in setup.clients:
                await client.ws.close()
        return [
            {
                "label": setup.label,
                "rate": statistics.median(setup.rates),
                "p95": statistics.median(setup.p95s),
            }
            for setup in kept
        ]


async def latency(store: str, args: Any) -> dict[str, float]:
    workspace = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    try:
        async with nodes(2, workspace, store) as urls:
            on_a, on_b = await open_subs(urls, 2)
            driver = (await open_subs(urls[:1], 1))[0]
            added: list[float] = []
            text = f"?stream {args.paced_deltas}\n?delay {args.pace_ms}\nbench"
            await one_turn(driver, [on_a, on_b], text)  # warm-up
            for _ in range(args.runs):
                await one_turn(driver, [on_a, on_b], text)
                added += [
                    on_b.arrivals[seq] - at
                    for seq, at in on_a.arrivals.items()
                    if seq in on_b.arrivals
                ]
            return {
                "median": statistics.median(added),
                "p95": percentile(added, 95),
                "n": float(len(added)),
            }
    finally:
        shutil.rmtree(workspace, ignore_errors=True)


async def main(args: Any) -> None:
    with PostgresCluster.start_temporary() as cluster:
        single_pg = await cluster.create_database()
        three_pg = await cluster.create_database()
        latency_pg = await cluster.create_database()
        burst_rows = await bursts(
            [
                ("1 node, SQLite", 1, None),
                ("1 node, PostgreSQL", 1, await cluster.create_database()),
                ("3 nodes, PostgreSQL", 3, await cluster.create_database()),
            ],
            args,
        )
        if args.burst_only:
            print_bursts(burst_rows, args)
            return
        results = [
            await delivery("1 node, SQLite", 1, None, args),
            await delivery("1 node, PostgreSQL", 1, single_pg, args),
            await delivery("3 nodes, PostgreSQL", 3, three_pg, args),
        ]
        cross = await latency(latency_pg, args)
    print(
        f"\nDelivery: {args.subscribers} subscribers, {args.deltas} deltas a turn, "
        f"median of {args.runs} turns"
    )
    print(f"{'setup':<22} {'notifications/s':>16} {'turn (s)':>9} {'per turn':>9}")
    for row in results:
        print(
            f"{row['label']:<22} {row['rate']:>16,.0f} {row['seconds']:>9.2f} {row['per_turn']:>9,}"
        )
    print_bursts(burst_rows, args)
    print(
        f"\nCross-node latency (B's arrival minus A's), {int(cross['n'])} deltas "
        f"paced {args.pace_ms} ms apart: median {cross['median'] * 1000:.2f} ms, "
        f"p95 {cross['p95'] * 1000:.2f} ms"
    )


def print_bursts(rows: list[dict[str, Any]], args: Any) -> None:
    print(
        f"\nBurst: {args.threads} threads at once, {args.turns} short offline turns each "
        f"(one after another on its thread), median of {args.runs} bursts, set-ups in turn"
    )
    print(f"{'setup':<22} {'turns/s':>9} {'p95 turn (ms)':>14} {'share of SQLite':>16}")
    floor = rows[0]["rate"]
    for row in rows:
        print(
            f"{row['label']:<22} {row['rate']:>9.1f} {row['p95'] * 1000:>14.1f}"
            f" {row['rate'] / floor:>15.0%}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--subscribers", type=int, default=100)
    parser.add_argument("--deltas", type=int, default=500)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--paced-deltas", type=int, default=200)
    parser.add_argument("--threads", type=int, default=20)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--burst-only", action="store_true", help="only the burst table")
    parser.add_argument("--pace-ms", type=int, default=5)
    asyncio.run(main(parser.parse_args()))
