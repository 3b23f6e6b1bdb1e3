"""Instructions each door's start costs, counted by valgrind: an A/B that this
noisy machine cannot blur. Prints figures; never asserts.

    .venv/bin/python bench/instructions.py                 # this tree
    .venv/bin/python bench/instructions.py --src DIR       # beside another tree (DIR/appserver)
    .venv/bin/python bench/instructions.py --only oneshot  # one figure (repeatable)

Timing a ~300 ms start on this 2-core machine moves 10-20 % from one minute
to the next, so a change worth 5 % needs dozens of alternated runs to show.
The number of instructions a process executes barely moves (a few in ten
thousand between runs): each figure here is valgrind's ``I refs``
(``--tool=cachegrind --cache-sim=no``) for one whole process of the command,
the Python interpreter included. Roughly 3.5-4 G instructions are a second of
CPU here, so 10 M is ~3 ms. The process runs ~30x slower under valgrind, so
only starts and short sessions are counted:

- ``floor``: ``python -c pass``, the interpreter alone;
- ``help``: ``appserver --help``;
- ``oneshot``: a Zene one-shot (``appserver host --protocol v1 --bridge-compat
  --single-request``), offline model, a new session on a workspace that a first,
  uncounted run created;
- ``dotcraft``: ``appserver app-server`` on a new workspace and home:
  ``initialize``, ``thread/start`` and one offline turn, then end of input;
- ``codex``: the same through ``appserver-codex app-server``;
- ``turn``: what each further ``thread/start`` and short turn of a DotCraft session
  costs (the fixed cost of a turn, one client, one after another): a session of
  ``1 + TURNS`` of them less a session of one, divided by ``TURNS``;
- ``deltas``: the DotCraft door's session with the OpenAI provider pointed at
  ``bench/peer_model.py`` (in its own process, not counted), one turn of 2,000
  deltas: the cost of streaming, HTTP included (the start is ``dotcraft``'s,
  plus the HTTP library).

A count compares only work whose amount does not depend on how fast the
process runs. A start does not; a stream partly does (the shared log writes and
delivers what queued meanwhile, and under valgrind much more queues), so an A/B
of ``deltas`` is a hint, not a measure.

Each command runs once without valgrind first (bytecode, the dataclass
methods' file). PYTHONDONTWRITEBYTECODE is removed from the children's
environment, as users run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 600.0
REFS = re.compile(r"I\s+refs:\s+([\d,]+)")
FIGURES = ("floor", "help", "oneshot", "dotcraft", "codex", "turn", "deltas")
DELTAS = 2000
TURNS = 20  # the turn figure's further thread starts and turns


def child_env(src: Path, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("APPSERVER_", "PYTHON"))}
    env.update(PYTHONPATH=str(src), HOME=str(home), APPSERVER_PROVIDER="offline")
    return env


def counted(command: list[str], scratch: Path) -> list[str]:
    log = scratch / f"valgrind-{uuid.uuid4().hex}.log"
    return [
        "valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
        f"--log-file={log}", *command,
    ]  # fmt: skip


def refs_of(command: list[str]) -> int:
    log = Path(next(arg for arg in command if arg.startswith("--log-file="))[len("--log-file=") :])
    found = REFS.search(log.read_text())
    if found is None:
        raise RuntimeError(f"no instruction count in {log}:\n{log.read_text()[-2000:]}")
    return int(found.group(1).replace(",", ""))


def oneshot_request() -> bytes:
    body = {
        "protocol_version": 1,
        "type": "run",
        "request_id": str(uuid.uuid4()),
        "session_id": f"bench-{uuid.uuid4().hex[:8]}",
        "channel_id": "bench",
        "agent": "default",
        "prompt": "hello",
        "timeout_ms": 600000,
    }
    return json.dumps(body).encode() + b"\n"


def run_plain(command: list[str], env: dict[str, str], cwd: Path, stdin: bytes) -> None:
    done = subprocess.run(
        command, input=stdin, capture_output=True, env=env, cwd=cwd, timeout=TIMEOUT
    )
    if done.returncode != 0:
        raise RuntimeError(f"{command[:4]} exited {done.returncode}: {done.stderr[-2000:]!r}")


def session(
    command: list[str],
    env: dict[str, str],
    cwd: Path,
    thread_params: dict[str, object],
    prompt: str = "hello",
    turns: int = 1,
) -> None:
    """``initialize``, then ``turns`` times ``thread/start`` and a turn on that
    thread, then end of input; waits for the exit."""
    process = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        env=env, cwd=cwd,
    )  # fmt: skip
    assert process.stdin is not None and process.stdout is not None
    stdin, stdout = process.stdin, process.stdout

    def send(message: dict[str, object]) -> None:
        stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
        stdin.flush()

    def wait_for(test: Callable[[dict[str, object]], bool]) -> dict[str, object]:
        while line := stdout.readline():
            message = json.loads(line)
            if "id" in message and "method" in message:  # a server request: none expected
                send({"id": message["id"], "error": {"code": -32601, "message": "bench"}})
            elif test(message):
                return dict(message)
        raise RuntimeError(f"{command[:4]} closed its output")

    try:
        send(
            {
                "id": 1,
                "method": "initialize",
                "params": {"clientInfo": {"name": "bench", "version": "1"}},
            }
        )
        wait_for(lambda message: message.get("id") == 1)
        send({"method": "initialized"})
        for number in range(turns):
            ask = 2 + 2 * number
            send({"id": ask, "method": "thread/start", "params": thread_params})
            answer = wait_for(lambda message: message.get("id") == ask)  # noqa: B023
            thread = answer["result"]["thread"]["id"]  # type: ignore[index]
            text = [{"type": "text", "text": prompt}]
            turn = {"threadId": thread, "input": text}
            send({"id": ask + 1, "method": "turn/start", "params": turn})
            wait_for(lambda message: message.get("method") in ("turn/completed", "turn/failed"))
        stdin.close()
        process.wait(TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


class Model:
    """bench/peer_model.py in a process of its own (its port, once it listens)."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "peer_model.py"), "--port", "0"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        assert self.process.stdout is not None
        self.port = int(json.loads(self.process.stdout.readline())["port"])

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(30)


def measure(figure: str, src: Path, scratch: Path, model: Model) -> int:
    """Instructions of one counted run of ``figure`` with ``src``'s appserver."""
    python = sys.executable
    tree = scratch / uuid.uuid4().hex
    home, workspace = tree / "home", tree / "workspace"
    home.mkdir(parents=True)
    workspace.mkdir()
    env = child_env(src, home)
    appserver = [python, "-c", "import sys; from appserver.launch import main; sys.exit(main())"]
    codex = [
        python,
        "-c",
        "import sys; from appserver.launch import codex_main; sys.exit(codex_main())",
    ]
    run: Callable[[list[str]], None]
    if figure in ("floor", "help", "oneshot"):
        base, stdin = {
            "floor": ([python, "-c", "pass"], b""),
            "help": ([*appserver, "--help"], b""),
            "oneshot": (
                [*appserver, "host", "--protocol", "v1", "--bridge-compat", "--single-request"],
                oneshot_request(),
            ),
        }[figure]

        def run(prefix: list[str]) -> None:
            run_plain([*prefix, *base], env, workspace, stdin)

    elif figure == "turn":
        return (count_session(src, scratch, 1 + TURNS) - count_session(src, scratch, 1)) // TURNS
    elif figure in ("dotcraft", "codex", "deltas"):
        entry = codex if figure == "codex" else appserver
        provider = []
        prompt = "hello"
        if figure == "deltas":
            base_url = f"http://127.0.0.1:{model.port}/v1"
            provider = ["--provider", "openai", "--base-url", base_url, "--model", "fake-model"]
            prompt = f"BENCH_STREAM {DELTAS}"
        params: dict[str, object] = (
            {} if figure == "codex" else {"identity": {"channelName": "bench", "userId": "u"}}
        )

        def run(prefix: list[str]) -> None:
            # A new workspace and home each session, as bench/peer.py's.
            where = scratch / uuid.uuid4().hex
            (where / "home").mkdir(parents=True)
            (where / "workspace").mkdir()
            base = [*entry, "app-server", "--workspace", str(where / "workspace"), *provider]
            env = child_env(src, where / "home")
            env["OPENAI_API_KEY"] = "sk-bench"
            session([*prefix, *base], env, where / "workspace", params, prompt)

    else:
        raise ValueError(figure)
    run([])  # uncounted: bytecode, the dataclass methods' file, a workspace's database
    command_prefix = counted([], scratch)
    run(command_prefix)
    return refs_of(command_prefix)


def count_session(src: Path, scratch: Path, turns: int) -> int:
    """Instructions of a DotCraft session (offline model) of ``turns`` thread
    starts and turns, on a workspace an uncounted session of as many created."""
    python = sys.executable
    entry = [python, "-c", "import sys; from appserver.launch import main; sys.exit(main())"]
    where = scratch / uuid.uuid4().hex
    (where / "home").mkdir(parents=True)
    (where / "workspace").mkdir()
    base = [*entry, "app-server", "--workspace", str(where / "workspace")]
    env = child_env(src, where / "home")
    params: dict[str, object] = {"identity": {"channelName": "bench", "userId": "u"}}
    session(base, env, where / "workspace", params, turns=turns)  # uncounted
    prefix = counted([], scratch)
    session([*prefix, *base], env, where / "workspace", params, turns=turns)
    return refs_of(prefix)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, help="also count another tree (DIR/appserver)")
    parser.add_argument("--only", action="append", choices=FIGURES, help="one figure (repeatable)")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        print("valgrind is not installed; nothing to count", file=sys.stderr)
        raise SystemExit(2)
    trees = [ROOT] + ([args.src.resolve()] if args.src else [])
    print(f"python {sys.version.split()[0]}; instructions (valgrind I refs), millions")
    header = f"{'figure':<10}" + "".join(f"{str(tree)[-24:]:>26}" for tree in trees)
    print(header + ("   this/other" if len(trees) == 2 else ""))
    model = Model()
    with tempfile.TemporaryDirectory(prefix="bench-instructions-") as scratch:
        for figure in args.only or FIGURES:
            counts = [measure(figure, tree, Path(scratch), model) for tree in trees]
            row = f"{figure:<10}" + "".join(f"{count / 1e6:>26,.1f}" for count in counts)
            if len(counts) == 2:
                row += f"   {counts[0] / counts[1]:>10.3f}"
            print(row, flush=True)
    model.close()


if __name__ == "__main__":
    main()
