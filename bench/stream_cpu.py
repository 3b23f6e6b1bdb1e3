"""Server CPU per streamed delta with a real provider, against a floor client.
Prints figures; never asserts.

    .venv/bin/python bench/stream_cpu.py                # openai, 2,000 deltas, 5 turns
    .venv/bin/python bench/stream_cpu.py --provider anthropic --deltas 2000 --turns 5
    .venv/bin/python bench/stream_cpu.py --src DIR      # bench another tree (DIR/appserver)
    .venv/bin/python bench/stream_cpu.py --profile OUT  # also cProfile one server turn

A local fake model (bench/peer_model.py, the one bench/peer.py uses) streams
``chunk 1 ``, ``chunk 2 ``, ... as Chat Completions chunks (openai) or Messages
events (anthropic), one SSE event per delta. appserver runs as a stdio
subprocess with ``--provider openai|anthropic --base-url`` pointed at it; each
measured turn is one ``turn/start`` whose every delta reaches the client as an
``item/agentMessage/delta`` notification (stored, numbered and replayable as
always). Server CPU is utime + stime of the server process (/proc) across the
turn, divided by the deltas.

The floor client is the least a process can do with the same stream: httpx2
(the HTTP library under both SDKs) ``aiter_lines``, ``json.loads`` of each
data line and one JSON line written out per delta. Its CPU per delta is
measured the same way, in its own process, interleaved with the server's turns.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from peer_model import FakeModel  # noqa: E402
from turns_client import PipePeer  # noqa: E402

IDENTITY = {"channelName": "bench", "userId": "u"}
TURN_TIMEOUT = 120.0

FLOOR = r"""
import asyncio, json, resource, sys, httpx2

async def main(url, kind, deltas, turns):
    body = {"model": "fake-model", "stream": True, "max_tokens": 64,
            "messages": [{"role": "user", "content": f"BENCH_STREAM {deltas}"}]}
    out = sys.stdout.buffer
    async with httpx2.AsyncClient(timeout=60) as client:
        for turn in range(turns + 1):  # the first one warms up
            begin = resource.getrusage(resource.RUSAGE_SELF)
            count = 0
            async with client.stream("POST", url, json=body) as response:
                async for line in response.aiter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    event = json.loads(line[6:])
                    if kind == "chat":
                        choices = event.get("choices") or ()
                        text = choices[0]["delta"].get("content") if choices else None
                    else:
                        delta = event.get("delta") or {}
                        text = delta.get("text") if isinstance(delta, dict) else None
                    if text:
                        count += 1
                        out.write(json.dumps({"method": "delta", "params": {"delta": text,
                                  "seq": count}}).encode() + b"\n")
            end = resource.getrusage(resource.RUSAGE_SELF)
            used = (end.ru_utime + end.ru_stime) - (begin.ru_utime + begin.ru_stime)
            if turn:
                sys.stderr.write(json.dumps({"cpu": used, "deltas": count}) + "\n")

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
"""


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child_env(source: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as users run it
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(source), env.get("PYTHONPATH")]))
    env["OPENAI_API_KEY"] = env["ANTHROPIC_API_KEY"] = "sk-bench"
    return env


async def server_turn(peer: PipePeer, thread: str, deltas: int, pid: int) -> tuple[float, int]:
    watch = peer.arm()
    before = cpu_seconds(pid)
    text = f"BENCH_STREAM {deltas}"
    await peer.call("turn/start", {"threadId": thread, "input": [{"type": "text", "text": text}]})
    await asyncio.wait_for(asyncio.shield(watch.done), TURN_TIMEOUT)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(watch.idle), 5)
    if watch.end_method != "turn/completed":
        raise RuntimeError(f"turn ended with {watch.end_method}: {peer.stderr[-2000:]!r}")
    return cpu_seconds(pid) - before, watch.deltas


async def floor_turns(
    url: str, kind: str, deltas: int, turns: int, env: dict[str, str]
) -> list[float]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", FLOOR, url, kind, str(deltas), str(turns),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    _, err = await asyncio.wait_for(process.communicate(), TURN_TIMEOUT)
    import json

    samples = []
    for line in err.decode().splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if record["deltas"] != deltas:
                raise RuntimeError(f"floor saw {record['deltas']} deltas, not {deltas}")
            samples.append(record["cpu"] / deltas)
    if not samples:
        raise RuntimeError(f"floor client failed: {err.decode()[-2000:]}")
    return samples


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--provider", choices=["openai", "anthropic"], default="openai")
    parser.add_argument("--deltas", type=int, default=2000)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--src", type=Path, default=HERE.parent)
    parser.add_argument("--profile", type=Path, help="write a cProfile of one turn here")
    args = parser.parse_args()

    model = FakeModel(out=open(os.devnull, "w"))  # noqa: SIM115 - lives as long as the run
    port = await model.start()
    base = f"http://127.0.0.1:{port}"
    kind = "chat" if args.provider == "openai" else "messages"
    base_url = f"{base}/v1" if args.provider == "openai" else base
    floor_url = f"{base}/v1/chat/completions" if kind == "chat" else f"{base}/v1/messages"
    env = child_env(args.src.resolve())
    workspace = Path(tempfile.mkdtemp(prefix="stream-cpu-"))
    profile_flag: list[str] = []
    if args.profile:
        profile_flag = ["-m", "cProfile", "-o", str(args.profile.resolve())]
    command = [
        sys.executable, *profile_flag, "-m", "appserver", "app-server",
        "--workspace", str(workspace), "--provider", args.provider,
        "--base-url", base_url, "--model", "fake-model", "--log-level", "warning",
    ]  # fmt: skip
    peer = await PipePeer.spawn(command, env, args.src)
    assert peer.transport is not None
    pid = peer.transport.get_pid()
    server: list[float] = []
    floor: list[float] = []
    try:
        await peer.initialize()
        thread = (await peer.call("thread/start", {"identity": IDENTITY}))["thread"]["id"]
        await peer.call("thread/subscribe", {"threadId": thread})
        await server_turn(peer, thread, args.deltas, pid)  # warm-up
        for _ in range(args.turns):
            # A fresh thread each time, so the history sent to the model stays small.
            thread = (await peer.call("thread/start", {"identity": IDENTITY}))["thread"]["id"]
            await peer.call("thread/subscribe", {"threadId": thread})
            used, seen = await server_turn(peer, thread, args.deltas, pid)
            if seen != args.deltas:
                print(f"warning: the client saw {seen} of {args.deltas} deltas", file=sys.stderr)
            server.append(used / args.deltas)
            floor += await floor_turns(floor_url, kind, args.deltas, 1, env)
    finally:
        await peer.aclose(30)
        if model.server is not None:
            model.server.close()
        shutil.rmtree(workspace, ignore_errors=True)

    def us(values: list[float]) -> str:
        return f"{statistics.median(values) * 1e6:6.1f} µs (min {min(values) * 1e6:.1f})"

    print(f"# {time.strftime('%Y-%m-%d')} {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
    print(f"# {args.provider} provider, {args.turns} turns of {args.deltas} deltas, medians")
    print(f"server CPU per delta   {us(server)}")
    print(f"floor client per delta {us(floor)}")
    print(f"ratio server/floor     {statistics.median(server) / statistics.median(floor):.2f}")
    if args.profile:
        print(f"profile of the server written to {args.profile}")


if __name__ == "__main__":
    asyncio.run(main())
