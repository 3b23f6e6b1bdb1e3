"""One-shot Zene host requests end to end, as clawbridge makes them. Prints
figures; never asserts.

    .venv/bin/python bench/zene_oneshot.py            # 30 requests (~15 s)
    .venv/bin/python bench/zene_oneshot.py -n 100 --same-session
    .venv/bin/python bench/zene_oneshot.py --src DIR   # bench another tree (DIR/appserver)

Each sample spawns ``python -m appserver host --protocol v1 --bridge-compat
--single-request`` on a temp workspace with the offline model, writes
clawbridge's request line, closes stdin and waits for the process to exit:
wall time from spawn to exit (what clawbridge waits for), and the child's
CPU time (user+sys: less sensitive to a busy machine). Warm-up runs come
first (they create the database and cache bytecode: PYTHONDONTWRITEBYTECODE is
removed from the child's environment, as users run). The floor is a bare
``python -c pass`` spawn. By default every request opens a new session (a
new thread); ``--same-session`` sends them all to one session, whose history
grows.

Then the same with ``--keep-warm 60`` (docs/faces.md, "A warm process"): the
first request starts a warm process of the command, and once its socket is
there the measured one-shots are handed to it (the row says how many it
served). Its sockets live in a temporary ``$XDG_RUNTIME_DIR``; it is stopped at
the end.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def child_env(src: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("APPSERVER_PROVIDER", None)
    env["PYTHONPATH"] = str(src)
    return env


def request(session: str, prompt: str) -> bytes:
    """The line clawbridge writes (compact, keys sorted, a new UUIDv4 request id)."""
    channel = "qq_group_7"
    body = {
        "protocol_version": 1,
        "type": "run",
        "request_id": str(uuid.uuid4()),
        "session_id": session,
        "channel_id": channel,
        "agent": "default",
        "prompt": prompt,
        "timeout_ms": 162000,
        "idempotency_key": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{session}|{channel}|{prompt}")),
    }
    return (json.dumps(body, sort_keys=True, separators=(",", ":")) + "\n").encode()


def one(
    command: list[str], stdin: bytes, env: dict[str, str], cwd: Path
) -> tuple[float, float, bool]:
    """(wall seconds, the child's CPU seconds, answered ok with tokens)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, input=stdin, capture_output=True, env=env, cwd=cwd, timeout=60)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    ok = False
    if done.returncode == 0:
        try:
            answer = json.loads(done.stdout.splitlines()[0])
            ok = bool(answer["ok"]) and answer["usage"]["total_tokens"] > 0
        except (ValueError, IndexError, KeyError):
            ok = False
    return elapsed, cpu, ok


def percentile(samples: list[float], pct: float) -> float:
    ordered = sorted(samples)
    rank = max(1, min(len(ordered), round(pct / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def line(name: str, samples: list[float]) -> str:
    median, p90 = statistics.median(samples), percentile(samples, 90)
    return (
        f"{name:<28} min {min(samples) * 1000:7.1f} ms   median {median * 1000:7.1f} ms"
        f"   p90 {p90 * 1000:7.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=30, help="measured requests (default 30)")
    parser.add_argument("--warmup", type=int, default=3, help="unmeasured first runs (default 3)")
    parser.add_argument("--same-session", action="store_true", help="one session for all")
    parser.add_argument(
        "--src", type=Path, default=ROOT, metavar="DIR", help="bench another tree (DIR/appserver)"
    )
    args = parser.parse_args()
    env = child_env(args.src.resolve())
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        cold = measure(args, env, Path(tmp), warm=False)
    with tempfile.TemporaryDirectory() as tmp:
        warm = measure(args, env, Path(tmp), warm=True)
    print(
        f"warm / cold (median): {warm / cold:.2f}; warm against the 150 ms target: "
        f"{warm * 1000 / 150:.2f}"
    )


def wait_for_socket(run_dir: Path) -> Path:
    """The warm process's socket, once it is there (it starts in the background)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = sorted(run_dir.glob("appserver/*.sock"))
        if found:
            return found[0]
        time.sleep(0.02)
    raise SystemExit("no warm process started within 30 s")


def measure(args: argparse.Namespace, env: dict[str, str], tmp: Path, warm: bool) -> float:
    """Run the one-shots (cold, or handed to a warm process); print their rows;
    the median wall time."""
    env = dict(env)
    run_dir = tmp / "run"
    run_dir.mkdir(mode=0o700)
    env["XDG_RUNTIME_DIR"] = str(run_dir)
    workspace = tmp / "ws"
    workspace.mkdir()
    command = [
        sys.executable,
        "-m",
        "appserver",
        "host",
        "--workspace",
        str(workspace),
        "--provider",
        "offline",
        "--protocol",
        "v1",
        "--bridge-compat",
        "--single-request",
        *(["--keep-warm", "60"] if warm else []),
    ]
    floor_command = [sys.executable, "-c", "pass"]
    samples: list[float] = []
    cpu: list[float] = []
    floor: list[float] = []
    failures = 0
    socket_path: Path | None = None
    for index in range(max(args.warmup, 1 if warm else 0) + args.n):
        session = "bench_session" if args.same_session else f"bench_{index}"
        elapsed, used, ok = one(command, request(session, f"hello number {index}"), env, workspace)
        floor_elapsed, _, _ = one(floor_command, b"", env, workspace)
        if socket_path is None and warm:
            socket_path = wait_for_socket(run_dir)  # the first request started it
        if index < max(args.warmup, 1 if warm else 0):
            continue
        samples.append(elapsed)
        cpu.append(used)
        floor.append(floor_elapsed)
        failures += not ok
    served = stop(args.src.resolve(), socket_path) if socket_path else None
    name = "one-shot, warm process" if warm else "appserver host one-shot"
    print(line(name, samples))
    print(line("  its CPU (user+sys)", cpu))
    print(line("floor: python -c pass", floor))
    if warm:
        print(f"  the warm process served {served} requests (of {args.n} measured)")
    if failures:
        print(f"{failures} of {len(samples)} requests did not answer ok with tokens")
    return statistics.median(samples)


def stop(src: Path, socket_path: Path) -> int | None:
    """Stop the warm process; how many requests it served after the warm-up."""
    sys.path.insert(0, str(src))
    from appserver.faces.zene import warm

    return warm.stop(str(socket_path))


if __name__ == "__main__":
    main()
