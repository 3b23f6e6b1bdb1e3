"""``appserver-codex exec --experimental-json``, run as ``@openai/codex-sdk`` runs it
(one process per turn, the prompt on stdin, the SDK's argv), checked line by line
against the JSONL shapes Codex 0.169 writes (the research's ``transcripts-ts-exec``).
The offline model makes every turn deterministic."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio

from tests.support.servers import child_env

SDK_FLAGS = ["--sandbox", "workspace-write", "--skip-git-repo-check"]
USAGE_KEYS = {
    "input_tokens",
    "cached_input_tokens",
    "cache_write_input_tokens",
    "output_tokens",
    "reasoning_output_tokens",
}


def _command(workspace: Path, *extra: str) -> list[str]:
    script = Path(sys.executable).parent / "appserver-codex"
    assert script.exists(), "the appserver-codex console script is not installed (make)"
    return [str(script), "exec", "--experimental-json", *SDK_FLAGS, "--cd", str(workspace), *extra]


def _env() -> dict[str, str]:
    env = child_env()
    env["APPSERVER_PROVIDER"] = "offline"
    env["CODEX_INTERNAL_ORIGINATOR_OVERRIDE"] = "codex_sdk_ts"
    return env


def run_exec(workspace: Path, prompt: str, *extra: str) -> tuple[int, list[dict[str, Any]], str]:
    done = subprocess.run(
        _command(workspace, *extra),
        input=prompt.encode(),
        capture_output=True,
        env=_env(),
        timeout=60,
        check=False,
    )
    events = [json.loads(line) for line in done.stdout.decode().splitlines()]
    return done.returncode, events, done.stderr.decode()


def _items(events: list[dict[str, Any]], kind: str, item_type: str) -> list[dict[str, Any]]:
    return [e["item"] for e in events if e["type"] == kind and e["item"]["type"] == item_type]


def test_a_new_thread_answers_as_codex_exec_does(workspace: Path) -> None:
    code, events, _ = run_exec(workspace, "hello there")
    assert code == 0
    assert [e["type"] for e in events] == [
        "thread.started",
        "turn.started",
        "item.completed",
        "turn.completed",
    ]
    assert set(events[0]) == {"type", "thread_id"} and events[0]["thread_id"]
    assert events[1] == {"type": "turn.started"}
    assert events[2]["item"] == {
        "id": "item_0",
        "type": "agent_message",
        "text": "You said: hello there",
    }
    usage = events[3]["usage"]
    assert set(usage) == USAGE_KEYS and usage["input_tokens"] > 0 and usage["output_tokens"] > 0


def test_resume_continues_the_thread_with_a_command_and_running_totals(workspace: Path) -> None:
    _, first, _ = run_exec(workspace, "hello")
    thread_id = first[0]["thread_id"]
    code, events, _ = run_exec(workspace, "!echo hi-$((6*7))", "resume", thread_id)
    assert code == 0
    assert events[0] == {"type": "thread.started", "thread_id": thread_id}
    started = _items(events, "item.started", "command_execution")
    completed = _items(events, "item.completed", "command_execution")
    assert started == [
        {
            "id": "item_0",
            "type": "command_execution",
            "command": "echo hi-$((6*7))",
            "aggregated_output": "",
            "exit_code": None,
            "status": "in_progress",
        }
    ]
    assert completed == [
        {**started[0], "aggregated_output": "hi-42\n", "exit_code": 0, "status": "completed"}
    ]
    assert _items(events, "item.completed", "agent_message")[0]["id"] == "item_1"
    # Codex reports the thread's totals so far: the second turn adds to the first.
    before, after = first[-1]["usage"], events[-1]["usage"]
    assert after["input_tokens"] > before["input_tokens"]

    async def stored() -> Any:
        from appserver.hosting import HostOptions, open_host

        async with open_host(HostOptions(workspace=workspace)) as runtime:
            record = await runtime.threads.get(thread_id)
            view = await runtime.threads.view(record, include_turns=True)
            return record, view.thread.turns

    record, turns = anyio.run(stored)
    assert record.origin_channel == "codex"  # an ordinary thread, listed by every face
    assert [turn.status for turn in turns] == ["completed", "completed"]


def test_a_file_write_and_a_plan(workspace: Path) -> None:
    _, events, _ = run_exec(workspace, ">notes.txt\nline one")
    assert _items(events, "item.completed", "file_change") == [
        {
            "id": "item_0",
            "type": "file_change",
            "changes": [{"path": "notes.txt", "kind": "add"}],
            "status": "completed",
        }
    ]
    assert (workspace / "notes.txt").read_text() == "line one\n"
    assert not _items(events, "item.started", "file_change")  # exec shows it once, applied

    _, events, _ = run_exec(workspace, "?plan Ship it")
    todo = [
        {"text": t, "completed": False}
        for t in ("Read the code", "Make the change", "Run the tests")
    ]
    assert _items(events, "item.started", "todo_list") == [
        {"id": "item_1", "type": "todo_list", "items": todo}
    ]
    assert _items(events, "item.completed", "todo_list")[0]["items"] == todo
    call = _items(events, "item.completed", "mcp_tool_call")[0]
    assert (call["server"], call["tool"], call["status"]) == (
        "appserver",
        "CreatePlan",
        "completed",
    )
    assert call["result"]["content"][0]["text"].startswith("Plan created.")


def test_a_failed_turn_is_turn_failed_and_exit_1(workspace: Path) -> None:
    code, events, _ = run_exec(workspace, "?fail other boom")
    assert code == 1
    assert events[-1] == {
        "type": "turn.failed",
        "error": {"message": "model provider error (other): boom"},
    }


def test_nobody_to_ask_so_gated_calls_are_declined(workspace: Path) -> None:
    code, events, _ = run_exec(workspace, "!touch made", "--config", 'approval_policy="untrusted"')
    assert code == 0
    command = _items(events, "item.completed", "command_execution")[0]
    assert command["status"] == "failed" and command["exit_code"] is None
    assert not (workspace / "made").exists()
    _, events, _ = run_exec(workspace, ">notes.txt\nx", "--sandbox", "read-only")
    assert _items(events, "item.completed", "file_change")[0]["status"] == "failed"
    assert not (workspace / "notes.txt").exists()
    # The default (Codex exec's `never`): inside the workspace unasked, outside declined.
    _, events, _ = run_exec(workspace, ">../outside.txt\nx")
    assert _items(events, "item.completed", "file_change")[0]["status"] == "failed"
    assert not (workspace.parent / "outside.txt").exists()


def test_refusals_go_to_stderr_with_a_nonzero_exit(workspace: Path) -> None:
    code, events, stderr = run_exec(workspace, "hi", "resume", "no-such-thread")
    assert (code, events) == (1, [])
    assert "no thread no-such-thread" in stderr
    done = subprocess.run(
        [str(Path(sys.executable).parent / "appserver-codex"), "exec", "--cd", str(workspace)],
        input=b"hi",
        capture_output=True,
        env=_env(),
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and done.stdout == b""


def test_sigterm_interrupts_the_turn_and_leaves_the_thread_idle(workspace: Path) -> None:
    with subprocess.Popen(
        _command(workspace),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=_env(),
    ) as process:
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(b"?stream 200\n?delay 100")
        process.stdin.close()
        thread = json.loads(process.stdout.readline())
        assert json.loads(process.stdout.readline()) == {"type": "turn.started"}
        process.send_signal(signal.SIGTERM)  # what the SDK's AbortSignal does
        rest = [json.loads(line) for line in process.stdout.read().decode().splitlines()]
        assert process.wait(timeout=30) == 1
    assert rest[-1] == {"type": "turn.failed", "error": {"message": "turn interrupted"}}

    async def turns() -> list[str]:
        from appserver.hosting import HostOptions, open_host

        async with open_host(HostOptions(workspace=workspace)) as runtime:
            record = await runtime.threads.get(thread["thread_id"])
            view = await runtime.threads.view(record, include_turns=True)
            return [turn.status for turn in view.thread.turns]

    assert anyio.run(turns) == ["cancelled"]


async def test_the_end_is_written_once_the_runtime_is_done_with_the_turn(tmp_path: Path) -> None:
    """The SDK kills the process, and its user may remove the workspace, as soon as
    it reads turn.failed: the runtime's last work on the turn (its thread set idle,
    a failed turn's queue paused under the thread's lock file in .craft/) comes first."""
    from types import SimpleNamespace
    from typing import cast

    from appserver.faces.codex import exec_run
    from appserver.faces.codex.exec_output import FinalAnswer
    from appserver.runtime.events import Event

    turn = SimpleNamespace(id="turn_001", error="boom")
    end = Event("turn/failed", cast(Any, SimpleNamespace(turn=turn, error="boom")), thread_id="t")

    class OneEnd:
        async def events(self) -> Any:
            yield end

    written: list[dict[str, Any]] = []
    active = SimpleNamespace(record=SimpleNamespace(id="turn_001"), done=anyio.Event())
    others = anyio.Event()  # a SubAgent's turn, still running

    async def shutdown() -> None:
        await others.wait()

    runtime = SimpleNamespace(
        threads=SimpleNamespace(workspace=tmp_path), engine=SimpleNamespace(shutdown=shutdown)
    )
    answer = FinalAnswer(written.append, None, None)
    codes: list[int] = []

    async def follow() -> None:
        seat = cast(Any, OneEnd())
        codes.append(await exec_run._follow(seat, "t", active, runtime, (0, 0), answer))

    async with anyio.create_task_group() as tg:
        tg.start_soon(follow)
        await anyio.wait_all_tasks_blocked()
        assert written == []  # the end waits for the runtime
        active.done.set()
        await anyio.wait_all_tasks_blocked()
        assert written == []  # and for the turns it leaves
        others.set()
    assert codes == [1]
    assert written == [{"type": "turn.failed", "error": {"message": "boom"}}]


def test_a_float_json_has_no_form_for_is_null_in_the_events(workspace: Path) -> None:
    # The model's tool arguments are parsed leniently (NaN reads as a float): the
    # JSONL the SDK parses with JSON.parse must stay JSON.
    code, events, _ = run_exec(workspace, '?tool no_such_tool {"a": NaN, "b": [Infinity]}')
    assert code == 0
    lines = [json.dumps(event) for event in events]
    assert not any("NaN" in line or "Infinity" in line for line in lines)
    calls = [e["item"] for e in events if e["type"] == "item.completed"]
    assert any(call.get("arguments") == {"a": None, "b": [None]} for call in calls), calls
