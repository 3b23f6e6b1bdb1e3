"""The shell tool: output, exit codes, streaming, caps, timeout and cancellation."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from appserver.tools.base import ToolContext, ToolError, ToolOutcome
from appserver.tools.shell import ShellTool


def make_ctx(workspace: Path, on_output: Callable[[str], None] | None = None) -> ToolContext:
    return ToolContext(
        workspace=workspace, thread_id="thr", turn_id="turn", call_id="call", on_output=on_output
    )


async def call(
    tool: ShellTool,
    workspace: Path,
    on_output: Callable[[str], None] | None = None,
    **arguments: Any,
) -> ToolOutcome:
    ctx = make_ctx(workspace, on_output)
    return await tool.run(tool.plan(arguments, ctx), ctx)


def running(pid: int) -> bool:
    """Alive and not a zombie (this sandbox's init does not reap orphans)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return False
    return stat[stat.rindex(b")") + 2 :].split()[0] not in (b"Z", b"X")


async def test_output_and_exit_code(workspace: Path) -> None:
    outcome = await call(ShellTool(), workspace, command="echo out; echo err >&2")
    assert outcome.success
    assert outcome.output == "exit code: 0\nout\nerr\n"
    assert outcome.details["exit_code"] == 0
    assert outcome.details["working_directory"] == os.path.realpath(workspace)
    assert outcome.details["truncated"] is False
    assert outcome.details["timed_out"] is False
    assert isinstance(outcome.details["duration_ms"], int)


async def test_nonzero_exit_is_a_failed_but_completed_call(workspace: Path) -> None:
    # Decision: a non-zero exit is success=False, with the output, not an error.
    outcome = await call(ShellTool(), workspace, command="echo oops; exit 3")
    assert not outcome.success
    assert outcome.output == "exit code: 3\noops\n"
    assert outcome.details["exit_code"] == 3


async def test_no_output_and_empty_stdin(workspace: Path) -> None:
    # stdin is /dev/null: `cat` must not hang waiting for input.
    outcome = await call(ShellTool(), workspace, command="cat")
    assert outcome.output == "exit code: 0\n(no output)"


async def test_killed_by_signal_is_named(workspace: Path) -> None:
    outcome = await call(ShellTool(), workspace, command="kill -KILL $$")
    assert not outcome.success
    assert outcome.output.startswith("exit code: -9 (killed by SIGKILL)\n")


async def test_workdir_and_approval(workspace: Path) -> None:
    (workspace / "sub").mkdir()
    tool = ShellTool()
    # The approval's shape, for commands that would otherwise run unasked
    # (tests/tools/test_safe_commands.py covers those).
    asking = make_ctx(workspace)
    asking.read_only_unasked = False
    plan = tool.plan({"command": "pwd", "workdir": "sub"}, asking)
    assert plan.approval is not None
    assert plan.approval.kind == "shell"
    assert plan.approval.operation == "pwd"
    assert plan.approval.target == os.path.realpath(workspace / "sub")
    assert not plan.approval.outside_workspace
    outcome = await call(tool, workspace, command="pwd", workdir="sub")
    assert outcome.output == f"exit code: 0\n{os.path.realpath(workspace / 'sub')}\n"

    outside = tool.plan({"command": "ls", "workdir": ".."}, make_ctx(workspace)).approval
    assert outside is not None
    assert outside.outside_workspace
    assert outside.target == os.path.realpath(workspace.parent)
    default = tool.plan({"command": "ls"}, asking).approval
    assert default is not None
    assert default.target == os.path.realpath(workspace)


def test_plan_refusals_and_timeout_cap(workspace: Path) -> None:
    (workspace / "file").write_text("")
    tool = ShellTool()
    ctx = make_ctx(workspace)
    with pytest.raises(ToolError, match="no such file"):
        tool.plan({"command": "ls", "workdir": "missing"}, ctx)
    with pytest.raises(ToolError, match="not a directory"):
        tool.plan({"command": "ls", "workdir": "file"}, ctx)
    with pytest.raises(ToolError, match="must not be empty"):
        tool.plan({"command": "  "}, ctx)
    with pytest.raises(ToolError, match="NUL"):
        tool.plan({"command": "echo \0"}, ctx)
    with pytest.raises(ToolError, match="at least 1"):
        tool.plan({"command": "ls", "timeout_ms": 0}, ctx)
    assert tool.plan({"command": "ls"}, ctx).resolved["timeout_s"] == 120
    assert tool.plan({"command": "ls", "timeout_ms": 1500}, ctx).resolved["timeout_s"] == 1.5
    assert tool.plan({"command": "ls", "timeout_ms": 10**9}, ctx).resolved["timeout_s"] == 600


async def test_streams_chunks_live_and_in_order(workspace: Path) -> None:
    # The command waits for a file the callback creates on seeing "first":
    # this only finishes if output is streamed before the command exits.
    chunks: list[str] = []

    def on_output(text: str) -> None:
        chunks.append(text)
        if "first" in "".join(chunks):
            (workspace / "go").touch()

    command = "echo first; while [ ! -e go ]; do sleep 0.01; done; echo second"
    outcome = await call(ShellTool(), workspace, on_output, command=command, timeout_ms=5000)
    assert outcome.success
    assert "".join(chunks) == "first\nsecond\n"
    assert outcome.output == "exit code: 0\nfirst\nsecond\n"


async def test_multibyte_character_split_across_reads(workspace: Path) -> None:
    chunks: list[str] = []

    def on_output(text: str) -> None:
        chunks.append(text)
        (workspace / "go").touch()

    # "é" is C3 A9: the first byte goes out with "a", the second only after
    # the callback has seen "a", so the two bytes arrive in separate reads.
    command = r"printf 'a\xc3'; while [ ! -e go ]; do sleep 0.01; done; printf '\xa9\n'"
    outcome = await call(ShellTool(), workspace, on_output, command=command, timeout_ms=5000)
    assert chunks == ["a", "é\n"]
    assert outcome.output == "exit code: 0\naé\n"


async def test_output_cap_keeps_head_and_tail(workspace: Path) -> None:
    full = "".join(f"{i}\n" for i in range(1, 1001))
    outcome = await call(ShellTool(output_limit=100), workspace, command="seq 1 1000")
    assert outcome.success
    assert outcome.details["truncated"] is True
    assert outcome.details["original_output_chars"] == len(full)
    marker = f"[... {len(full) - 100} characters truncated ...]"
    assert outcome.output == f"exit code: 0\n{full[:50]}\n{marker}\n{full[-50:]}"


async def test_live_stream_is_capped_too(workspace: Path) -> None:
    chunks: list[str] = []
    outcome = await call(ShellTool(stream_limit=10), workspace, chunks.append, command="seq 1 100")
    assert outcome.details["truncated"] is False  # the kept output has its own, larger cap
    streamed = "".join(chunks)
    assert streamed.startswith("1\n2\n3\n4\n5\n")
    assert streamed.endswith("[... live output stopped; the output is too large ...]\n")


async def test_timeout_kills_the_process_group(workspace: Path) -> None:
    tool = ShellTool(kill_grace_s=0.5)
    started = time.monotonic()
    outcome = await call(
        tool, workspace, command="echo $$; sleep 30 & echo $!; sleep 30", timeout_ms=300
    )
    assert time.monotonic() - started < 2
    assert not outcome.success
    assert outcome.details["timed_out"] is True
    lines = outcome.output.splitlines()
    assert lines[0].startswith("exit code: -15")
    assert "timed out after 0.3 s" in lines[1]
    shell_pid, child_pid = int(lines[2]), int(lines[3])
    assert not running(shell_pid)
    assert not running(child_pid)


async def test_timeout_sigkills_children_that_ignore_sigterm(workspace: Path) -> None:
    tool = ShellTool(kill_grace_s=0.2)
    # Children inherit the ignored SIGTERM from `trap '' TERM`.
    command = "trap '' TERM; sleep 30 & echo $!; sleep 30"
    started = time.monotonic()
    outcome = await call(tool, workspace, command=command, timeout_ms=200)
    assert time.monotonic() - started < 2
    assert outcome.details["timed_out"] is True
    child_pid = int(outcome.output.splitlines()[2])
    assert not running(child_pid)


async def test_cancellation_kills_the_group_and_propagates(workspace: Path) -> None:
    tool = ShellTool(kill_grace_s=0.5)
    pids: list[int] = []
    outcomes: list[ToolOutcome] = []

    with anyio.CancelScope() as scope:

        def on_output(text: str) -> None:
            pids.extend(int(word) for word in text.split())
            scope.cancel()  # the turn is interrupted once the command is running

        started = time.monotonic()
        outcomes.append(
            await call(tool, workspace, on_output, command="sleep 30 & echo $$ $!; wait")
        )
    assert scope.cancelled_caught  # run() re-raised the cancellation
    assert outcomes == []
    assert time.monotonic() - started < 2
    assert len(pids) == 2
    assert not any(running(pid) for pid in pids)


async def test_background_process_holding_the_pipe_does_not_block(workspace: Path) -> None:
    # `sleep 30 &` keeps stdout open after the shell exits; the drain is bounded.
    started = time.monotonic()
    outcome = await call(ShellTool(drain_grace_s=0.1), workspace, command="sleep 30 & echo $!")
    child_pid = int(outcome.output.splitlines()[1])
    try:
        assert time.monotonic() - started < 2
        assert outcome.success
        assert outcome.details["timed_out"] is False
    finally:
        os.kill(child_pid, 9)


async def test_environment_is_inherited_and_fds_are_not(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("APPSERVER_TOOL_TEST", "inherited")
    read_fd, write_fd = os.pipe()
    os.set_inheritable(write_fd, True)  # even inheritable fds must not leak
    try:
        outcome = await call(
            ShellTool(), workspace, command="echo $APPSERVER_TOOL_TEST; ls /proc/$$/fd"
        )
    finally:
        os.close(read_fd)
        os.close(write_fd)
    lines = outcome.output.splitlines()
    assert lines[1] == "inherited"
    assert str(write_fd) not in lines[2:]


async def test_start_failure_is_an_outcome(workspace: Path) -> None:
    outcome = await call(ShellTool(shell="/nonexistent/bash"), workspace, command="true")
    assert not outcome.success
    assert outcome.output.startswith("failed to start the command")


async def test_a_workdir_swapped_for_a_link_after_approval_is_refused(
    workspace: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (workspace / "sub").mkdir()
    tool = ShellTool()
    ctx = ToolContext(workspace=workspace, thread_id="t", turn_id="u", call_id="c")
    plan = tool.plan({"command": "touch planted", "workdir": "sub"}, ctx)
    (workspace / "sub").rmdir()
    (workspace / "sub").symlink_to(elsewhere)
    outcome = await tool.run(plan, ctx)
    assert outcome.success is False and "changed" in outcome.output
    assert not (elsewhere / "planted").exists()
