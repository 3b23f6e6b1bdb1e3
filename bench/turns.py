"""Streaming-turn throughput of appserver against trivial floors. Prints
figures; never asserts.

    .venv/bin/python bench/turns.py            # ~2-3 minutes on 2 cores
    .venv/bin/python bench/turns.py --quick    # ~30-50 s: 6 turns, 40 subscribers, 2 reps
    .venv/bin/python bench/turns.py --src DIR  # bench another tree (DIR/appserver)

(a) One client, sequential turns with the offline model (``?stream 500``):
    time from sending ``turn/start`` to receiving ``turn/completed``, over
    WebSocket and stdio, against a floor server (bench/turns_floor.py) that
    pushes the very frames recorded from an appserver turn (same count and
    sizes) with ``json.dumps`` per frame and nothing else. Also the server
    process's CPU per turn (less sensitive to a busy machine than wall time).
(b) One ``?stream 2000`` turn fanned out to 100 WebSocket subscribers held by
    separate client processes (bench/turns_client.py worker), all subscribed
    before the turn: delivered deltas per second = deltas received by all
    subscribers / (turn/start sent -> last subscriber's turn/completed). Floor:
    the recorded frames sent by a plain ``websockets`` server, both with
    ``websockets.broadcast`` and with a queue + writer task per connection.
(c) (b) on a second thread that one more subscriber (its own process, raw
    socket, small SO_RCVBUF and MSS) joins and then never reads, through every
    (c) turn; at the end it drains its socket to show whether the server
    disconnected it and how many deltas its outbox coalesced.

appserver and floor servers run side by side and their turns interleave, so
load from other processes hits both alike. Every server is a subprocess on
loopback with its own temp workspace; clients use a minimal WebSocket /
JSON-lines client (the same one for appserver and floors) that classifies
frames by prefix. Clocks: time.monotonic (system-wide, comparable across
processes). Coordination is JSON lines over pipes; every wait is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import re
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from turns_client import PipePeer, RpcFailure, TurnWatch, WsPeer  # noqa: E402

START_TIMEOUT = 30.0
TURN_TIMEOUT = 90.0
IDENTITY = {"channelName": "bench", "userId": "u"}
FANOUT_TARGET = 0.5  # appserver >= half the floor's delivered messages/s
STUCK_TARGET = 0.9  # with a stuck subscriber the others keep >= 90% of (b)


@dataclass(frozen=True)
class Plan:
    turns: int  # (a) measured turns per server and transport
    warmup: int
    deltas_a: int
    subscribers: int
    workers: int
    deltas_b: int
    reps: int  # (b)/(c) measured turns each


FULL = Plan(turns=20, warmup=3, deltas_a=500, subscribers=100, workers=5, deltas_b=2000, reps=3)
QUICK = Plan(turns=6, warmup=2, deltas_a=500, subscribers=40, workers=4, deltas_b=2000, reps=2)


class BenchError(Exception):
    pass


SOURCE = HERE.parent  # where the `appserver` package is imported from (--src)


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("APPSERVER_TOKEN", None)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SOURCE), env.get("PYTHONPATH")]))
    return env


def appserver_command(workspace: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "appserver", "app-server",
        "--workspace", str(workspace), "--provider", "offline", "--log-level", "warning",
        *extra,
    ]  # fmt: skip


def floor_command(mode: str) -> list[str]:
    return [sys.executable, str(HERE / "turns_floor.py"), mode]


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (Linux /proc); 0 where unavailable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


# --- processes ------------------------------------------------------------------------------


@dataclass
class WsServer:
    url: str
    process: asyncio.subprocess.Process
    stderr: bytearray = field(default_factory=bytearray)


async def _stop(process: asyncio.subprocess.Process) -> None:
    """EOF on stdin and SIGTERM, then insist; never leave a child behind."""
    if process.stdin is not None:
        process.stdin.close()
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await asyncio.wait_for(process.wait(), 5)


@contextlib.asynccontextmanager
async def ws_server(command: list[str]) -> AsyncIterator[WsServer]:
    """Start a server that prints ``listening on ws://...`` on stderr."""
    process = await asyncio.create_subprocess_exec(
        *command,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=child_env(),
        cwd=SOURCE,  # `python -m` imports from the working directory first
    )
    assert process.stderr is not None
    server: WsServer | None = None
    drain: asyncio.Task[None] | None = None
    try:
        seen = b""
        async with asyncio.timeout(START_TIMEOUT):
            while not (match := re.search(rb"listening on (ws://\S+)", seen)):
                chunk = await process.stderr.read(4096)
                if not chunk:
                    raise BenchError(f"server exited: {seen.decode(errors='replace')}")
                seen += chunk
        server = WsServer(match.group(1).decode(), process)

        async def keep_stderr() -> None:
            assert process.stderr is not None and server is not None
            while chunk := await process.stderr.read(65536):
                server.stderr += chunk
                del server.stderr[:-65536]

        drain = asyncio.get_running_loop().create_task(keep_stderr())
        yield server
    finally:
        await _stop(process)
        if drain is not None:
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(drain, 5)


class Child:
    """A client process driven by JSON lines (bench/turns_client.py)."""

    def __init__(self, process: asyncio.subprocess.Process, name: str) -> None:
        self.process = process
        self.name = name

    @classmethod
    async def spawn(cls, mode: str) -> Child:
        process = await asyncio.create_subprocess_exec(
            sys.executable, str(HERE / "turns_client.py"), mode,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=child_env(),
        )  # fmt: skip
        return cls(process, mode)

    async def send(self, command: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command).encode() + b"\n")
        await asyncio.wait_for(self.process.stdin.drain(), 10)

    async def recv(self, timeout: float) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), timeout)
        if not line:
            raise BenchError(f"{self.name} process exited")
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise BenchError(f"{self.name}: {reply['error']}")
        return reply

    async def ask(self, command: dict[str, Any], timeout: float = 30) -> dict[str, Any]:
        await self.send(command)
        return await self.recv(timeout)

    async def stop(self) -> None:
        with contextlib.suppress(Exception):
            await self.send({"cmd": "exit"})
        await _stop(self.process)


# --- turns ----------------------------------------------------------------------------------


def turn_params(kind: str, thread: str, deltas: int, script: str, fanout: str | None) -> Any:
    if kind == "appserver":
        return {"threadId": thread, "input": [{"type": "text", "text": f"?stream {deltas}"}]}
    return {"threadId": thread, "script": script, "fanout": fanout}


async def start_turn(peer: WsPeer | PipePeer, params: Any) -> tuple[float, TurnWatch]:
    """Send turn/start (retrying briefly while the previous turn winds down)."""
    deadline = time.monotonic() + 5
    while True:
        watch = peer.arm()
        t0 = time.monotonic()
        try:
            await peer.call("turn/start", params)
            return t0, watch
        except RpcFailure as exc:
            if "progress" not in str(exc.error) or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.002)  # bounded readiness polling


async def finish_turn(watch: TurnWatch) -> None:
    await asyncio.wait_for(asyncio.shield(watch.done), TURN_TIMEOUT)
    if watch.end_method != "turn/completed":
        raise BenchError(f"turn ended with {watch.end_method}")
    # The thread goes idle (runtimeChanged running:false) before the next turn.
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(watch.idle), 5)


async def one_turn(peer: WsPeer | PipePeer, params: Any) -> tuple[float, int]:
    t0, watch = await start_turn(peer, params)
    await finish_turn(watch)
    return watch.t_done - t0, watch.deltas


async def setup_thread(peer: WsPeer | PipePeer, initialize: bool = True) -> str:
    if initialize:
        await peer.initialize()
    thread: str = (await peer.call("thread/start", {"identity": IDENTITY}))["thread"]["id"]
    await peer.call("thread/subscribe", {"threadId": thread})
    return thread


async def record_turn(peer: WsPeer | PipePeer, params: Any, path: Path) -> int:
    """Run one turn and save every message it produced as a floor script."""
    peer.capture = []
    try:
        await one_turn(peer, params)
    finally:
        frames, peer.capture = peer.capture, None
    path.write_text(json.dumps([json.loads(frame) for frame in frames]))
    return len(frames)


@dataclass
class Sequential:
    samples: list[float]
    deltas: int
    frames: int = 0
    cpu: float = 0.0  # server CPU seconds over the measured turns


async def sequential_turns(
    peer: WsPeer | PipePeer, kind: str, plan: Plan, script: Path, record: bool
) -> Sequential:
    thread = await setup_thread(peer)
    if kind == "floor":
        await peer.call("bench/script", {"path": str(script)})
    params = turn_params(kind, thread, plan.deltas_a, str(script), None)
    frames = 0
    for index in range(plan.warmup):
        if record and index == plan.warmup - 1:
            frames = await record_turn(peer, params, script)
        else:
            await one_turn(peer, params)
    samples, deltas = [], 0
    for _ in range(plan.turns):
        elapsed, deltas = await one_turn(peer, params)
        samples.append(elapsed)
    return Sequential(samples, deltas, frames)


# --- fan-out -----------------------------------------------------------------------------------


@dataclass
class Fanout:
    rate: float  # delivered deltas / s over all subscribers (the stuck one excluded)
    elapsed: float
    deltas: int
    complete: int  # subscribers that saw all deltas and turn/completed
    subscribers: int
    server_cpu: float
    client_cpu: float
    stuck_queues: dict[str, Any] | None = None  # kernel queues of the stuck reader after the turn


async def fanout_turn(
    driver: WsPeer,
    workers: list[Child],
    group: str,
    params: Any,
    expect: int,
    server_pid: int,
    stuck: Child | None = None,
) -> Fanout:
    for worker in workers:
        await worker.send({"cmd": "arm", "group": group, "timeout": TURN_TIMEOUT})
    for worker in workers:
        await worker.recv(10)
    pids = [worker.process.pid for worker in workers]
    cpu0 = cpu_seconds(server_pid)
    clients0 = sum(map(cpu_seconds, pids)) + time.process_time()
    t0, watch = await start_turn(driver, params)
    reports = [(await worker.recv(TURN_TIMEOUT + 10))["report"] for worker in workers]
    cpu = cpu_seconds(server_pid) - cpu0
    clients = sum(map(cpu_seconds, pids)) + time.process_time() - clients0
    peek = await stuck.ask({"cmd": "peek"}) if stuck is not None else {}
    await finish_turn(watch)
    last = max(report["last"] for report in reports)
    total = sum(report["deltas"] for report in reports)
    subscribers = sum(report["n"] for report in reports)
    complete = sum(report["completed"] for report in reports)
    if any(report["min"] != expect for report in reports):
        complete = min(complete, subscribers - 1)  # someone missed deltas
    elapsed = last - t0 if last else float("nan")
    result = Fanout(total / elapsed, elapsed, total, complete, subscribers, cpu, clients)
    if stuck is not None:
        result.stuck_queues = peek
    return result


async def connect_workers(
    workers: list[Child], group: str, url: str, threads: list[str], total: int
) -> None:
    per, extra = divmod(total, len(workers))
    for index, worker in enumerate(workers):
        count = per + (1 if index < extra else 0)
        command = {"cmd": "connect", "group": group, "url": url, "n": count, "threads": threads}
        await worker.send(command)
    for worker in workers:
        await worker.recv(60)


async def close_workers(workers: list[Child]) -> None:
    for worker in workers:
        await worker.send({"cmd": "close"})
    for worker in workers:
        await worker.recv(30)


# --- the run -----------------------------------------------------------------------------------


def med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(0.95 * len(ordered) + 0.5) - 1))]


async def part_a(plan: Plan, tmp: Path) -> dict[str, dict[str, Sequential]]:
    """All four servers up at once; their turns interleave, so load drift on
    the machine hits appserver and floor alike."""
    script = tmp / "script_a.json"
    app_ws = appserver_command(tmp / "ws_a", "--listen", "ws://127.0.0.1:0")
    async with contextlib.AsyncExitStack() as stack:
        app_srv = await stack.enter_async_context(ws_server(app_ws))
        floor_srv = await stack.enter_async_context(ws_server(floor_command("ws")))
        peers: dict[tuple[str, str], WsPeer | PipePeer] = {
            ("websocket", "appserver"): await WsPeer.open(app_srv.url),
            ("websocket", "floor"): await WsPeer.open(floor_srv.url),
        }
        for kind, command in (
            ("appserver", appserver_command(tmp / "stdio_a")),
            ("floor", floor_command("stdio")),
        ):
            pipe = await PipePeer.spawn(command, child_env(), SOURCE)
            stack.push_async_callback(pipe.aclose)
            peers["stdio", kind] = pipe
        params: dict[tuple[str, str], Any] = {}
        for key, peer in peers.items():
            thread = await setup_thread(peer)
            params[key] = turn_params(key[1], thread, plan.deltas_a, str(script), None)
        frames = await record_turn(
            peers["websocket", "appserver"], params["websocket", "appserver"], script
        )
        for key, peer in peers.items():
            if key[1] == "floor":
                await peer.call("bench/script", {"path": str(script)})
        for _ in range(plan.warmup):
            for key, peer in peers.items():
                await one_turn(peer, params[key])
        pids = {
            ("websocket", "appserver"): app_srv.process.pid,
            ("websocket", "floor"): floor_srv.process.pid,
        }
        for key, peer in peers.items():
            if isinstance(peer, PipePeer):
                assert peer.transport is not None
                pids[key] = peer.transport.get_pid()
        results = {key: Sequential([], 0, frames) for key in peers}
        for _ in range(plan.turns):
            for key, peer in peers.items():
                cpu0 = cpu_seconds(pids[key])
                elapsed, deltas = await one_turn(peer, params[key])
                results[key].cpu += cpu_seconds(pids[key]) - cpu0
                results[key].samples.append(elapsed)
                results[key].deltas = deltas
        for peer in peers.values():
            if isinstance(peer, WsPeer):
                await peer.aclose()
    out: dict[str, dict[str, Sequential]] = {"websocket": {}, "stdio": {}}
    for (transport, kind), result in results.items():
        out[transport][kind] = result
    return out


async def part_bc(
    plan: Plan, tmp: Path, workers: list[Child], stuck: Child
) -> tuple[list[Fanout], list[Fanout], dict[str, list[Fanout]], dict[str, Any], int]:
    """appserver and the floor up at once, every subscriber connected to both;
    (b) turns on thread A, (c) turns on thread C (the stuck reader subscribes
    to C only, so its backlog never touches (b)); runs interleave per rep."""
    script = tmp / "script_b.json"
    runs_b: list[Fanout] = []
    runs_c: list[Fanout] = []
    floors: dict[str, list[Fanout]] = {"broadcast": [], "queues": []}
    app_ws = appserver_command(tmp / "ws_b", "--listen", "ws://127.0.0.1:0")
    n = plan.deltas_b
    stuck_info: dict[str, Any] = {}
    async with ws_server(app_ws) as app, ws_server(floor_command("ws")) as floor:
        app_driver = await WsPeer.open(app.url)
        floor_driver = await WsPeer.open(floor.url)
        thread_b = await setup_thread(app_driver)
        thread_c = await setup_thread(app_driver, initialize=False)
        floor_thread = await setup_thread(floor_driver)
        await connect_workers(workers, "app", app.url, [thread_b, thread_c], plan.subscribers)
        await connect_workers(workers, "floor", floor.url, [floor_thread], plan.subscribers)
        params_b = turn_params("appserver", thread_b, n, "", None)
        params_c = turn_params("appserver", thread_c, n, "", None)
        floor_params = {
            mode: turn_params("floor", floor_thread, n, str(script), mode) for mode in floors
        }
        # Warm-up (not measured); it also records the frames the floor replays.
        app_driver.capture = []
        await fanout_turn(app_driver, workers, "app", params_b, n, app.process.pid)
        frames, app_driver.capture = app_driver.capture, None
        script.write_text(json.dumps([json.loads(frame) for frame in frames]))
        await floor_driver.call("bench/script", {"path": str(script)})
        await fanout_turn(
            floor_driver, workers, "floor", floor_params["broadcast"], n, floor.process.pid
        )
        for _ in range(plan.reps):
            runs_b.append(
                await fanout_turn(app_driver, workers, "app", params_b, n, app.process.pid)
            )
            for mode, runs in floors.items():
                runs.append(
                    await fanout_turn(
                        floor_driver, workers, "floor", floor_params[mode], n, floor.process.pid
                    )
                )
            if not runs_c:
                # The stuck reader joins thread C right before the first (c) turn
                # and stays stuck through every later turn (it is not on thread B).
                connect = {"url": app.url, "thread": thread_c, "rcvbuf": 4096, "maxseg": 536}
                stuck_info = await stuck.ask({"cmd": "connect", **connect})
            runs_c.append(
                await fanout_turn(app_driver, workers, "app", params_c, n, app.process.pid, stuck)
            )
        drain = {"cmd": "drain", "expect": n, "turns": plan.reps, "timeout": 60}
        stuck_info.update(await stuck.ask(drain, 70))
        await stuck.ask({"cmd": "close"})
        await close_workers(workers)
        await app_driver.aclose()
        await floor_driver.aclose()
        overflow_logs = app.stderr.count(b"outbox over")
    return runs_b, runs_c, floors, stuck_info, overflow_logs


def verdict(ok: bool) -> str:
    return "MET" if ok else "NOT MET"


def report_a(plan: Plan, results: dict[str, dict[str, Sequential]]) -> None:
    frames = results["websocket"]["appserver"].frames
    print(
        f"(a) one client, sequential turns, offline `?stream {plan.deltas_a}` "
        f"({plan.turns} turns after {plan.warmup} warm-up, servers interleaved; "
        f"{frames} frames/turn)"
    )
    print(
        "    wall = turn/start sent -> turn/completed received; CPU = server process CPU per turn"
    )
    print(
        f"    {'transport':<10} {'server':<10} {'wall median':>12} {'p95':>10} {'us/delta':>9}"
        f" {'CPU/turn':>10} {'CPU us/delta':>13}"
    )
    for transport, pair in results.items():
        for kind, seq in pair.items():
            median = med(seq.samples)
            cpu = seq.cpu / max(1, len(seq.samples))
            print(
                f"    {transport:<10} {kind:<10} {median * 1e3:>9.2f} ms"
                f" {p95(seq.samples) * 1e3:>7.2f} ms"
                f" {median / plan.deltas_a * 1e6:>9.1f} {cpu * 1e3:>7.1f} ms"
                f" {cpu / plan.deltas_a * 1e6:>13.1f}"
            )
        app, floor = pair["appserver"], pair["floor"]
        wall_app, wall_floor = med(app.samples), med(floor.samples)
        print(
            f"    {transport:<10} appserver/floor: wall {wall_app / wall_floor:.2f}x "
            f"(+{(wall_app - wall_floor) / plan.deltas_a * 1e6:.1f} us/delta), "
            f"CPU {app.cpu / floor.cpu if floor.cpu else float('nan'):.2f}x; "
            f"deltas seen {app.deltas}/{floor.deltas}"
        )


def _fan_line(label: str, runs: list[Fanout]) -> str:
    rates = [run.rate for run in runs]
    complete = min(run.complete for run in runs)
    return (
        f"    {label:<26} {med(rates):>7,.0f} msg/s (runs "
        + " ".join(f"{rate:,.0f}" for rate in rates)
        + f"); turn {med([r.elapsed for r in runs]):.2f} s;"
        f" server CPU {cpu_per_msg(runs):.1f} us/msg ({med([r.server_cpu for r in runs]):.2f} s),"
        f" clients {med([r.client_cpu for r in runs]):.2f} s;"
        f" complete {complete}/{runs[0].subscribers}"
    )


def cpu_per_msg(runs: list[Fanout]) -> float:
    """Server CPU microseconds per delivered delta (median over runs)."""
    return med([run.server_cpu / run.deltas * 1e6 for run in runs if run.deltas])


def report_bc(
    plan: Plan,
    runs_b: list[Fanout],
    runs_c: list[Fanout],
    floors: dict[str, list[Fanout]],
    stuck: dict[str, Any],
    overflow_logs: int,
) -> None:
    print(
        f"(b) one `?stream {plan.deltas_b}` turn -> {plan.subscribers} WebSocket subscribers in "
        f"{plan.workers} client processes; delivered deltas/s (median of {plan.reps})"
    )
    print(_fan_line("appserver", runs_b))
    for mode, runs in floors.items():
        print(_fan_line(f"floor websockets {mode}", runs))
    app = med([run.rate for run in runs_b])
    best_mode = max(floors, key=lambda mode: med([run.rate for run in floors[mode]]))
    best = med([run.rate for run in floors[best_mode]])
    for mode, runs in floors.items():
        print(
            f"    appserver / floor {mode}: rate {app / med([r.rate for r in runs]):.2f}, "
            f"server CPU per msg {cpu_per_msg(runs_b) / cpu_per_msg(runs):.2f}x"
        )
    print(
        f"    target appserver >= {FANOUT_TARGET:.2f} x best floor ({best_mode}): "
        f"{app / best:.2f} -> {verdict(app / best >= FANOUT_TARGET)}"
    )
    print(
        "(c) as (b) plus one subscriber that never reads during the (c) turns "
        "(own process, raw socket, small SO_RCVBUF and MSS)"
    )
    print(_fan_line("appserver + stuck reader", runs_c))
    stuck_rate = med([run.rate for run in runs_c])
    print(
        f"    ratio to (b): {stuck_rate / app:.2f} -> target >= {STUCK_TARGET:.2f}: "
        f"{verdict(stuck_rate / app >= STUCK_TARGET)}; server CPU per msg (c)/(b) "
        f"{cpu_per_msg(runs_c) / cpu_per_msg(runs_b):.2f}x"
    )
    for index, run in enumerate(runs_c, 1):
        queues = run.stuck_queues or {}
        print(
            f"    after (c) turn {index}: stuck reader's kernel Recv-Q {queues.get('recv_q')} B, "
            f"server's Send-Q to it {queues.get('server_send_q')} B"
        )
    sent = plan.deltas_b * plan.reps
    got = stuck.get("deltas", 0)
    print(
        f"    stuck reader (SO_RCVBUF={stuck.get('rcvbuf')}, MSS={stuck.get('mss')}), "
        "drained after "
        f"{plan.reps} turn(s): disconnected="
        + (f"yes ({stuck.get('close_code')})" if stuck.get("closed") else "no")
        + f", turn ends seen {stuck.get('turns')}/{plan.reps}, {got} delta frames for {sent}"
        f" deltas -> {sent - got} coalesced away ({(sent - got) / sent:.0%}; largest delta frame"
        f" {stuck.get('biggest', 0):,} B), text intact={'yes' if stuck.get('text_ok') else 'no'}"
    )
    print(f"    server log lines 'outbox over ...' (hard-bound disconnects): {overflow_logs}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="~30 s variant")
    parser.add_argument("--only", choices=["a", "bc"], help="run one part")
    parser.add_argument(
        "--src", type=Path, help="directory holding the appserver package to bench (default: repo)"
    )
    args = parser.parse_args()
    if args.src is not None:
        global SOURCE
        SOURCE = args.src.resolve()
    plan = QUICK if args.quick else FULL
    from importlib.metadata import version

    print(
        f"bench/turns.py ({'quick' if args.quick else 'full'}): "
        f"Python {platform.python_version()}, "
        f"websockets {version('websockets')}, {os.cpu_count()} CPUs, loopback; load average "
        + " ".join(f"{value:.1f}" for value in os.getloadavg())
    )
    started = time.monotonic()
    workers: list[Child] = []
    stuck: Child | None = None
    with tempfile.TemporaryDirectory(prefix="bench-turns-") as name:
        tmp = Path(name)
        for sub in ("ws_a", "stdio_a", "ws_b"):
            (tmp / sub).mkdir()
        try:
            if args.only in (None, "bc"):
                workers = [await Child.spawn("worker") for _ in range(plan.workers)]
                stuck = await Child.spawn("stuck")
            if args.only in (None, "a"):
                report_a(plan, await part_a(plan, tmp))
                sys.stdout.flush()
            if args.only in (None, "bc"):
                assert stuck is not None
                report_bc(plan, *await part_bc(plan, tmp, workers, stuck))
        finally:
            for child in [*workers, *([stuck] if stuck else [])]:
                await child.stop()
    load = " ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"total {time.monotonic() - started:.0f} s; load average at the end {load}")


if __name__ == "__main__":
    asyncio.run(main())
