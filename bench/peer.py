"""appserver side by side with OpenAI Codex's ``codex app-server``, both driven
over stdio by the same client against the same local fake model. Prints
figures; never asserts.

Three servers: Codex, appserver's DotCraft door (``appserver app-server``) and
its Codex face (``appserver-codex app-server``, which speaks Codex's protocol
and is driven exactly as Codex is: the same requests and params);
``--no-codex-face`` leaves the last out.

    make bench-peer                                  # installs Codex if needed, then 3 runs (~15 s)
    .venv/bin/python bench/peer.py --runs 5 --json samples.json

Codex: ``@openai/codex`` at the version pinned in bench/peer/package.json
(+ lock) is installed with ``npm ci`` into bench/.cache/codex (ignored by
git) when that copy is missing or differs. Its npm entry point is a Node
wrapper that execs a native binary; we spawn that binary
(node_modules/@openai/codex-<platform>/vendor/<triple>/bin/codex) directly, so
the process timed and measured is the server itself. Each Codex session gets
a fresh CODEX_HOME and HOME whose config.toml points a custom model provider
(``wire_api = "responses"``, key from ``OPENAI_API_KEY``, no retries) at the
fake model, with ``approval_policy = "never"``, the update check and
analytics off and the ``plugins`` feature off (it otherwise runs ``git
ls-remote https://github.com/openai/plugins``); everything else is Codex's
default, including its shell snapshot at thread start (a ``bash -lc`` child,
counted in its CPU). No API key login is needed: the custom provider reads its
key from the environment.

appserver: ``.venv/bin/appserver app-server --provider openai --base-url
http://127.0.0.1:PORT/v1 --model fake-model`` with ``OPENAI_API_KEY=sk-fake``,
a fresh workspace and HOME per session, PYTHONDONTWRITEBYTECODE removed
(users' machines write bytecode) and the APPSERVER_* variables cleared.

The fake model (bench/peer_model.py, its own process) serves Chat Completions
for appserver and the Responses API for Codex, streaming ``BENCH_STREAM N``
prompts as N text deltas, one SSE event each, with usage at the end.

A session: spawn, ``initialize`` (+ ``initialized``), ``thread/start``, then
three turns on that thread: 500 deltas (the first turn), 2,000 deltas, 500
deltas again (the warm turn). After the last turn and a short settle, the
server's CPU (utime+stime of it and its descendants, reaped children
included, from /proc/PID/stat) and peak RSS (VmHWM from /proc/PID/status) are
read (and the CPU once more before the first turn, to split it into start-up
and turns); then stdin is closed and the server must exit. Sessions alternate
(Codex, appserver, Codex, ...) after one untimed warm-up session of each
(bytecode written, binaries in the page cache); figures are medians over
--runs sessions. Every delta is counted (classified by prefix, not parsed)
and each turn's final message is checked against the streamed text; a
warning is printed when something is missing. Clocks: time.monotonic. Every
wait is bounded; children are killed and temp dirs removed on the way out.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PINNED = HERE / "peer"  # package.json + package-lock.json pinning @openai/codex
CACHE = HERE / ".cache"
CODEX_DIR = CACHE / "codex"
APPSERVER = ROOT / ".venv" / "bin" / "appserver"
MODEL_SCRIPT = HERE / "peer_model.py"

START_TIMEOUT = 60.0
CALL_TIMEOUT = 30.0
TURN_TIMEOUT = 120.0
EXIT_TIMEOUT = 15.0
SETTLE = 0.2  # between turns and before the CPU/RSS reading; not timed
STREAM_LIMIT = 64 * 1024 * 1024
API_KEY = "sk-fake"
MODEL = "fake-model"
CLIENT_INFO = {"name": "bench-peer", "version": "1"}

# (key, deltas): the turns of one session, in order.
TURNS = (("first", 500), ("long", 2000), ("warm", 500))

DELTA = b'"method":"item/agentMessage/delta"'
ROWS: tuple[tuple[str, str, str], ...] = (
    ("initialize", "spawn -> initialize answered", "ms"),
    ("turn_first", "first turn, 500 deltas", "ms"),
    ("turn_long", "turn, 2,000 deltas", "ms"),
    ("turn_warm", "warm turn, 500 deltas (3rd turn)", "ms"),
    ("first_delta", "first delta of the first turn", "ms"),
    ("thread_start", "thread/start", "ms"),
    ("cpu", "server CPU, whole session", "ms"),
    ("cpu_start", "  of which start-up, to thread/start", "ms"),
    ("cpu_turns", "  of which the three turns", "ms"),
    ("rss", "peak RSS (VmHWM)", "MB"),
)


class BenchError(Exception):
    pass


def dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def expected_text(count: int) -> str:
    return "".join(f"chunk {i} " for i in range(1, count + 1))


# --- Codex install -------------------------------------------------------------------------------


def pinned_version() -> str:
    return str(json.loads((PINNED / "package.json").read_text())["dependencies"]["@openai/codex"])


def find_codex_binary(root: Path) -> Path | None:
    """The native binary the npm wrapper (bin/codex.js) would exec."""
    for candidate in sorted(root.glob("node_modules/@openai/codex-*/vendor/*/bin/codex")):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def binary_version(binary: Path) -> str:
    out = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=True
    )
    return out.stdout.strip().split()[-1]


def ensure_codex() -> Path:
    """npm ci the pinned package into bench/.cache/codex unless already there."""
    version = pinned_version()
    lock = (PINNED / "package-lock.json").read_bytes()
    binary = find_codex_binary(CODEX_DIR)
    copied = CODEX_DIR / "package-lock.json"
    if binary and copied.exists() and copied.read_bytes() == lock:
        with contextlib.suppress(OSError, subprocess.SubprocessError, IndexError):
            if binary_version(binary) == version:
                return binary
    npm = shutil.which("npm")
    if npm is None:
        raise BenchError("npm is needed to install @openai/codex (or pass --codex-bin)")
    print(f"installing @openai/codex {version} into {CODEX_DIR.relative_to(ROOT)} (npm ci) ...")
    CODEX_DIR.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(PINNED / name, CODEX_DIR / name)
    subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=CODEX_DIR,
        check=True,
        timeout=600,
    )
    binary = find_codex_binary(CODEX_DIR)
    if binary is None:
        raise BenchError(
            f"npm ci finished but no native codex binary under {CODEX_DIR}/node_modules "
            f"(platform {platform.system()} {platform.machine()} unsupported?)"
        )
    found = binary_version(binary)
    if found != version:
        raise BenchError(f"installed codex reports {found}, expected {version}")
    return binary


# --- the two servers -------------------------------------------------------------------------


def base_env(session: Path) -> dict[str, str]:
    """The bench's environment minus anything that would steer either server.

    GIT_CEILING_DIRECTORIES: the session directory lives inside this checkout
    (bench/.cache), and Codex runs ``git status`` and friends in its cwd; with
    the ceiling the workspace is what it looks like, a plain directory."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("APPSERVER_", "CODEX_", "OPENAI_", "RUST_LOG", "PYTHON", "GIT_"))
    }
    env.update(
        HOME=str(session / "home"),
        OPENAI_API_KEY=API_KEY,
        GIT_CEILING_DIRECTORIES=str(session),
    )
    return env


@dataclass
class ServerKind:
    key: str
    label: str
    command: Callable[[Path, int], list[str]]  # (session dir, model port) -> argv
    env: Callable[[Path, int], dict[str, str]]
    thread_params: Callable[[Path], dict[str, Any]]  # (workspace)
    turn_params: Callable[[str, str], dict[str, Any]]  # (thread id, text)
    end_status: Callable[[bytes, dict[str, Any]], str | None]  # (method, params) -> status
    # --warm: every session in this one directory (a warm parent serves only
    # exactly its own command: the same workspace and HOME each launch).
    fixed_dir: Path | None = None


def codex_config(port: int) -> str:
    return f"""\
# Written by bench/peer.py for one session.
model = "{MODEL}"
model_provider = "bench"
approval_policy = "never"
sandbox_mode = "read-only"
check_for_update_on_startup = false

[model_providers.bench]
name = "bench fake model"
base_url = "http://127.0.0.1:{port}/v1"
wire_api = "responses"
env_key = "OPENAI_API_KEY"
request_max_retries = 0
stream_max_retries = 0

[features]
plugins = false

[analytics]
enabled = false
"""


def make_codex(binary: Path, version: str) -> ServerKind:
    def command(session: Path, port: int) -> list[str]:
        (session / "codex-home").mkdir()
        (session / "codex-home" / "config.toml").write_text(codex_config(port))
        return [str(binary), "app-server"]

    def env(session: Path, port: int) -> dict[str, str]:
        return base_env(session) | {"CODEX_HOME": str(session / "codex-home")}

    def end_status(method: bytes, params: dict[str, Any]) -> str | None:
        if method != b"turn/completed":
            return None
        return str(params.get("turn", {}).get("status"))

    return ServerKind(
        key="codex",
        label=f"Codex app-server {version}",
        command=command,
        env=env,
        thread_params=lambda workspace: {"cwd": str(workspace)},
        turn_params=lambda tid, text: {
            "threadId": tid,
            "input": [{"type": "text", "text": text, "text_elements": []}],
        },
        end_status=end_status,
    )


def make_codex_face(executable: Path) -> ServerKind:
    """``appserver-codex app-server``: Codex's protocol, driven exactly as Codex is."""

    codex = make_codex(executable, "")
    return dataclasses.replace(
        codex,
        key="codex-face",
        label="appserver-codex",
        command=appserver_command(executable),
        env=lambda session, port: base_env(session),
    )


def warm_kind(kind: ServerKind, scratch: Path) -> ServerKind:
    """``kind`` launched with ``APPSERVER_KEEP_WARM`` (appserver/warm_launch.py):
    its sessions share a directory, and so a warm parent that forks each server."""
    fixed = scratch / f"{kind.key}-warm"
    runtime = scratch / "xdg"
    runtime.mkdir(mode=0o700, exist_ok=True)

    def env(session: Path, port: int) -> dict[str, str]:
        return kind.env(session, port) | {
            "APPSERVER_KEEP_WARM": "600",
            "XDG_RUNTIME_DIR": str(runtime),
        }

    return dataclasses.replace(
        kind, key=f"{kind.key}-warm", label=f"{kind.label} warm", env=env, fixed_dir=fixed
    )


def stop_warm_parents(scratch: Path) -> None:
    sys.path.insert(0, str(ROOT))
    from appserver import warm_common

    for path in (scratch / "xdg" / "appserver").glob("*.sock"):
        warm_common.stop(str(path))


async def warm_parent_ready(scratch: Path, count: int) -> None:
    """Wait (bounded) until ``count`` warm parents listen."""
    async with asyncio.timeout(START_TIMEOUT):
        while len(list((scratch / "xdg" / "appserver").glob("*.sock"))) < count:
            await asyncio.sleep(0.05)


def appserver_command(executable: Path) -> Callable[[Path, int], list[str]]:
    """``executable app-server`` on the session's workspace, pointed at the fake
    model (the DotCraft door and the Codex face take the same flags)."""

    def command(session: Path, port: int) -> list[str]:
        return [
            str(executable), "app-server", "--workspace", str(session / "workspace"),
            "--provider", "openai", "--base-url", f"http://127.0.0.1:{port}/v1",
            "--model", MODEL,
        ]  # fmt: skip

    return command


def make_appserver(executable: Path) -> ServerKind:
    ends = {
        b"turn/completed": "completed",
        b"turn/failed": "failed",
        b"turn/cancelled": "cancelled",
    }
    return ServerKind(
        key="appserver",
        label="appserver",
        command=appserver_command(executable),
        env=lambda session, port: base_env(session),
        thread_params=lambda workspace: {"identity": {"channelName": "bench", "userId": "u"}},
        turn_params=lambda tid, text: {"threadId": tid, "input": [{"type": "text", "text": text}]},
        end_status=lambda method, params: ends.get(method),
    )


# --- /proc ---------------------------------------------------------------------------------


def _stat_fields(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def process_tree(pid: int) -> list[int]:
    """pid and its live descendants."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                children.setdefault(int(_stat_fields(int(entry.name))[1]), []).append(
                    int(entry.name)
                )
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(children.get(current, ()))
    return tree


def forked_servers(pid: int) -> list[int]:
    """Processes outside pid's tree holding pid's stdin pipe: the server a warm
    parent forked for this launcher (appserver/warm_parent.py; once serving, it
    keeps that pipe on another descriptor and puts /dev/null on its 0)."""
    try:
        stdin = os.readlink(f"/proc/{pid}/fd/0")
    except OSError:
        return []
    if not stdin.startswith("pipe:"):
        return []
    skip = {os.getpid(), *process_tree(pid)}
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) not in skip:
            with contextlib.suppress(OSError):
                if any(os.readlink(fd) == stdin for fd in (entry / "fd").iterdir()):
                    found.append(int(entry.name))
    return found


def cpu_seconds(pid: int) -> tuple[float, int]:
    """utime+stime+cutime+cstime summed over pid's live tree (and a server a warm
    parent forked for it), and the tree's size."""
    ticks = 0
    tree = process_tree(pid)
    tree += [server for server in forked_servers(pid) if server not in tree]
    for member in tree:
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = _stat_fields(member)
            ticks += sum(int(fields[i]) for i in (11, 12, 13, 14))
    return ticks / os.sysconf("SC_CLK_TCK"), len(tree)


def peak_rss_mb(pid: int) -> float:
    match = re.search(r"VmHWM:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    return int(match.group(1)) / 1024 if match else float("nan")


# --- the fake model ------------------------------------------------------------------------


class Model:
    """bench/peer_model.py in its own process; its request log is read as it comes."""

    def __init__(self) -> None:
        self.process: asyncio.subprocess.Process | None = None
        self.port = 0
        self.requests: list[dict[str, Any]] = []
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.process = await asyncio.create_subprocess_exec(
            sys.executable, str(MODEL_SCRIPT),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), START_TIMEOUT)
        if not line:
            raise BenchError("the fake model did not start")
        self.port = int(json.loads(line)["port"])
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        while line := await self.process.stdout.readline():
            self.requests.append(json.loads(line))

    async def stop(self) -> None:
        if self.process is None:
            return
        await stop_process(self.process)
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(self._reader, 5)


async def stop_process(process: asyncio.subprocess.Process, grace: float = EXIT_TIMEOUT) -> bool:
    """EOF on stdin; SIGTERM, then SIGKILL if it lingers. True if it left on EOF alone."""
    if process.stdin is not None and not process.stdin.is_closing():
        process.stdin.close()
    try:
        await asyncio.wait_for(process.wait(), grace)
        return True
    except TimeoutError:
        pass
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(sig)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), 5)
            return False
    return False


# --- one session -----------------------------------------------------------------------------


@dataclass
class Turn:
    deltas: int
    sent: float = 0.0
    first: float = 0.0
    end: float = 0.0
    status: str = ""
    received: int = 0
    text_ok: bool = False
    done: asyncio.Future[None] | None = None


@dataclass
class Session:
    """One server process and the client end of its stdio."""

    kind: ServerKind
    process: asyncio.subprocess.Process
    stderr_path: Path
    next_id: int = 0
    pending: dict[int, asyncio.Future[dict[str, Any]]] = field(default_factory=dict)
    turn: Turn | None = None
    notes: list[str] = field(default_factory=list)
    reader: asyncio.Task[None] | None = None

    def start_reading(self) -> None:
        self.reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        stdout = self.process.stdout
        assert stdout is not None
        while line := await stdout.readline():
            if line.find(DELTA, 0, 64) >= 0:
                turn = self.turn
                if turn is not None:
                    if not turn.received:
                        turn.first = time.monotonic()
                    turn.received += 1
                continue
            self._frame(line)
        for future in self.pending.values():
            if not future.done():
                future.set_exception(BenchError(f"{self.kind.key} closed stdout"))
        if self.turn is not None and self.turn.done is not None and not self.turn.done.done():
            self.turn.done.set_exception(BenchError(f"{self.kind.key} closed stdout mid-turn"))

    def _frame(self, line: bytes) -> None:
        now = time.monotonic()
        try:
            message = json.loads(line)
        except ValueError:
            self.notes.append(f"non-JSON stdout line: {line[:120]!r}")
            return
        method = message.get("method")
        if method is None:  # a response
            future = self.pending.pop(message.get("id"), None)
            if future is not None and not future.done():
                future.set_result(message)
            return
        if "id" in message:  # a server request: nothing here should ask
            self.notes.append(f"server request {method}; answered with an error")
            self.send({"id": message["id"], "error": {"code": -32601, "message": "bench"}})
            return
        turn = self.turn
        if turn is None or turn.done is None or turn.done.done():
            return
        params = message.get("params") or {}
        if method == "item/completed" and expected_text(turn.deltas) in _strings(params):
            turn.text_ok = True
        status = self.kind.end_status(method.encode(), params)
        if status is not None:
            turn.end = now
            turn.status = status
            if status != "completed":
                self.notes.append(f"turn ended {status}: {json.dumps(params)[:300]}")
            turn.done.set_result(None)

    def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(dumps(message) + b"\n")

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[self.next_id] = future
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        message = await asyncio.wait_for(future, CALL_TIMEOUT)
        if "error" in message:
            raise BenchError(f"{self.kind.key} {method}: {message['error']}")
        return dict(message["result"])

    async def run_turn(self, thread_id: str, deltas: int) -> Turn:
        loop = asyncio.get_running_loop()
        turn = self.turn = Turn(deltas=deltas, done=loop.create_future())
        turn.sent = time.monotonic()
        await self.call("turn/start", self.kind.turn_params(thread_id, f"BENCH_STREAM {deltas}"))
        assert turn.done is not None
        await asyncio.wait_for(turn.done, TURN_TIMEOUT)
        return turn

    def stderr_tail(self) -> str:
        with contextlib.suppress(OSError):
            return self.stderr_path.read_text(errors="replace")[-2000:]
        return ""


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


async def run_session(kind: ServerKind, model: Model, scratch: Path) -> dict[str, Any]:
    """One timed session; returns its samples (seconds, bytes) and notes."""
    session_dir = kind.fixed_dir or Path(tempfile.mkdtemp(prefix=f"{kind.key}-", dir=scratch))
    for sub in ("home", "workspace"):
        (session_dir / sub).mkdir(parents=True, exist_ok=True)
    stderr_path = session_dir / "stderr.log"
    first_request = len(model.requests)
    command = kind.command(session_dir, model.port)
    env = kind.env(session_dir, model.port)
    process: asyncio.subprocess.Process | None = None
    session: Session | None = None
    try:
        with stderr_path.open("wb") as stderr:
            t_spawn = time.monotonic()
            process = await asyncio.create_subprocess_exec(
                *command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr,
                env=env,
                cwd=session_dir / "workspace",
                limit=STREAM_LIMIT,
            )
        session = Session(kind, process, stderr_path)
        session.start_reading()
        try:
            async with asyncio.timeout(START_TIMEOUT):
                await session.call("initialize", {"clientInfo": CLIENT_INFO})
        except TimeoutError as exc:
            raise BenchError(f"{kind.key}: no initialize answer") from exc
        t_init = time.monotonic()
        session.send({"jsonrpc": "2.0", "method": "initialized"})
        t0 = time.monotonic()
        result = await session.call("thread/start", kind.thread_params(session_dir / "workspace"))
        t_thread = time.monotonic() - t0
        thread_id = result["thread"]["id"]
        turns: dict[str, Turn] = {}
        await asyncio.sleep(SETTLE)
        # Start-up: up to the thread/start answer and what the server goes on
        # doing in the background meanwhile (the settle before the first turn).
        cpu_start, _ = cpu_seconds(process.pid)
        for key, deltas in TURNS:
            turns[key] = await session.run_turn(thread_id, deltas)
            await asyncio.sleep(SETTLE)
        cpu, tree = cpu_seconds(process.pid)
        rss = max(peak_rss_mb(member) for member in [process.pid, *forked_servers(process.pid)])
        t_close = time.monotonic()
        clean_exit = await stop_process(process)
        t_exit = time.monotonic() - t_close
        stderr_tail = session.stderr_tail()
    except (BenchError, TimeoutError, OSError, KeyError) as exc:
        tail = session.stderr_tail() if session is not None else ""
        raise BenchError(f"{kind.key} session failed: {exc!r}\n--- its stderr ---\n{tail}") from exc
    finally:
        if process is not None and process.returncode is None:
            await stop_process(process, grace=1)
        if session is not None and session.reader is not None:
            with contextlib.suppress(asyncio.CancelledError, TimeoutError, BenchError):
                await asyncio.wait_for(session.reader, 5)
        if kind.fixed_dir is None:
            shutil.rmtree(session_dir, ignore_errors=True)

    notes = list(session.notes)
    for key, turn in turns.items():
        if turn.received != turn.deltas:
            notes.append(f"{key} turn: {turn.received} of {turn.deltas} deltas arrived")
        if not turn.text_ok:
            notes.append(f"{key} turn: no item/completed carried the full streamed text")
    if not clean_exit:
        notes.append(f"did not exit within {EXIT_TIMEOUT:.0f} s of stdin EOF; killed")
    requests = model.requests[first_request:]
    streams = [r for r in requests if r.get("kind") in ("chat", "responses")]
    if len(streams) != len(TURNS) or len(requests) != len(streams):
        paths = [f"{r.get('method')} {r.get('path')}" for r in requests]
        notes.append(f"model saw {len(requests)} requests: {paths}")
    return {
        "server": kind.key,
        "initialize": t_init - t_spawn,
        "thread_start": t_thread,
        "turn_first": turns["first"].end - turns["first"].sent,
        "turn_long": turns["long"].end - turns["long"].sent,
        "turn_warm": turns["warm"].end - turns["warm"].sent,
        "first_delta": turns["first"].first - turns["first"].sent,
        "first_delta_by_turn": {k: t.first - t.sent for k, t in turns.items()},
        "deltas": {k: t.received for k, t in turns.items()},
        "cpu": cpu,
        "cpu_start": cpu_start,
        "cpu_turns": cpu - cpu_start,
        "processes_at_reading": tree,
        "rss": rss,
        "exit_after_eof": t_exit,
        "model_requests": [{k: r.get(k) for k in ("method", "path", "deltas")} for r in requests],
        "notes": notes,
        "stderr_tail": stderr_tail,
    }


# --- report ------------------------------------------------------------------------------------


def machine_facts(codex_version: str, codex_binary: Path, appserver: Path) -> list[str]:
    cpu = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        ours = subprocess.run(
            [str(appserver), "--version"], capture_output=True, text=True, timeout=30
        ).stdout.strip()
    except OSError:
        ours = "?"
    return [
        f"date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"machine: {cpu}, {os.cpu_count()} CPUs ({usable} usable), "
        f"{platform.system()} {platform.release()} {platform.machine()}, "
        f"load average {os.getloadavg()[0]:.2f}",
        f"python: {sys.version.split()[0]} ({sys.executable})",
        f"codex: {codex_version}, native binary spawned directly: {codex_binary}",
        f"appserver: {ours or '?'} ({appserver})",
    ]


def fmt(value: float, unit: str) -> str:
    return f"{value * 1000:,.1f} ms" if unit == "ms" else f"{value:,.1f} MB"


def table(samples: list[dict[str, Any]], kinds: list[ServerKind], runs: int) -> str:
    """One row per figure: Codex's median, then each of ours with its ratio to Codex."""
    by = {kind.key: [s for s in samples if s["server"] == kind.key] for kind in kinds}
    reference, ours = kinds[0], kinds[1:]
    head = [f"figure (median of {runs})", reference.label]
    for kind in ours:
        head += [kind.label, "/Codex"]
    rows = [tuple(head)]
    for key, label, unit in ROWS:
        codex = statistics.median(s[key] for s in by[reference.key])
        row = [f"{label} ({unit})", fmt(codex, unit)]
        for kind in ours:
            value = statistics.median(s[key] for s in by[kind.key])
            row += [fmt(value, unit), f"{value / codex:.2f}x" if codex else "-"]
        rows.append(tuple(row))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]

    def line(row: tuple[str, ...]) -> str:
        rest = [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        cells = [row[0].ljust(widths[0]), *rest]
        return "| " + " | ".join(cells) + " |"

    rule = "|" + "|".join("-" * (w + 1) + (":" if i else "-") for i, w in enumerate(widths)) + "|"
    return "\n".join([line(rows[0]), rule, *(line(r) for r in rows[1:])])


# --- main -----------------------------------------------------------------------------------


async def bench(args: argparse.Namespace) -> int:
    codex_binary = Path(args.codex_bin) if args.codex_bin else ensure_codex()
    codex_version = binary_version(codex_binary)
    appserver = Path(args.appserver)
    if not os.access(appserver, os.X_OK):
        raise BenchError(f"{appserver} is not executable (run `make` targets to build .venv)")
    kinds = [make_codex(codex_binary, codex_version), make_appserver(appserver)]
    if not args.no_codex_face:
        kinds.append(make_codex_face(appserver.parent / "appserver-codex"))
    facts = machine_facts(codex_version, codex_binary, appserver)
    print("\n".join(facts), flush=True)

    CACHE.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="run-", dir=CACHE))  # not /tmp: Codex refuses
    warm_kinds = [warm_kind(kind, scratch) for kind in kinds[1:]] if args.warm else []
    kinds += warm_kinds
    model = Model()  # to set up its helper aliases under a temporary directory
    samples: list[dict[str, Any]] = []
    try:
        await model.start()
        for kind in kinds:  # untimed warm-up: bytecode, page cache
            warm = await run_session(kind, model, scratch)
            for note in warm["notes"]:
                print(f"warning: {kind.key} (warm-up): {note}", file=sys.stderr)
            if args.verbose:
                print(f"--- {kind.key} warm-up stderr (tail) ---\n{warm['stderr_tail']}---")
        if warm_kinds:
            await warm_parent_ready(scratch, len(warm_kinds))
        for run in range(args.runs):
            for kind in kinds:
                sample = await run_session(kind, model, scratch)
                sample["run"] = run
                samples.append(sample)
                for note in sample["notes"]:
                    print(f"warning: {kind.key} run {run + 1}: {note}", file=sys.stderr)
                if args.verbose:
                    print(
                        f"  run {run + 1} {kind.key}: "
                        + ", ".join(f"{k} {fmt(sample[k], u)}" for k, _, u in ROWS),
                        flush=True,
                    )
    finally:
        await model.stop()
        if warm_kinds:
            stop_warm_parents(scratch)
        shutil.rmtree(scratch, ignore_errors=True)

    print()
    print(table(samples, kinds, args.runs))
    print(
        "\nturns: turn/start sent -> turn/completed received; first delta: turn/start sent -> "
        "first item/agentMessage/delta.\nCPU: utime+stime of the server and its descendants "
        "(reaped children included) after the last turn, and\nbefore the first (start-up: spawn, "
        "initialize, thread/start, 0.2 s idle); RSS: the server process's VmHWM."
    )
    if args.json:
        raw = {"facts": facts, "turns": dict(TURNS), "samples": samples}
        text = json.dumps(raw, indent=2)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text + "\n")
            print(f"raw samples: {args.json}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description="appserver vs codex app-server, same client, same fake model."
    )
    parser.add_argument("--runs", type=int, default=3, help="timed sessions per server (3)")
    parser.add_argument(
        "--json", nargs="?", const="-", metavar="FILE", help="dump raw samples (stdout if no FILE)"
    )
    parser.add_argument("--codex-bin", help="a native codex binary instead of the pinned install")
    parser.add_argument("--appserver", default=str(APPSERVER), help="appserver executable")
    parser.add_argument(
        "--no-codex-face",
        action="store_true",
        help="leave out appserver-codex (our Codex face, driven as Codex is)",
    )
    parser.add_argument(
        "--warm",
        action="store_true",
        help="also run each of ours with APPSERVER_KEEP_WARM (forked by a warm parent)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="print every session")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    try:
        return asyncio.run(bench(args))
    except BenchError as exc:
        print(f"bench-peer: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
