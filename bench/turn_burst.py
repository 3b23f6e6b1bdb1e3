"""The fixed cost of a turn: N WebSocket clients each start a short offline
turn at once. Prints figures; never asserts.

    .venv/bin/python bench/turn_burst.py               # 200 clients, 3 bursts
    .venv/bin/python bench/turn_burst.py --clients 50 --bursts 5
    .venv/bin/python bench/turn_burst.py --src DIR     # bench another tree (DIR/appserver)
    .venv/bin/python bench/turn_burst.py --against DIR --pairs 5   # this tree A/B another

One server (``--listen ws://127.0.0.1:0``, offline model) and one light
client process: N raw WebSocket connections (bench/turns_client.py's
``WsPeer``), each initialized. A burst: every client sends ``thread/start``
at once and, when answered, ``turn/start`` with a short message (``hello``:
the offline model streams a three-delta reply), then waits for its
``turn/completed``. Figures: the time from the first ``thread/start`` sent to
the last ``turn/completed`` received, turns per second, each client's turn
latency (``turn/start`` sent -> ``turn/completed``) and ``thread/start``
latency, p50 and p95, the server's CPU per turn, and the client process's (so
that a bench whose client saturates its core is seen for what it is). Target
(issue 33): 500 turns/s.

``--py-spy PATH`` (a py-spy binary: ``pip install --target DIR py-spy`` gives
``DIR/bin/py-spy``; not a project dependency) samples the server through the
measured bursts and prints where the samples went, by thread, package and
function (bench/spy_summary.py); the raw file is kept for a closer look.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import shutil
import signal
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


def own_cpu() -> float:
    """This (client) process's CPU seconds so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def measure(
    src: Path, clients: int, bursts: int, py_spy: Path | None = None
) -> dict[str, float]:
    """One server of tree ``src`` and its clients: the medians of ``bursts`` bursts."""
    bench_turns.SOURCE = src.resolve()
    workspace = Path(tempfile.mkdtemp(prefix="turn-burst-"))
    command = bench_turns.appserver_command(workspace, "--listen", "ws://127.0.0.1:0")
    command += ["--max-in-flight", "64"]
    try:
        async with bench_turns.ws_server(command) as server:
            peers = list(await asyncio.gather(*(WsPeer.open(server.url) for _ in range(clients))))
            await asyncio.gather(*(peer.initialize() for peer in peers))
            await burst(peers[: max(1, clients // 10)])  # warm-up
            spy = None if py_spy is None else await start_py_spy(py_spy, server.process.pid)
            runs = []
            for _ in range(bursts):
                cpu, client_cpu = bench_turns.cpu_seconds(server.process.pid), own_cpu()
                figures = await burst(peers)
                figures["cpu_ms_per_turn"] = (
                    (bench_turns.cpu_seconds(server.process.pid) - cpu) / clients * 1000
                )
                figures["client_cpu_ms_per_turn"] = (own_cpu() - client_cpu) / clients * 1000
                runs.append(figures)
            if spy is not None:
                await stop_py_spy(*spy)
            await asyncio.gather(*(peer.aclose() for peer in peers))
    finally:
        shutil.rmtree(workspace, ignore_errors=True)  # a run's database is ~10-15 MB
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


async def start_py_spy(binary: Path, pid: int) -> tuple[asyncio.subprocess.Process, Path]:
    """py-spy recording ``pid`` (raw collapsed stacks, 1 kHz, every thread)."""
    out = Path(tempfile.mkdtemp(prefix="turn-burst-spy-")) / "server.txt"
    process = await asyncio.create_subprocess_exec(
        str(binary), "record", "-p", str(pid), "-r", "1000", "-f", "raw", "-o", str(out),
        "--nonblocking", stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    await asyncio.sleep(1.0)  # it attaches before the measured bursts
    return process, out


async def stop_py_spy(process: asyncio.subprocess.Process, out: Path) -> None:
    """Stop recording; print the summary."""
    import spy_summary

    process.send_signal(signal.SIGINT)
    await asyncio.wait_for(process.wait(), TIMEOUT)
    print("\n".join(spy_summary.summarize(out)))


def report(figures: dict[str, float]) -> None:
    print(f"first request -> last turn/completed  {figures['span'] * 1000:7.0f} ms")
    print(f"turns per second                      {figures['turns_per_s']:7.0f}")
    print(
        f"turn latency p50 / p95                {figures['turn_p50'] * 1000:7.0f} / "
        f"{figures['turn_p95'] * 1000:.0f} ms"
    )
    print(
        f"thread/start p50 / p95                {figures['thread_start_p50'] * 1000:7.1f} / "
        f"{figures['thread_start_p95'] * 1000:.1f} ms"
    )
    print(f"server CPU per turn                   {figures['cpu_ms_per_turn']:7.2f} ms")
    print(f"client CPU per turn (all its clients)  {figures['client_cpu_ms_per_turn']:6.2f} ms")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--bursts", type=int, default=3)
    parser.add_argument("--src", type=Path, default=HERE.parent)
    parser.add_argument(
        "--against", type=Path, help="alternate with another tree (DIR/appserver): an A/B"
    )
    parser.add_argument("--pairs", type=int, default=5, help="with --against: runs of each")
    parser.add_argument(
        "--py-spy", type=Path, metavar="PATH", help="a py-spy binary: profile the server"
    )
    args = parser.parse_args()
    day = time.strftime("%Y-%m-%d")
    if args.against is None:
        figures = await measure(args.src, args.clients, args.bursts, args.py_spy)
        print(f"# {day} {args.clients} clients, {args.bursts} bursts, medians")
        report(figures)
        return
    # This machine's speed drifts by 10-20 % within minutes: the trees take turns
    # (A B A B ...), and each pair's ratio is taken before the median.
    print(f"# {day} {args.clients} clients, {args.bursts} bursts a run, A = {args.src}")
    print(f"# B = {args.against}; A/B of each pair's medians")
    print("pair  turns/s A    B   A/B   CPU a turn A     B   A/B")
    speed, cpu = [], []
    for pair in range(1, args.pairs + 1):
        first = await measure(args.src, args.clients, args.bursts)
        second = await measure(args.against, args.clients, args.bursts)
        speed.append(first["turns_per_s"] / second["turns_per_s"])
        cpu.append(first["cpu_ms_per_turn"] / second["cpu_ms_per_turn"])
        print(
            f"{pair:4d}  {first['turns_per_s']:9.0f} {second['turns_per_s']:4.0f} "
            f"{speed[-1]:5.2f}  {first['cpu_ms_per_turn']:10.2f} "
            f"{second['cpu_ms_per_turn']:5.2f} {cpu[-1]:5.2f}"
        )
    print(
        f"median of the pairs' ratios: turns/s {statistics.median(speed):.2f}, "
        f"CPU a turn {statistics.median(cpu):.2f}"
    )


if __name__ == "__main__":
    asyncio.run(main())
