"""File tools and the shell's workdir against a path swapped under them, and
against hard links (issue 24: "a grant covers what its prompt showed").

The race is provoked deterministically, at the worst moment, with a
``sys.audit`` hook: Python raises an ``open`` event just before it opens a
file (builtin ``open`` and ``os.open`` alike) and a ``subprocess.Popen`` event
just before it starts a process. At that moment the hook swaps a directory
(or the file) of the planned path for a symlink to a directory outside the
workspace, exactly once. Whatever the tool does then, nothing outside may
change and nothing outside may be read: the call fails, or acts on the very
directory or file the plan resolved (now under another name).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from appserver.tools.base import ToolContext, ToolOutcome, ToolPlan
from appserver.tools.files import EditFileTool, ListDirTool, ReadFileTool, WriteFileTool
from appserver.tools.shell import ShellTool
from tests.support.path_swaps import first_open, opening_for_write, spawning, swapped
from tests.support.servers import running_server
from tests.support.turns import Approver, new_thread, run_turn


def make_ctx(workspace: Path) -> ToolContext:
    return ToolContext(workspace=workspace, thread_id="thr", turn_id="turn", call_id="call")


async def planned(tool: Any, workspace: Path, **arguments: Any) -> tuple[ToolPlan, ToolContext]:
    ctx = make_ctx(workspace)
    plan: ToolPlan = tool.plan(arguments, ctx)
    return plan, ctx


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` and its bytes (what must not change)."""
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside the workspace with the same layout as ``ws/d``."""
    path = tmp_path / "outside"
    path.mkdir()
    (path / "f.txt").write_text("OUTSIDE SECRET\n")
    return path


@pytest.fixture
def inner(workspace: Path) -> Path:
    """``ws/d`` with ``f.txt``: the directory the plans resolve."""
    path = workspace / "d"
    path.mkdir()
    (path / "f.txt").write_text("inside\n")
    return path


# --- 1. a symlink swapped in between the plan and the open --------------------


async def test_write_file_fails_when_its_directory_becomes_a_link(
    workspace: Path, inner: Path, outside: Path
) -> None:
    before = snapshot(outside)
    tool = WriteFileTool()
    plan, ctx = await planned(tool, workspace, path="d/new.txt", content="pwned\n")
    with swapped(inner, outside, first_open) as swap:
        outcome = await tool.run(plan, ctx)
    assert swap.done.is_set()
    assert snapshot(outside) == before
    assert not outcome.success
    assert "changed (a symlink appeared)" in outcome.output


async def test_write_file_fails_when_the_file_becomes_a_link(
    workspace: Path, inner: Path, outside: Path
) -> None:
    before = snapshot(outside)
    tool = WriteFileTool()
    plan, ctx = await planned(tool, workspace, path="d/f.txt", content="pwned\n")
    with swapped(inner / "f.txt", outside / "f.txt", first_open) as swap:
        outcome = await tool.run(plan, ctx)
    assert swap.done.is_set()
    assert snapshot(outside) == before
    assert not outcome.success and "changed" in outcome.output
    assert (inner / "f.txt.moved").read_text() == "inside\n"


async def test_edit_file_fails_when_its_directory_becomes_a_link(
    workspace: Path, inner: Path, outside: Path
) -> None:
    (outside / "f.txt").write_text("inside\n")  # the same text: the edit would apply there
    before = snapshot(outside)
    tool = EditFileTool()
    plan, ctx = await planned(tool, workspace, path="d/f.txt", old_string="in", new_string="X")
    with swapped(inner, outside, first_open) as swap:
        outcome = await tool.run(plan, ctx)
    assert swap.done.is_set()
    assert snapshot(outside) == before
    assert not outcome.success and "changed" in outcome.output


async def test_edit_file_writes_the_file_it_read(
    workspace: Path, inner: Path, outside: Path
) -> None:
    """The swap comes between the edit's read and its write: the edit lands in
    the file it read (the one the plan resolved), never outside."""
    (outside / "f.txt").write_text("inside\n")
    before = snapshot(outside)
    tool = EditFileTool()
    plan, ctx = await planned(tool, workspace, path="d/f.txt", old_string="in", new_string="X")
    with swapped(inner, outside, opening_for_write("f.txt")) as swap:
        outcome = await tool.run(plan, ctx)
    assert swap.done.is_set()
    assert snapshot(outside) == before
    assert outcome.success, outcome.output
    assert (workspace / "d.moved" / "f.txt").read_text() == "Xside\n"


async def test_read_file_and_list_dir_never_read_through_a_swapped_link(
    workspace: Path, inner: Path, outside: Path
) -> None:
    for tool, arguments in (
        (ReadFileTool(), {"path": "d/f.txt"}),
        (ListDirTool(), {"path": "d"}),
    ):
        if not inner.is_dir() or inner.is_symlink():  # undo the previous round's swap
            inner.unlink()
            (workspace / "d.moved").rename(inner)
        plan, ctx = await planned(tool, workspace, **arguments)
        with swapped(inner, outside, first_open) as swap:
            outcome = await tool.run(plan, ctx)
        assert swap.done.is_set()
        assert "OUTSIDE SECRET" not in outcome.output
        assert not outcome.success and "changed" in outcome.output


async def test_shell_fails_when_its_workdir_becomes_a_link_before_it_is_opened(
    workspace: Path, inner: Path, outside: Path
) -> None:
    tool = ShellTool()
    plan, ctx = await planned(tool, workspace, command="touch marker", workdir="d")
    with swapped(inner, outside, first_open) as swap:
        outcome = await tool.run(plan, ctx)
    assert swap.done.is_set()
    assert not (outside / "marker").exists()
    assert not outcome.success and "changed" in outcome.output


async def test_shell_runs_in_the_opened_workdir_when_the_link_comes_at_spawn(
    workspace: Path, inner: Path, outside: Path
) -> None:
    tool = ShellTool()
    plan, ctx = await planned(tool, workspace, command="touch marker && pwd", workdir="d")
    with swapped(inner, outside, spawning) as swap:
        outcome = await tool.run(plan, ctx)
    assert swap.done.is_set()
    assert not (outside / "marker").exists()
    assert outcome.success, outcome.output
    assert (workspace / "d.moved" / "marker").exists()  # the directory the approval named


async def test_a_background_command_runs_in_the_opened_workdir(
    workspace: Path, inner: Path, outside: Path
) -> None:
    """``run_in_background`` over a real (in-process) server: the swap comes
    just before the terminal's process starts."""

    def the_command(event: str, args: tuple[Any, ...]) -> bool:
        return event == "subprocess.Popen" and "touch bg-marker" in str(args[1])

    call = {"command": "touch bg-marker", "workdir": "d", "run_in_background": True}
    with anyio.fail_after(20):
        async with running_server("memory", workspace) as server, server.connect() as client:
            thread_id = await new_thread(client, approvalPolicy="autoApprove")
            with swapped(inner, outside, the_command) as swap:
                _, terminal = await run_turn(client, thread_id, f"?tool shell {json.dumps(call)}")
    assert terminal["method"] == "turn/completed"
    assert swap.done.is_set()
    assert not (outside / "bg-marker").exists()
    assert (workspace / "d.moved" / "bg-marker").exists()  # the directory the approval named


# --- 2. hard links ------------------------------------------------------------


async def test_a_hard_linked_file_is_asked_as_outside_with_its_link_count(
    workspace: Path, outside: Path
) -> None:
    os.link(outside / "f.txt", workspace / "linked.txt")
    for tool, arguments in (
        (WriteFileTool(), {"path": "linked.txt", "content": "x\n"}),
        (EditFileTool(), {"path": "linked.txt", "old_string": "SECRET", "new_string": "x"}),
    ):
        plan, _ = await planned(tool, workspace, **arguments)
        need = plan.approval
        assert need is not None
        assert need.outside_workspace  # autoApprove and workspace grants do not cover it
        assert "2 hard links" in need.reason
        assert need.target == os.path.realpath(workspace / "linked.txt")


async def test_a_write_the_prompt_showed_links_for_goes_through(
    workspace: Path, outside: Path
) -> None:
    os.link(outside / "f.txt", workspace / "linked.txt")
    tool = WriteFileTool()
    plan, ctx = await planned(tool, workspace, path="linked.txt", content="approved\n")
    outcome = await tool.run(plan, ctx)
    assert outcome.success, outcome.output
    assert (outside / "f.txt").read_text() == "approved\n"  # what the person approved


@pytest.mark.parametrize("tool_name", ["write_file", "edit_file"])
async def test_a_hard_link_made_after_the_plan_is_refused(
    workspace: Path, outside: Path, tool_name: str
) -> None:
    """The plan saw one link; by the run the name is a hard link to a file
    outside: the call fails and neither name changes."""
    (workspace / "plain.txt").write_text("OUTSIDE plain\n")
    tool: Any = WriteFileTool() if tool_name == "write_file" else EditFileTool()
    arguments: dict[str, Any] = (
        {"path": "plain.txt", "content": "pwned\n"}
        if tool_name == "write_file"
        else {"path": "plain.txt", "old_string": "OUTSIDE", "new_string": "pwned"}
    )
    plan, ctx = await planned(tool, workspace, **arguments)
    assert plan.approval is not None and not plan.approval.outside_workspace
    (workspace / "plain.txt").unlink()
    os.link(outside / "f.txt", workspace / "plain.txt")
    outcome: ToolOutcome = await tool.run(plan, ctx)
    assert not outcome.success
    assert (
        "2 hard links" in outcome.output and "the approval did not mention them" in outcome.output
    )
    assert (outside / "f.txt").read_text() == "OUTSIDE SECRET\n"


async def test_a_new_file_that_turns_up_as_a_hard_link_is_refused(
    workspace: Path, outside: Path
) -> None:
    tool = WriteFileTool()
    plan, ctx = await planned(tool, workspace, path="new.txt", content="pwned\n")
    os.link(outside / "f.txt", workspace / "new.txt")
    outcome = await tool.run(plan, ctx)
    assert not outcome.success and "hard links" in outcome.output
    assert (outside / "f.txt").read_text() == "OUTSIDE SECRET\n"


async def test_auto_approve_asks_before_writing_a_hard_linked_file(
    workspace: Path, outside: Path
) -> None:
    """Over a real server: ``autoApprove`` writes workspace files unasked, but
    not one that is also a file outside; declined, nothing changes."""
    os.link(outside / "f.txt", workspace / "linked.txt")
    with anyio.fail_after(20):
        async with running_server("memory", workspace) as server, server.connect() as client:
            approver = Approver(client, "decline")
            thread_id = await new_thread(client, approvalPolicy="autoApprove")
            _, terminal = await run_turn(client, thread_id, ">linked.txt\npwned")
            assert terminal["method"] == "turn/completed"
    assert len(approver.requests) == 1
    params = approver.requests[0]["params"]
    assert "2 hard links" in params["reason"]
    assert (outside / "f.txt").read_text() == "OUTSIDE SECRET\n"
