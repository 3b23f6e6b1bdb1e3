"""The fixed cost of a turn: N WebSocket clients each start a short offline
turn at once. Prints figures; never asserts.

    .venv/bin/python bench/turn_burst.py               # 200 clients, 3 bursts
    .venv/bin/python bench/turn_burst.py --clients 50 --bursts 5
    .venv/bin/python bench/turn_burst.py --src DIR     # bench another tree (DIR/appserver)

One server (``--listen ws://127.0.0.1:0``, offline model) and one light
client process: N raw WebSocket connections (bench/turns_client.py's
``WsPeer``), each initialized. A burst: every client sends ``thread/start``
at once and, when answered, ``turn/start`` with a short message (``hello``:
the offline model streams a three-delta reply), then waits for its
``turn/completed``. Figures: the time from the first ``thread/start`` sent to
the last ``turn/completed`` received, turns per second, each client's turn
latency (``turn/start`` sent -> ``turn/completed``) and ``thread/start``
latency, p50 and p95, and the server's CPU per turn. Target (issue 13): 200
turns within 1 s of the first request.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import turns as bench_turns  # noqa: E402
from turns_client import WsPeer  # noqa: E402

IDENTITY = {"channelName": "bench", "userId": "u"}
TIMEOUT = 60.0


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def one_client(peer: WsPeer, start: asyncio.Event) -> tuple[float, float, float]:
    """``(thread/start latency, turn latency, completion time)``."""
    await start.wait()
    t0 = time.monotonic()
    thread = (await peer.call("thread/start", {"identity": IDENTITY}, TIMEOUT))["thread"]["id"]
    t1 = time.monotonic()
    watch = peer.arm()
    await peer.call(
        "turn/start", {"threadId": thread, "input": [{"type": "text", "text": "hello"}]}, TIMEOUT
    )
    await asyncio.wait_for(asyncio.shield(watch.done), TIMEOUT)
    if watch.end_method != "turn/completed":
        raise RuntimeError(f"turn ended with {watch.end_method}")
    return t1 - t0, watch.t_done - t1, watch.t_done


async def burst(peers: list[WsPeer]) -> dict[str, float]:
    start = asyncio.Event()
    tasks = [asyncio.ensure_future(one_client(peer, start)) for peer in peers]
    await asyncio.sleep(0.05)  # every client waits on the event before it fires
    t0 = time.monotonic()
    start.set()
    results = await asyncio.gather(*tasks)
    thread_starts = [r[0] for r in results]
    turn_times = [r[1] for r in results]
    span = max(r[2] for r in results) - t0
    return {
        "span": span,
        "turns_per_s": len(peers) / span,
        "turn_p50": pct(turn_times, 0.5),
        "turn_p95": pct(turn_times, 0.95),
        "thread_start_p50": pct(thread_starts, 0.5),
        "thread_start_p95": pct(thread_starts, 0.95),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--bursts", type=int, default=3)
    parser.add_argument("--src", type=Path, default=HERE.parent)
    args = parser.parse_args()
    bench_turns.SOURCE = args.src.resolve()
    workspace = Path(tempfile.mkdtemp(prefix="turn-burst-"))
    command = bench_turns.appserver_command(workspace, "--listen", "ws://127.0.0.1:0")
    command += ["--max-in-flight", "64"]
    async with bench_turns.ws_server(command) as server:
        peers = list(await asyncio.gather(*(WsPeer.open(server.url) for _ in range(args.clients))))
        await asyncio.gather(*(peer.initialize() for peer in peers))
        await burst(peers[: max(1, args.clients // 10)])  # warm-up
        runs = []
        for _ in range(args.bursts):
            cpu = bench_turns.cpu_seconds(server.process.pid)
            figures = await burst(peers)
            figures["cpu_ms_per_turn"] = (
                (bench_turns.cpu_seconds(server.process.pid) - cpu) / args.clients * 1000
            )
            runs.append(figures)
        await asyncio.gather(*(peer.aclose() for peer in peers))

    def median(key: str) -> float:
        return statistics.median(run[key] for run in runs)

    print(f"# {time.strftime('%Y-%m-%d')} {args.clients} clients, {args.bursts} bursts, medians")
    print(f"first request -> last turn/completed  {median('span') * 1000:7.0f} ms")
    print(f"turns per second                      {median('turns_per_s'):7.0f}")
    print(
        f"turn latency p50 / p95                {median('turn_p50') * 1000:7.0f} / "
        f"{median('turn_p95') * 1000:.0f} ms"
    )
    print(
        f"thread/start p50 / p95                {median('thread_start_p50') * 1000:7.1f} / "
        f"{median('thread_start_p95') * 1000:.1f} ms"
    )
    print(f"server CPU per turn                   {median('cpu_ms_per_turn'):7.2f} ms")


if __name__ == "__main__":
    asyncio.run(main())
