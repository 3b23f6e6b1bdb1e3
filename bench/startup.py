"""Start-up of every door, side by side with Codex's ``codex app-server``.
Prints figures; never asserts.

    .venv/bin/python bench/startup.py --rounds 7          # needs a Codex binary, see below
    .venv/bin/python bench/startup.py --only app-server-stdio,acp --rounds 11

Spawn -> first answer, for each front door of ``appserver`` (the DotCraft
server over stdio and WebSocket, the Codex face, ACP, the Qwen stream-json
face, zot's ``rpc``, Codeswarm's ``router``) and for Codex's own app-server
(spawn -> ``initialize`` answered, the reference); a Zene one-shot end to end
(spawn -> the process exited after its one answer, as clawbridge waits),
cold and handed to a warm process (``--keep-warm``: that door keeps one
workspace and HOME across rounds, its warm-up starts the warm process, which
is stopped at the end); and ``--help`` of the command and each subcommand (spawn -> exit).

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
import dataclasses
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
from websockets.sync.client import connect  # noqa: E402  (imported once, not in a timed spawn)

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
    # One workspace and HOME for every spawn (a warm process serves one command).
    persistent: bool = False
    env: tuple[tuple[str, str], ...] = ()


def warm_door(door: Door) -> Door:
    """``door`` with APPSERVER_KEEP_WARM (appserver/warm_launch.py): its warm-up
    starts the warm parent, which forks every timed spawn."""
    return dataclasses.replace(
        door,
        key=f"{door.key}-fork",
        label=f"{door.label}, forked warm",
        persistent=True,
        env=(("APPSERVER_KEEP_WARM", "120"),),
    )


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
    Door(
        "acp", "appserver acp -> initialize", lambda ws: ["acp", *_ws()(ws)], lambda: ACP_INITIALIZE
    ),
    Door(
        "qwen",
        "Qwen stream-json -> initialize",
        lambda ws: ["--input-format", "stream-json", "--output-format", "stream-json", *_ws()(ws)],
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
        lambda ws: ["host", *_ws()(ws), "--protocol", "v1", "--bridge-compat", "--single-request"],
        zene_request,
        until="exit",
    ),
    Door(
        "zene-warm",
        "appserver host (Zene) one-shot, warm process, end to end",
        lambda ws: [
            "host",
            *_ws()(ws),
            "--protocol",
            "v1",
            "--bridge-compat",
            "--single-request",
            "--keep-warm",
            "120",
        ],
        zene_request,
        until="exit",
        persistent=True,
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


def child_env(home: Path, src: Path | None) -> dict[str, str]:
    """The environment minus what would steer a server; ``src``: the tree to run
    (its ``appserver`` package first on PYTHONPATH), else the inherited path."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("APPSERVER_", "CODEX_", "OPENAI_", "ANTHROPIC_", "RUST_LOG", "GIT_"))
        and key != "PYTHONDONTWRITEBYTECODE"
    }
    env["HOME"] = str(home)
    env["APPSERVER_PROVIDER"] = "offline"
    if src is not None:
        env["PYTHONPATH"] = f"{src}{os.pathsep}{src / 'clients' / 'python' / 'src'}"
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


def ws_initialize(process: subprocess.Popen[bytes], deadline: float) -> float:
    """Wait for the listening line on stderr, then ``initialize`` over WebSocket:
    the monotonic time its answer arrived (the close that follows is not timed: a
    server that answered before it was built finishes the close handshake after)."""
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
        answered = time.monotonic()
    if "result" not in answer:
        raise RuntimeError(f"initialize failed: {answer}")
    return answered


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
            return ws_initialize(process, deadline) - start
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


@dataclass(frozen=True)
class Spawn:
    """One thing timed in each round: a door of one tree, a --help, or Codex."""

    key: str
    command: Callable[[Path], list[str]]  # session dir -> argv
    stdin: bytes
    until: str
    src: Path | None = None
    env: dict[str, str] | None = None
    persistent: bool = False


# Where warm processes put their sockets ($XDG_RUNTIME_DIR: short, a socket's
# path has at most 107 bytes); made by main.
RUN_DIR = Path(tempfile.gettempdir()) / f"startup-run-{os.getpid()}"


def timed(scratch: Path, spawn: Spawn) -> float:
    """One spawn in a fresh session directory (its workspace is the cwd, and
    HOME), or the spawn's own one if it is persistent."""
    if spawn.persistent:
        session = scratch / f"persistent-{spawn.key}"
        session.mkdir(exist_ok=True)
    else:
        session = Path(tempfile.mkdtemp(dir=scratch))
    try:
        for sub in ("home", "workspace"):
            (session / sub).mkdir(exist_ok=True)
        env = child_env(session / "home", spawn.src) | (spawn.env or {})
        env["XDG_RUNTIME_DIR"] = str(RUN_DIR)
        command = spawn.command(session)
        if spawn.key == "codex":
            (session / "codex-home").mkdir()
            (session / "codex-home" / "config.toml").write_text(peer.codex_config(9))
            env["CODEX_HOME"] = str(session / "codex-home")
        return run_once(command, spawn.stdin, spawn.until, env, session / "workspace")
    finally:
        if not spawn.persistent:
            shutil.rmtree(session, ignore_errors=True)


def wait_for_warm(count: int) -> None:
    """Until ``count`` warm processes listen (they start after their first one-shot)."""
    deadline = time.monotonic() + TIMEOUT
    while len(list(RUN_DIR.glob("appserver/*.sock"))) < count:
        if time.monotonic() > deadline:
            raise RuntimeError("no warm process started")
        time.sleep(0.02)


def stop_warm(src: Path | None) -> None:
    """Stop the warm processes (with the tree's own client)."""
    sockets = list(RUN_DIR.glob("appserver/*.sock"))
    if sockets:
        code = (
            "import sys\nfrom appserver.faces.zene import warm\n"
            "for path in sys.argv[1:]: warm.stop(path)"
        )
        env = child_env(RUN_DIR, src)
        subprocess.run([sys.executable, "-c", code, *map(str, sockets)], env=env, check=False)
    shutil.rmtree(RUN_DIR, ignore_errors=True)


def interleaved(scratch: Path, spawns: list[Spawn], rounds: int) -> dict[str, list[float]]:
    """One untimed warm-up of each, then ``rounds`` rounds: the first spawn (the
    reference) first, the others in an order rotated each round."""
    for spawn in spawns:
        timed(scratch, spawn)
    wait_for_warm(sum(spawn.persistent for spawn in spawns))
    samples: dict[str, list[float]] = {spawn.key: [] for spawn in spawns}
    reference, rest = spawns[0], spawns[1:]
    for round_index in range(rounds):
        shift = round_index % max(1, len(rest))
        for spawn in [reference, *rest[shift:], *rest[:shift]]:
            samples[spawn.key].append(timed(scratch, spawn))
    return samples


def row(label: str, values: list[float], reference: float | None) -> str:
    median = statistics.median(values)
    ratio = f" {median / reference:.2f} |" if reference else ""
    return (
        f"| {label} | {median * 1000:.1f} ms | {min(values) * 1000:.0f}-"
        f"{max(values) * 1000:.0f} |{ratio}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds (default 7)")
    parser.add_argument("--only", help="comma-separated door keys (default: all)")
    parser.add_argument("--no-help", action="store_true", help="skip the --help timings")
    parser.add_argument("--codex-bin", help="a native codex binary (default: bench/peer.py's)")
    parser.add_argument(
        "--bin",
        type=Path,
        default=Path(sys.executable).parent,
        help="directory of the appserver scripts (default: this venv's)",
    )
    parser.add_argument("--src", type=Path, help="the tree to run (default: PYTHONPATH's)")
    parser.add_argument(
        "--warm",
        action="store_true",
        help="also time each stdio door with APPSERVER_KEEP_WARM (forked by a warm parent)",
    )
    parser.add_argument(
        "--before",
        type=Path,
        metavar="DIR",
        help="also time tree DIR, interleaved, as the 'before' column",
    )
    args = parser.parse_args()
    codex_binary = Path(args.codex_bin) if args.codex_bin else peer.ensure_codex()
    doors = [door for door in DOORS if not args.only or door.key in args.only.split(",")]
    if args.warm:
        doors += [warm_door(door) for door in doors if door.until != "ws" and not door.persistent]
    trees: list[tuple[str, Path | None]] = [("", args.src)]
    if args.before is not None:
        trees = [("before ", args.before.resolve()), ("", args.src)]
    version = peer.binary_version(codex_binary)
    print("\n".join(peer.machine_facts(version, codex_binary, args.bin / "appserver")))

    def ours(door: Door) -> Callable[[Path], list[str]]:
        return lambda session: [str(args.bin / door.script), *door.argv(session / "workspace")]

    spawns = [
        Spawn("codex", lambda session: [str(codex_binary), "app-server"], RPC_INITIALIZE, "line")
    ]
    for door in doors:
        spawns += [
            Spawn(
                tag + door.key,
                ours(door),
                door.stdin(),
                door.until,
                src,
                env=dict(door.env),
                persistent=door.persistent,
            )
            for tag, src in trees
        ]
    helps: list[Spawn] = []
    if not args.no_help:
        for words in HELP:
            command = [str(args.bin / "appserver"), *words, "--help"]
            label = " ".join(("appserver", *words, "--help"))
            helps += [
                Spawn(tag + label, lambda session, c=command: c, b"", "exit", src)
                for tag, src in trees
            ]
    peer.CACHE.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="startup-", dir=peer.CACHE))
    RUN_DIR.mkdir(mode=0o700)
    try:
        samples = interleaved(scratch, spawns, args.rounds)
        help_samples = interleaved(scratch, helps, args.rounds) if helps else {}
    finally:
        stop_warm(args.src)
        shutil.rmtree(scratch, ignore_errors=True)
    codex = statistics.median(samples["codex"])
    print(f"\nspawn -> first answer, median of {args.rounds} rounds (min-max), ours/Codex:\n")
    print("| door | median | min-max | ours/Codex |\n|---|--:|--:|--:|")
    print(row("Codex app-server (reference) -> initialize", samples["codex"], codex))
    for door in doors:
        for tag, _ in trees:
            if tag + door.key in samples:
                print(row(tag + door.label, samples[tag + door.key], codex))
    if help_samples:
        print(f"\n--help, spawn -> exit, median of {args.rounds} (min-max):\n")
        print("| command | median | min-max |\n|---|--:|--:|")
        for key, values in help_samples.items():
            print(row(f"`{key}`", values, None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
