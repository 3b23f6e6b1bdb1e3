"""``apply_patch``: the plan refuses what does not apply, one approval shows the
whole diff, and the run writes every file or none."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from appserver.tools.apply_patch import ApplyPatchTool
from appserver.tools.base import ToolContext, ToolError, ToolOutcome, ToolPlan
from appserver.tools.registry import default_tools
from tests.support.servers import running_server
from tests.support.turns import Approver, new_thread, one_item, run_turn


def ctx_for(workspace: Path) -> ToolContext:
    return ToolContext(workspace=workspace, thread_id="thr", turn_id="turn", call_id="call")


def patch(*lines: str) -> str:
    return "\n".join(["*** Begin Patch", *lines, "*** End Patch"])


def plan_of(workspace: Path, text: str) -> ToolPlan:
    return ApplyPatchTool().plan({"input": text}, ctx_for(workspace))


async def run_plan(workspace: Path, plan: ToolPlan) -> ToolOutcome:
    return await ApplyPatchTool().run(plan, ctx_for(workspace))


async def apply(workspace: Path, text: str) -> ToolOutcome:
    return await run_plan(workspace, plan_of(workspace, text))


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    place = tmp_path / "outside"
    place.mkdir()
    return place


def test_registered_after_edit_file_with_codex_argument_name() -> None:
    names = [tool.name for tool in default_tools()]
    assert names[names.index("edit_file") + 1] == "apply_patch"
    assert ApplyPatchTool.input_schema["required"] == ["input"]
    assert "*** Begin Patch" in ApplyPatchTool.description


async def test_one_approval_shows_every_file_and_the_run_applies_them(workspace: Path) -> None:
    (workspace / "mod.py").write_text("def f():\n    return 1\n")
    (workspace / "old.txt").write_text("gone\n")
    (workspace / "name.txt").write_text("same\n")
    text = patch(
        "*** Add File: pkg/new.txt",
        "+hello",
        "*** Update File: mod.py",
        "@@ def f():",
        "-    return 1",
        "+    return 2",
        "*** Delete File: old.txt",
        "*** Update File: name.txt",
        "*** Move to: renamed/name.txt",
        "@@",
        "-same",
        "+changed",
    )
    plan = plan_of(workspace, text)
    need = plan.approval
    assert need is not None
    assert (need.kind, need.operation, need.outside_workspace) == ("file", "patch", False)
    assert need.reason.startswith("Apply a patch: add pkg/new.txt; update mod.py; delete old.txt")
    root = os.path.realpath(workspace)
    assert need.target.split(", ") == [
        f"{root}/pkg/new.txt",
        f"{root}/mod.py",
        f"{root}/old.txt",
        f"{root}/name.txt",
        f"{root}/renamed/name.txt",
    ]
    assert need.diff is not None
    assert (
        "diff --git a/pkg/new.txt b/pkg/new.txt\nnew file mode 100644\n--- /dev/null\n" in need.diff
    )
    assert (
        "--- a/mod.py\n+++ b/mod.py\n@@ -1,2 +1,2 @@\n def f():\n-    return 1\n+    return 2\n"
        in (need.diff)
    )
    assert "deleted file mode 100644\n--- a/old.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-gone\n" in (
        need.diff
    )
    assert "rename from name.txt\nrename to renamed/name.txt\n--- a/name.txt\n" in need.diff
    assert not (workspace / "pkg").exists()  # planning writes nothing

    outcome = await run_plan(workspace, plan)
    assert outcome.success, outcome.output
    assert outcome.output.splitlines() == [
        "Success. Updated the following files:",
        "A pkg/new.txt",
        "M mod.py",
        "D old.txt",
        "R name.txt -> renamed/name.txt",
    ]
    assert (workspace / "pkg/new.txt").read_text() == "hello\n"
    assert (workspace / "mod.py").read_text() == "def f():\n    return 2\n"
    assert not (workspace / "old.txt").exists()
    assert not (workspace / "name.txt").exists()
    assert (workspace / "renamed/name.txt").read_text() == "changed\n"
    changes = outcome.details["changes"]
    assert [(c["path"], c["kind"], c.get("movePath")) for c in changes] == [
        ("pkg/new.txt", "add", None),
        ("mod.py", "update", None),
        ("old.txt", "delete", None),
        ("name.txt", "move", "renamed/name.txt"),
    ]
    assert all(c["diff"].startswith("diff --git ") for c in changes)


async def test_crlf_and_missing_final_newline_are_kept(workspace: Path) -> None:
    (workspace / "win.txt").write_bytes(b"one\r\ntwo\r\nthree")
    outcome = await apply(
        workspace, patch("*** Update File: win.txt", "@@", " one", "-two", "+2", "+2b")
    )
    assert outcome.success, outcome.output
    assert (workspace / "win.txt").read_bytes() == b"one\r\n2\r\n2b\r\nthree"


async def test_a_moved_file_keeps_its_mode(workspace: Path) -> None:
    script = workspace / "run.sh"
    script.write_text("echo a\n")
    script.chmod(0o750)
    outcome = await apply(
        workspace,
        patch("*** Update File: run.sh", "*** Move to: bin/run.sh", "@@", "-echo a", "+echo b"),
    )
    assert outcome.success, outcome.output
    assert (workspace / "bin/run.sh").stat().st_mode & 0o777 == 0o750


# --- the plan refuses what does not apply ---------------------------------------------

REFUSED = [
    pytest.param(patch(), "the patch changes no file", id="empty-patch"),
    pytest.param("*** Update File: a.txt", "must be '*** Begin Patch'", id="not-a-patch"),
    pytest.param(
        patch("*** Update File: a.txt", "@@", "-nothing like this", "+x"),
        "the patch does not apply: a.txt: hunk 1: the lines to change were not found",
        id="context-not-found",
    ),
    pytest.param(
        patch("*** Update File: a.txt", "@@", "-same", "+x"),
        "a.txt: hunk 1 is ambiguous",
        id="ambiguous",
    ),
    pytest.param(
        patch("*** Add File: a.txt", "+new"), "cannot add a.txt: it already exists", id="add-over"
    ),
    pytest.param(
        patch("*** Delete File: missing.txt"),
        "cannot delete missing.txt: the file does not exist",
        id="delete-missing",
    ),
    pytest.param(
        patch("*** Update File: missing.txt", "@@", "-a", "+b"),
        "cannot update missing.txt: the file does not exist",
        id="update-missing",
    ),
    pytest.param(
        patch("*** Update File: a.txt", "*** Move to: b.txt", "@@", "-same", "+x", " same"),
        "cannot move a.txt to b.txt: it already exists",
        id="move-onto-existing",
    ),
    pytest.param(
        patch("*** Update File: blob.bin", "@@", "-a", "+b"),
        "cannot update blob.bin: it looks like a binary file",
        id="binary",
    ),
    pytest.param(
        patch("*** Delete File: dir"), "cannot delete dir: it is a directory", id="directory"
    ),
    pytest.param(
        patch("*** Delete File: b.txt", "*** Delete File: b.txt"),
        "the patch names b.txt more than once",
        id="same-file-twice",
    ),
]


@pytest.mark.parametrize(("text", "message"), REFUSED)
def test_the_plan_refuses_what_does_not_apply(workspace: Path, text: str, message: str) -> None:
    (workspace / "a.txt").write_text("same\nsame\n")
    (workspace / "b.txt").write_text("b\n")
    (workspace / "blob.bin").write_bytes(b"a\0b\n")
    (workspace / "dir").mkdir()
    with pytest.raises(ToolError) as caught:
        plan_of(workspace, text)
    assert message in str(caught.value)
    assert (workspace / "a.txt").read_text() == "same\nsame\n"


def test_a_failing_second_file_fails_the_whole_plan(workspace: Path) -> None:
    (workspace / "first.txt").write_text("one\n")
    text = patch(
        "*** Update File: first.txt", "@@", "-one", "+ONE",
        "*** Update File: second.txt", "@@", "-two", "+TWO",
    )  # fmt: skip
    with pytest.raises(ToolError, match=r"cannot update second\.txt"):
        plan_of(workspace, text)
    assert (workspace / "first.txt").read_text() == "one\n"


# --- paths: outside, links -------------------------------------------------------


def test_a_path_escaping_the_workspace_is_asked_as_outside(workspace: Path, outside: Path) -> None:
    (outside / "x.txt").write_text("x\n")
    need = plan_of(workspace, patch("*** Update File: ../outside/x.txt", "@@", "-x", "+y")).approval
    assert need is not None
    assert need.outside_workspace
    assert need.target == os.path.realpath(outside / "x.txt")
    assert "outside the workspace" in need.reason


def test_a_symlink_to_outside_is_outside(workspace: Path, outside: Path) -> None:
    (outside / "real.txt").write_text("r\n")
    (workspace / "link.txt").symlink_to(outside / "real.txt")
    need = plan_of(workspace, patch("*** Update File: link.txt", "@@", "-r", "+s")).approval
    assert need is not None and need.outside_workspace


def test_deleting_or_moving_a_symlink_is_refused(workspace: Path) -> None:
    (workspace / "real.txt").write_text("r\n")
    (workspace / "link.txt").symlink_to("real.txt")
    with pytest.raises(ToolError, match="symbolic link"):
        plan_of(workspace, patch("*** Delete File: link.txt"))
    with pytest.raises(ToolError, match="symbolic link"):
        plan_of(workspace, patch("*** Update File: link.txt", "*** Move to: b", "@@", "-r", "+s"))
    assert (workspace / "real.txt").read_text() == "r\n"


def test_a_hard_linked_file_is_asked_as_outside(workspace: Path, outside: Path) -> None:
    (workspace / "shared.txt").write_text("s\n")
    os.link(workspace / "shared.txt", outside / "alias.txt")
    need = plan_of(workspace, patch("*** Update File: shared.txt", "@@", "-s", "+t")).approval
    assert need is not None and need.outside_workspace
    assert "2 hard links" in need.reason


def test_two_names_of_one_file_in_one_patch_are_refused(workspace: Path) -> None:
    """Each section would be computed from the same old text: the last write
    would undo the first, with both reported applied."""
    (workspace / "h1.txt").write_text("one\nthree\n")
    os.link(workspace / "h1.txt", workspace / "h2.txt")
    text = patch(
        "*** Update File: h1.txt", "@@", "-one", "+ONE", "*** Update File: h2.txt", "@@", "-three",
        "+THREE",
    )  # fmt: skip
    with pytest.raises(ToolError, match=r"names h1.txt and h2.txt, which are one file"):
        plan_of(workspace, text)
    assert (workspace / "h1.txt").read_text() == "one\nthree\n"


async def test_more_hard_links_at_run_time_fail_untouched(workspace: Path, outside: Path) -> None:
    (workspace / "f.txt").write_text("f\n")
    plan = plan_of(workspace, patch("*** Update File: f.txt", "@@", "-f", "+g"))
    os.link(workspace / "f.txt", outside / "alias.txt")
    outcome = await run_plan(workspace, plan)
    assert not outcome.success
    assert "hard links" in outcome.output
    assert (outside / "alias.txt").read_text() == "f\n"


# --- all or nothing at run time ------------------------------------------------------------


async def test_a_file_changed_after_the_plan_fails_everything(workspace: Path) -> None:
    (workspace / "a.txt").write_text("a\n")
    (workspace / "b.txt").write_text("b\n")
    plan = plan_of(
        workspace,
        patch(
            "*** Update File: a.txt", "@@", "-a", "+A", "*** Update File: b.txt", "@@", "-b", "+B"
        ),
    )
    (workspace / "b.txt").write_text("b edited meanwhile\n")
    outcome = await run_plan(workspace, plan)
    assert not outcome.success
    assert "b.txt changed since the patch was planned; nothing was applied" in outcome.output
    assert (workspace / "a.txt").read_text() == "a\n"


async def test_a_failing_write_restores_the_files_already_written(workspace: Path) -> None:
    (workspace / "a.txt").write_text("a\n")
    (workspace / "gone.txt").write_text("g\n")
    text = patch(
        "*** Update File: a.txt", "@@", "-a", "+A",
        "*** Delete File: gone.txt",
        "*** Add File: new.txt", "+n",
        "*** Add File: blocker/inner.txt", "+x",
    )  # fmt: skip
    plan = plan_of(workspace, text)
    # A file where the new file's directory should be: the last creation fails.
    (workspace / "blocker").write_text("not a directory\n")
    outcome = await run_plan(workspace, plan)
    assert not outcome.success
    assert "the files already changed were restored" in outcome.output
    assert (workspace / "a.txt").read_text() == "a\n"
    assert (workspace / "gone.txt").read_text() == "g\n"
    assert not (workspace / "new.txt").exists()


async def test_a_file_added_meanwhile_is_not_overwritten(workspace: Path) -> None:
    plan = plan_of(workspace, patch("*** Add File: late.txt", "+mine"))
    (workspace / "late.txt").write_text("theirs\n")
    outcome = await run_plan(workspace, plan)
    assert not outcome.success
    assert (workspace / "late.txt").read_text() == "theirs\n"


# --- end to end: a turn where the model calls apply_patch ------------------------------------


async def test_a_turn_asks_once_with_the_whole_diff(workspace: Path) -> None:
    (workspace / "notes.txt").write_text("alpha\nbeta\n")
    text = patch(
        "*** Update File: notes.txt", "@@", " alpha", "-beta", "+gamma",
        "*** Add File: more.txt", "+added",
    )  # fmt: skip
    call = f"?tool apply_patch {json.dumps({'input': text})}"
    with anyio.fail_after(20):
        async with running_server("memory", workspace) as server, server.connect() as client:
            approver = Approver(client, "accept")
            thread_id = await new_thread(client)
            mark = client.mark()
            turn_id, terminal = await run_turn(client, thread_id, call)
            assert terminal["method"] == "turn/completed"
    assert len(approver.requests) == 1
    params: dict[str, Any] = approver.requests[0]["params"]
    assert (params["approvalType"], params["operation"], params["scopeKey"]) == (
        "file",
        "patch",
        "file:patch",
    )
    assert "--- a/notes.txt\n+++ b/notes.txt\n" in params["diff"]
    assert "-beta\n+gamma\n" in params["diff"]
    assert "--- /dev/null\n+++ b/more.txt\n@@ -0,0 +1 @@\n+added\n" in params["diff"]
    result = one_item(client, turn_id, "toolResult", mark)["payload"]
    assert result["success"] is True
    assert (workspace / "notes.txt").read_text() == "alpha\ngamma\n"
    assert (workspace / "more.txt").read_text() == "added\n"
