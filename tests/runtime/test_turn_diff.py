"""The turn's aggregate diff (runtime/turns/turn_diff.py), fed by the real file tools."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from appserver.runtime.turns.turn_diff import TurnDiff, reverse_apply, wire_changes
from appserver.tools.apply_patch import ApplyPatchTool
from appserver.tools.base import ToolContext
from appserver.tools.file_diff import unified_diff
from appserver.tools.files import EditFileTool, WriteFileTool


async def apply(turn: TurnDiff, tool: Any, workspace: Path, **arguments: Any) -> str:
    """Run a file tool as the engine does and record what it changed; the turn's diff."""
    ctx = ToolContext(workspace=workspace, thread_id="thr", turn_id="turn", call_id="call")
    outcome = await tool.run(tool.plan(arguments, ctx), ctx)
    assert outcome.success, outcome.output
    return await turn.record(wire_changes(outcome.details))


async def test_two_edits_of_one_file_are_one_combined_diff(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("a = 1\nb = 2\nc = 3\n")
    turn = TurnDiff(tmp_path)
    edit = EditFileTool()
    first = await apply(turn, edit, tmp_path, path="m.py", old_string="1", new_string="10")
    assert first == "--- a/m.py\n+++ b/m.py\n@@ -1,3 +1,3 @@\n-a = 1\n+a = 10\n b = 2\n c = 3\n"
    second = await apply(
        turn, EditFileTool(), tmp_path, path="m.py", old_string="c = 3", new_string="c = 30"
    )
    assert second == (
        "--- a/m.py\n+++ b/m.py\n@@ -1,3 +1,3 @@\n-a = 1\n+a = 10\n b = 2\n-c = 3\n+c = 30\n"
    )


async def test_a_new_file_and_an_overwrite_show_what_was_there(tmp_path: Path) -> None:
    (tmp_path / "old.txt").write_text("first line\nsecond line\n")
    turn = TurnDiff(tmp_path)
    await apply(turn, WriteFileTool(), tmp_path, path="new.txt", content="hello\n")
    diff = await apply(turn, WriteFileTool(), tmp_path, path="old.txt", content="replaced\n")
    assert diff == (
        "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+hello\n"
        "--- a/old.txt\n+++ b/old.txt\n@@ -1,2 +1 @@\n-first line\n-second line\n+replaced\n"
    )
    # Written again: still one diff per file, against the file before the turn.
    diff = await apply(turn, WriteFileTool(), tmp_path, path="new.txt", content="hello\nagain\n")
    assert diff.startswith("--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1,2 @@\n+hello\n+again\n")
    assert diff.count("+++ ") == 2


async def test_a_file_changed_back_drops_out(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("same\n")
    turn = TurnDiff(tmp_path)
    await apply(turn, WriteFileTool(), tmp_path, path="f.txt", content="other\n")
    assert await apply(turn, WriteFileTool(), tmp_path, path="f.txt", content="same\n") == ""


async def test_a_file_that_cannot_be_diffed_shows_its_notes(tmp_path: Path) -> None:
    (tmp_path / "blob.bin").write_bytes(b"\0binary")
    turn = TurnDiff(tmp_path)
    diff = await apply(turn, WriteFileTool(), tmp_path, path="blob.bin", content="text\n")
    assert diff == "[no diff of blob.bin: it looks like a binary file]\n"


async def test_moves_and_deletions_from_changes_alone(tmp_path: Path) -> None:
    """The shape apply_patch reports: a move with an edit, then a deletion."""
    (tmp_path / "b.txt").write_text("one\ntwo\n")
    (tmp_path / "gone.txt").write_text("bye\n")
    turn = TurnDiff(tmp_path)
    moved = unified_diff("b.txt", "one\ntwo\n", "one\n2\n")
    (tmp_path / "b.txt").rename(tmp_path / "c.txt")
    (tmp_path / "c.txt").write_text("one\n2\n")
    change = {"path": "b.txt", "kind": "move", "movePath": "c.txt", "diff": moved}
    diff = await turn.record([change])
    assert diff == "--- a/b.txt\n+++ b/c.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+2\n"
    removed = unified_diff("gone.txt", "bye\n", "")
    (tmp_path / "gone.txt").unlink()
    diff = await turn.record([{"path": "gone.txt", "kind": "delete", "diff": removed}])
    assert diff.endswith("--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n")


def patch(*lines: str) -> str:
    return "\n".join(["*** Begin Patch", *lines, "*** End Patch"])


async def test_patches_combine_as_the_other_tools_do(tmp_path: Path) -> None:
    """apply_patch's diffs carry git's headers (``diff --git``): still exact."""
    (tmp_path / "p.txt").write_text("one\ntwo\nthree\n")
    turn = TurnDiff(tmp_path)
    there = patch("*** Update File: p.txt", "@@", " one", "-two", "+TWO", " three")
    diff = await apply(turn, ApplyPatchTool(), tmp_path, input=there)
    assert diff == "--- a/p.txt\n+++ b/p.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+TWO\n three\n"
    back = patch("*** Update File: p.txt", "@@", " one", "-TWO", "+two", " three")
    assert await apply(turn, ApplyPatchTool(), tmp_path, input=back) == ""
    # A later change by another tool combines with the patch's.
    await apply(turn, ApplyPatchTool(), tmp_path, input=there)
    diff = await apply(
        turn, EditFileTool(), tmp_path, path="p.txt", old_string="three", new_string="3"
    )
    assert diff == ("--- a/p.txt\n+++ b/p.txt\n@@ -1,3 +1,3 @@\n one\n-two\n-three\n+TWO\n+3\n")


async def test_a_moved_files_old_name_can_be_used_again(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("one\ntwo\n")
    turn = TurnDiff(tmp_path)
    await apply(turn, EditFileTool(), tmp_path, path="a.txt", old_string="two", new_string="2")
    moved = patch("*** Update File: a.txt", "*** Move to: b.txt", "@@", " one", " 2")
    await apply(turn, ApplyPatchTool(), tmp_path, input=moved)
    diff = await apply(turn, WriteFileTool(), tmp_path, path="a.txt", content="fresh\n")
    assert diff == (
        "--- a/a.txt\n+++ b/b.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+2\n"
        "--- /dev/null\n+++ b/a.txt\n@@ -0,0 +1 @@\n+fresh\n"
    )


def test_reverse_apply_undoes_exact_diffs() -> None:
    cases = [
        ("", "new\n"),
        ("a\nb\nc\n", "a\nB\nc\n"),
        ("a\r\nb", "a\r\nb\nc"),  # CRLF kept; no newline at the end, then one
        ("x\n" * 20 + "end", "x\n" * 20 + "END\n"),
        ("\n".join(map(str, range(40))), "\n".join(map(str, range(1, 41)))),
    ]
    for before, after in cases:
        assert reverse_apply(unified_diff("f", before, after), after) == before
    assert reverse_apply(unified_diff("f", "a\n", "b\n"), "c\n") is None  # not what it made
    assert reverse_apply("[no diff of f: it is binary]\n", "x") is None


def test_wire_changes_keeps_only_well_formed_entries() -> None:
    details = {
        "changes": [
            {"path": "a", "kind": "update", "diff": "d", "extra": 1},
            {"path": "b", "kind": "rename", "diff": "d"},
            "junk",
            {"path": "c", "kind": "move", "diff": "d", "movePath": "e"},
        ]
    }
    assert wire_changes(details) == [
        {"path": "a", "kind": "update", "diff": "d"},
        {"path": "c", "kind": "move", "diff": "d", "movePath": "e"},
    ]
    assert wire_changes({"changes": "x"}) == []
