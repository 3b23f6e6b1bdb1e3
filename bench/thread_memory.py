"""What a long-running server keeps for every thread it ran a turn on. Prints
figures; never asserts.

    .venv/bin/python bench/thread_memory.py                 # 12,000 threads (~1 min)
    .venv/bin/python bench/thread_memory.py --threads 3000  # quicker
    .venv/bin/python bench/thread_memory.py --src DIR       # another tree (DIR/appserver)

One server (``--listen ws://127.0.0.1:0``, offline model) and one WebSocket
client that stays connected, as a desktop app or a channel adapter does: it
starts a thread and a short turn on it, again and again. After a warm-up the
server's resident memory (``VmRSS``) is read every ``--window`` threads; each
row is the growth since the warm-up divided by the threads made since, so a
server that keeps a fixed amount per thread shows a flat row and one whose
per-thread state is bounded shows a falling one (the journal remembers the
broadcasts of the 10,000 most recent threads; runtime/broadcast_records.py).
What the client holds itself (its subscription to each thread it started,
which it never drops) is in the figure too.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import turns as bench_turns  # noqa: E402
from turn_burst import one_client  # noqa: E402
from turns_client import WsPeer  # noqa: E402


def resident_kb(pid: int) -> int:
    """The process's resident memory in kB (Linux ``/proc``)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


async def measure(src: Path, threads: int, warmup: int, window: int) -> None:
    bench_turns.SOURCE = src.resolve()
    workspace = Path(tempfile.mkdtemp(prefix="thread-memory-"))
    command = bench_turns.appserver_command(workspace, "--listen", "ws://127.0.0.1:0")
    started = asyncio.Event()
    started.set()
    try:
        async with bench_turns.ws_server(command) as server:
            peer = await WsPeer.open(server.url)
            await peer.initialize()
            for _ in range(warmup):
                await one_client(peer, started)
            pid = server.process.pid
            base = resident_kb(pid)
            print(f"after {warmup} threads (warm-up): {base / 1024:.1f} MB resident")
            made, last = 0, base
            while made < threads:
                step = min(window, threads - made)
                for _ in range(step):
                    await one_client(peer, started)
                made += step
                now = resident_kb(pid)
                print(
                    f"after {warmup + made:6d} threads: {now / 1024:6.1f} MB resident, "
                    f"{(now - last) * 1024 / step:6.0f} bytes a thread in these {step}, "
                    f"{(now - base) * 1024 / made:6.0f} since the warm-up"
                )
                last = now
            await peer.aclose()
    finally:
        shutil.rmtree(workspace, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=12_000, help="threads after the warm-up")
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--window", type=int, default=2_000, help="threads between readings")
    parser.add_argument("--src", type=Path, default=HERE.parent)
    args = parser.parse_args()
    print(f"# {args.src.resolve()}, one client that stays connected")
    asyncio.run(measure(args.src, args.threads, args.warmup, args.window))


if __name__ == "__main__":
    main()
