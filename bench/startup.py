"""Start-up of every door, side by side with Codex's ``codex app-server``.
Prints figures; never asserts.

    .venv/bin/python bench/startup.py --rounds 7          # needs a Codex binary, see below
    .venv/bin/python bench/startup.py --only app-server-stdio,acp --rounds 11

Spawn -> first answer, for each front door of ``appserver`` (the DotCraft
server over stdio and WebSocket, the Codex face, ACP, the Qwen stream-json
face, zot's ``rpc``, Codeswarm's ``router``) and for Codex's own app-server
(spawn -> ``initialize`` answered, the reference); a Zene one-shot end to end
(spawn -> the process exited after its one answer, as clawbridge waits);
and ``--help`` of the command and each subcommand (spawn -> exit).

Each spawn gets a fresh workspace and HOME (so every door creates its
database, as the first start in a directory does), the offline model,
PYTHONDONTWRITEBYTECODE removed (users' machines write bytecode) and the
APPSERVER_* variables cleared. One untimed warm-up of each door comes first.
Rounds then interleave the doors (Codex first in each round, the doors in
a rotated order), so a burst of load from elsewhere hits them alike;
figures are medians over rounds, the ratio is ours/Codex of those medians.
The first answer is the first complete line on stdout (for WebSocket, the
``initialize`` answer on a connection opened as soon as the server printed
its address). Clocks: time.monotonic; every wait is bounded.

Codex: ``--codex-bin`` or the pinned ``@openai/codex`` that ``bench/peer.py``
installs (bench/.cache/codex); its configuration is peer.py's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import peer  # noqa: E402  (bench/peer.py: Codex's install and configuration)

TIMEOUT = 60.0
CLIENT_INFO = {"name": "bench-startup", "version": "1"}


def line(message: dict[str, object]) -> bytes:
    return (json.dumps(message, separators=(",", ":")) + "\n").encode()


RPC_INITIALIZE = line(
    {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"clientInfo": CLIENT_INFO}}
)
ACP_INITIALIZE = line(
    {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": 1,
            "clientCapabilities": {"fs": {"readTextFile": True, "writeTextFile": True}},
        },
    }
)
QWEN_INITIALIZE = line(
    {"type": "control_request", "request_id": "1", "request": {"subtype": "initialize"}}
)
ZOT_HELLO = line({"id": "1", "type": "hello"})
ROUTER_FIRST = line(
    {
        "protocol": "codeswarm.router.v1",
        "type": "command",
        "command": "providers_list",
        "request_id": "1",
        "timestamp": "2026-01-01T00:00:00Z",
        "payload": {},
    }
)


def zene_request() -> bytes:
    """The line clawbridge writes for one message (bench/zene_oneshot.py's)."""
    import zene_oneshot

    return zene_oneshot.request("bench_startup", "hello")


@dataclass(frozen=True)
class Door:
    """One thing to time: the command after the executable, what is written
    to its stdin, and what counts as answered ("line": the first stdout line;
    "exit": the process's exit; "ws": WebSocket ``initialize``)."""

    key: str
    label: str
    argv: Callable[[Path], list[str]]  # workspace -> arguments
    stdin: Callable[[], bytes]
    until: str = "line"
    script: str = "appserver"


def _ws(flag: str = "--workspace") -> Callable[[Path], list[str]]:
    return lambda workspace: [flag, str(workspace)]


DOORS = (
    Door(
        "app-server-stdio",
        "appserver app-server (stdio) -> initialize",
        lambda ws: ["app-server", *_ws()(ws)],
        lambda: RPC_INITIALIZE,
    ),
    Door(
        "app-server-ws",
        "appserver app-server (ws) -> initialize",
        lambda ws: ["app-server", "--listen", "ws://127.0.0.1:0", *_ws()(ws)],
        lambda: RPC_INITIALIZE,
        until="ws",
    ),
    Door(
        "codex-face",
        "appserver-codex app-server -> initialize",
        lambda ws: ["app-server"],
        lambda: RPC_INITIALIZE,
        script="appserver-codex",
    ),
    Door("acp", "appserver acp -> initialize", lambda ws: ["acp", *_ws()(ws)], lambda: ACP_INITIALIZE),
    Door(
        "qwen",
        "Qwen stream-json -> initialize",
        lambda ws: [
            "--input-format", "stream-json", "--output-format", "stream-json", *_ws()(ws)
        ],  # fmt: skip
        lambda: QWEN_INITIALIZE,
    ),
    Door("zot", "appserver rpc (zot) -> hello", lambda ws: ["rpc", *_ws()(ws)], lambda: ZOT_HELLO),
    Door(
        "router",
        "appserver router (Codeswarm) -> providers_list",
        lambda ws: ["router", *_ws()(ws)],
        lambda: ROUTER_FIRST,
    ),
    Door(
        "zene",
        "appserver host (Zene) one-shot, end to end",
        lambda ws: [
            "host", *_ws()(ws), "--protocol", "v1", "--bridge-compat", "--single-request"
        ],  # fmt: skip
        zene_request,
        until="exit",
    ),
)

HELP = (
    (),
    ("app-server",),
    ("acp",),
    ("host",),
    ("rpc",),
    ("router",),
    ("codex",),
    ("schema",),
)


def child_env(home: Path) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("APPSERVER_", "CODEX_", "OPENAI_", "ANTHROPIC_", "RUST_LOG", "GIT_"))
        and key != "PYTHONDONTWRITEBYTECODE"
    }
    env["HOME"] = str(home)
    env["APPSERVER_PROVIDER"] = "offline"
    return env


def read_line(stream: int, deadline: float) -> bytes:
    """Bytes from ``stream`` up to the first newline (or EOF, or the deadline)."""
    buffer = b""
    while b"\n" not in buffer:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no answer")
        ready, _, _ = select.select([stream], [], [], left)
        if ready:
            chunk = os.read(stream, 65536)
            if not chunk:
                break
            buffer += chunk
    return buffer


def ws_initialize(process: subprocess.Popen[bytes], deadline: float) -> None:
    """Wait for the listening line on stderr, then ``initialize`` over WebSocket."""
    from websockets.sync.client import connect

    assert process.stderr is not None
    prefix = b"appserver: listening on "
    text = b""
    while prefix not in text:
        chunk = read_line(process.stderr.fileno(), deadline)
        if not chunk:
            raise RuntimeError("the server exited before listening")
        text += chunk
    address = text[text.index(prefix) + len(prefix) :].split(b"\n", 1)[0].decode()
    with connect(address, open_timeout=TIMEOUT) as client:
        client.send(RPC_INITIALIZE.decode())
        answer = json.loads(client.recv(timeout=TIMEOUT))
    if "result" not in answer:
        raise RuntimeError(f"initialize failed: {answer}")


def run_once(command: list[str], stdin: bytes, until: str, env: dict[str, str], cwd: Path) -> float:
    """Seconds from spawn to the answer (see Door.until)."""
    start = time.monotonic()
    process = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE if until == "ws" else subprocess.DEVNULL,
        env=env,
        cwd=cwd,
    )
    deadline = start + TIMEOUT
    try:
        assert process.stdin is not None and process.stdout is not None
        if until == "ws":
            ws_initialize(process, deadline)
            return time.monotonic() - start
        process.stdin.write(stdin)
        if until == "exit":
            process.stdin.close()
            output = process.stdout.read()
            process.wait(TIMEOUT)
            elapsed = time.monotonic() - start
            if process.returncode != 0 or not output:
                raise RuntimeError(f"exit {process.returncode}, stdout {output[:200]!r}")
            return elapsed
        process.stdin.flush()
        answer = read_line(process.stdout.fileno(), deadline)
        elapsed = time.monotonic() - start
        if not answer.endswith(b"\n"):
            raise RuntimeError(f"no answer line: {answer[:200]!r}")
        return elapsed
    finally:
        with contextlib.suppress(OSError, ValueError):
            assert process.stdin is not None
            process.stdin.close()
        if until == "ws":
            process.terminate()  # a WebSocket server stops on a signal, not on EOF
        try:
            process.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def timed(
    scratch: Path, command: Callable[[Path, Path], list[str]], stdin: bytes, until: str
) -> float:
    """One spawn in a fresh session directory (workspace + home)."""
    session = Path(tempfile.mkdtemp(dir=scratch))
    try:
        (session / "home").mkdir()
        (session / "workspace").mkdir()
        env = child_env(session / "home")
        return run_once(command(session, session / "workspace"), stdin, until, env,
                        session / "workspace")  # fmt: skip
    finally:
        shutil.rmtree(session, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds (default 7)")
    parser.add_argument("--only", help="comma-separated door keys (default: all)")
    parser.add_argument("--no-help", action="store_true", help="skip the --help timings")
    parser.add_argument("--codex-bin", help="a native codex binary (default: bench/peer.py's)")
    parser.add_argument("--bin", type=Path, default=Path(sys.executable).parent,
                        help="directory of the appserver scripts (default: this venv's)")  # fmt: skip
    args = parser.parse_args()
    codex_binary = Path(args.codex_bin) if args.codex_bin else peer.ensure_codex()
    doors = [door for door in DOORS if not args.only or door.key in args.only.split(",")]
    peer.CACHE.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="startup-", dir=peer.CACHE))

    def ours(door: Door) -> Callable[[Path, Path], list[str]]:
        return lambda session, workspace: [str(args.bin / door.script), *door.argv(workspace)]

    # "env CODEX_HOME=..." adds an exec; the reference is timed the same way as peer.py
    # (the binary directly), so the variable is passed through the environment instead.
    def codex(session: Path, workspace: Path) -> list[str]:
        home = session / "codex-home"
        home.mkdir()
        (home / "config.toml").write_text(peer.codex_config(9))
        os.environ["CODEX_HOME"] = str(home)
        return [str(codex_binary), "app-server"]

    samples: dict[str, list[float]] = {"codex": []}
    try:
        version = peer.binary_version(codex_binary)
        facts = peer.machine_facts(version, codex_binary, args.bin / "appserver")
        print("\n".join(facts))
        runs: list[tuple[str, Callable[[Path, Path], list[str]], bytes, str]] = [
            ("codex", codex, RPC_INITIALIZE, "line"),
            *((door.key, ours(door), door.stdin(), door.until) for door in doors),
        ]
        for key, command, stdin, until in runs:  # warm-up: bytecode, page cache
            timed(scratch, command, stdin, until)
        for round_index in range(args.rounds):
            rotated = runs[1:][round_index % max(1, len(runs) - 1) :] + runs[1:][
                : round_index % max(1, len(runs) - 1)
            ]
            for key, command, stdin, until in [runs[0], *rotated]:
                samples.setdefault(key, []).append(timed(scratch, command, stdin, until))
        help_samples: dict[str, list[float]] = {}
        if not args.no_help:
            for round_index in range(args.rounds):
                for words in HELP:
                    label = " ".join(("appserver", *words, "--help"))
                    command = [str(args.bin / "appserver"), *words, "--help"]
                    help_samples.setdefault(label, []).append(
                        timed(scratch, lambda session, workspace, c=command: c, b"", "exit")
                    )
    finally:
        os.environ.pop("CODEX_HOME", None)
        shutil.rmtree(scratch, ignore_errors=True)
    codex_median = statistics.median(samples["codex"])
    print(f"\nspawn -> first answer, median of {args.rounds} rounds (min-max):\n")
    print(f"| door | median | min-max | ours/Codex |\n|---|--:|--:|--:|")
    print(f"| Codex app-server (reference) -> initialize | {codex_median * 1000:.1f} ms | "
          f"{min(samples['codex']) * 1000:.0f}-{max(samples['codex']) * 1000:.0f} | 1.00 |")  # fmt: skip
    for door in doors:
        values = samples[door.key]
        median = statistics.median(values)
        print(f"| {door.label} | {median * 1000:.1f} ms | {min(values) * 1000:.0f}-"
              f"{max(values) * 1000:.0f} | {median / codex_median:.2f} |")  # fmt: skip
    if help_samples:
        print(f"\n--help, spawn -> exit, median of {args.rounds}:\n")
        print("| command | median | min-max |\n|---|--:|--:|")
        for label, values in help_samples.items():
            print(f"| `{label}` | {statistics.median(values) * 1000:.1f} ms | "
                  f"{min(values) * 1000:.0f}-{max(values) * 1000:.0f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
