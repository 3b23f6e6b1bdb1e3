"""File tools: approval needs, results, failures and caps."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from appserver.tools.base import ApprovalNeed, ToolContext, ToolError, ToolOutcome
from appserver.tools.files import EditFileTool, ListDirTool, ReadFileTool, WriteFileTool


def make_ctx(workspace: Path) -> ToolContext:
    return ToolContext(workspace=workspace, thread_id="thr", turn_id="turn", call_id="call")


async def call(tool: Any, workspace: Path, **arguments: Any) -> ToolOutcome:
    """plan + run, as the engine does after an approval."""
    ctx = make_ctx(workspace)
    outcome: ToolOutcome = await tool.run(tool.plan(arguments, ctx), ctx)
    return outcome


def approval_of(tool: Any, workspace: Path, **arguments: Any) -> ApprovalNeed | None:
    need: ApprovalNeed | None = tool.plan(arguments, make_ctx(workspace)).approval
    return need


def real(path: Path) -> str:
    return os.path.realpath(path)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside"
    path.mkdir()
    return path


# --- read_file ---------------------------------------------------------------


async def test_read_inside_needs_no_approval(workspace: Path) -> None:
    (workspace / "a.txt").write_text("hello\nworld\n")
    assert approval_of(ReadFileTool(), workspace, path="a.txt") is None
    outcome = await call(ReadFileTool(), workspace, path="a.txt")
    assert outcome.success
    assert outcome.output == "hello\nworld\n"
    assert outcome.details["path"] == "a.txt"
    assert outcome.details["lines"] == 2
    assert not outcome.details["truncated"]


async def test_read_outside_needs_approval(workspace: Path, outside: Path) -> None:
    (outside / "secret.txt").write_text("s3cret")
    need = approval_of(ReadFileTool(), workspace, path=str(outside / "secret.txt"))
    assert need is not None
    assert (need.kind, need.operation, need.outside_workspace) == ("file", "read", True)
    assert need.target == real(outside / "secret.txt")
    outcome = await call(ReadFileTool(), workspace, path="../outside/secret.txt")
    assert outcome.success
    assert outcome.output == "s3cret"


def test_read_through_symlink_pointing_outside_needs_approval(
    workspace: Path, outside: Path
) -> None:
    (outside / "x.txt").write_text("x")
    (workspace / "link.txt").symlink_to(outside / "x.txt")
    need = approval_of(ReadFileTool(), workspace, path="link.txt")
    assert need is not None
    assert need.target == real(outside / "x.txt")
    assert need.outside_workspace


def test_read_refuses_missing_file_directory_and_bad_arguments(workspace: Path) -> None:
    (workspace / "d").mkdir()
    (workspace / "f.txt").write_text("x")
    tool = ReadFileTool()
    with pytest.raises(ToolError, match="no such file"):
        approval_of(tool, workspace, path="nope.txt")
    with pytest.raises(ToolError, match="list_dir"):
        approval_of(tool, workspace, path="d")
    with pytest.raises(ToolError, match="missing required argument: path"):
        approval_of(tool, workspace)
    with pytest.raises(ToolError, match="must be a string"):
        approval_of(tool, workspace, path=3)
    with pytest.raises(ToolError, match="at least 1"):
        approval_of(tool, workspace, path="f.txt", offset=0)
    with pytest.raises(ToolError, match="must be an integer"):
        approval_of(tool, workspace, path="f.txt", limit=True)
    with pytest.raises(ToolError, match="unknown argument"):
        approval_of(tool, workspace, path="f.txt", encoding="latin-1")


async def test_read_offset_and_limit(workspace: Path) -> None:
    (workspace / "n.txt").write_text("".join(f"line{i}\n" for i in range(1, 11)))
    outcome = await call(ReadFileTool(), workspace, path="n.txt", offset=3, limit=2)
    assert outcome.success
    assert outcome.output == "line3\nline4\n[more lines follow; continue with offset=5]"
    assert outcome.details["start_line"] == 3
    # Integral floats are accepted: some models send every number as a float.
    outcome = await call(ReadFileTool(), workspace, path="n.txt", offset=9.0)
    assert outcome.output == "line9\nline10\n"
    outcome = await call(ReadFileTool(), workspace, path="n.txt", offset=10, limit=5)
    assert outcome.output == "line10\n"


async def test_read_offset_past_end_fails(workspace: Path) -> None:
    (workspace / "n.txt").write_text("a\nb")
    outcome = await call(ReadFileTool(), workspace, path="n.txt", offset=3)
    assert not outcome.success
    assert "past the end of n.txt (2 lines)" in outcome.output
    outcome = await call(ReadFileTool(), workspace, path="n.txt", offset=2)
    assert outcome.output == "b"


async def test_read_cap_truncates_on_a_line_boundary(workspace: Path) -> None:
    (workspace / "big.txt").write_text("".join(f"{i:09d}\n" for i in range(30)))  # 300 B
    tool = ReadFileTool(max_bytes=105)
    outcome = await call(tool, workspace, path="big.txt")
    assert outcome.success
    assert outcome.details["truncated"]
    body, note = outcome.output.rsplit("\n", 1)
    assert body == "".join(f"{i:09d}\n" for i in range(10)).rstrip("\n")
    assert note == (
        "[output truncated at 105 bytes; the file has 300 bytes; continue with offset=11]"
    )
    following = await call(tool, workspace, path="big.txt", offset=11, limit=1)
    assert following.output.startswith("000000010\n")


async def test_read_line_longer_than_cap(workspace: Path) -> None:
    (workspace / "long.txt").write_text("x" * 500)
    outcome = await call(ReadFileTool(max_bytes=100), workspace, path="long.txt")
    assert outcome.success
    assert (
        outcome.output == "x" * 100 + "\n[line 1 is longer than 100 bytes; only its start is shown]"
    )


async def test_read_binary_and_empty_files(workspace: Path) -> None:
    (workspace / "img.bin").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR")
    outcome = await call(ReadFileTool(), workspace, path="img.bin")
    assert not outcome.success
    assert "binary" in outcome.output
    assert "img.bin" in outcome.output
    (workspace / "empty.txt").write_text("")
    outcome = await call(ReadFileTool(), workspace, path="empty.txt")
    assert outcome.success
    assert outcome.output == "(the file is empty)"


async def test_read_invalid_utf8_is_replaced_not_fatal(workspace: Path) -> None:
    (workspace / "latin1.txt").write_bytes("caf\u00e9\n".encode("latin-1"))
    outcome = await call(ReadFileTool(), workspace, path="latin1.txt")
    assert outcome.success
    assert outcome.output == "caf\ufffd\n"


# --- list_dir ----------------------------------------------------------------


async def test_list_dir_sorted_with_dirs_marked(workspace: Path) -> None:
    (workspace / "b.txt").write_text("")
    (workspace / "a_dir").mkdir()
    (workspace / "c").mkdir()
    (workspace / "a_dir" / "inner.txt").write_text("")
    (workspace / "link_to_dir").symlink_to(workspace / "c")
    assert approval_of(ListDirTool(), workspace) is None
    outcome = await call(ListDirTool(), workspace)
    assert outcome.success
    assert outcome.output == "a_dir/\nb.txt\nc/\nlink_to_dir/"
    assert outcome.details == {"path": ".", "entries": 4, "truncated": False}
    outcome = await call(ListDirTool(), workspace, path="a_dir")
    assert outcome.output == "inner.txt"
    outcome = await call(ListDirTool(), workspace, path="c")
    assert outcome.output == "(empty directory)"


async def test_list_dir_outside_needs_approval(workspace: Path, outside: Path) -> None:
    (outside / "x").write_text("")
    need = approval_of(ListDirTool(), workspace, path="..")
    assert need is not None
    assert (need.kind, need.operation, need.outside_workspace) == ("file", "list", True)
    assert need.target == real(workspace.parent)
    outcome = await call(ListDirTool(), workspace, path=str(outside))
    assert outcome.output == "x"


async def test_list_dir_cap_and_refusals(workspace: Path) -> None:
    for i in range(12):
        (workspace / f"f{i:02d}").write_text("")
    outcome = await call(ListDirTool(max_entries=5), workspace)
    assert outcome.output.splitlines() == [
        "f00", "f01", "f02", "f03", "f04", "[... 7 more entries not shown]"
    ]  # fmt: skip
    assert outcome.details["truncated"]
    with pytest.raises(ToolError, match="not a directory"):
        approval_of(ListDirTool(), workspace, path="f00")
    with pytest.raises(ToolError, match="no such file"):
        approval_of(ListDirTool(), workspace, path="missing")


# --- write_file --------------------------------------------------------------


async def test_write_inside_asks_and_creates_parents(workspace: Path) -> None:
    tool = WriteFileTool()
    need = approval_of(tool, workspace, path="sub/dir/f.txt", content="héllo")
    assert need is not None
    assert (need.kind, need.operation, need.outside_workspace) == ("file", "write", False)
    assert need.target == str(Path(real(workspace)) / "sub" / "dir" / "f.txt")
    assert "6 bytes" in need.reason
    outcome = await call(tool, workspace, path="sub/dir/f.txt", content="héllo")
    assert outcome.success
    assert outcome.output == "Wrote 6 bytes to sub/dir/f.txt"
    added = "--- /dev/null\n+++ b/sub/dir/f.txt\n@@ -0,0 +1 @@\n+héllo\n"
    added += "\\ No newline at end of file\n"
    assert outcome.details == {
        "path": "sub/dir/f.txt",
        "bytes_written": 6,
        "created": True,
        "changes": [{"path": "sub/dir/f.txt", "kind": "add", "diff": added}],
    }
    assert (workspace / "sub" / "dir" / "f.txt").read_text(encoding="utf-8") == "héllo"
    outcome = await call(tool, workspace, path="sub/dir/f.txt", content="")
    assert outcome.details["created"] is False
    assert (workspace / "sub" / "dir" / "f.txt").read_bytes() == b""


async def test_write_outside_is_flagged(workspace: Path, outside: Path) -> None:
    need = approval_of(WriteFileTool(), workspace, path="../outside/new.txt", content="x")
    assert need is not None
    assert need.outside_workspace
    assert need.target == str(Path(real(outside)) / "new.txt")
    outcome = await call(WriteFileTool(), workspace, path="../outside/new.txt", content="x")
    assert outcome.output == f"Wrote 1 bytes to {Path(real(outside)) / 'new.txt'}"


async def test_write_keeps_newlines_verbatim(workspace: Path) -> None:
    await call(WriteFileTool(), workspace, path="crlf.txt", content="a\r\nb\n")
    assert (workspace / "crlf.txt").read_bytes() == b"a\r\nb\n"


def test_write_refusals(workspace: Path) -> None:
    (workspace / "d").mkdir()
    with pytest.raises(ToolError, match="is a directory"):
        approval_of(WriteFileTool(), workspace, path="d", content="x")
    with pytest.raises(ToolError, match="missing required argument: content"):
        approval_of(WriteFileTool(), workspace, path="f.txt")


async def test_write_refuses_if_a_symlink_appeared_after_approval(
    workspace: Path, outside: Path
) -> None:
    (workspace / "d").mkdir()
    tool = WriteFileTool()
    ctx = make_ctx(workspace)
    plan = tool.plan({"path": "d/f.txt", "content": "x"}, ctx)
    assert plan.approval is not None and not plan.approval.outside_workspace
    shutil.rmtree(workspace / "d")
    (workspace / "d").symlink_to(outside)
    outcome = await tool.run(plan, ctx)
    assert not outcome.success
    assert "symlink appeared" in outcome.output
    assert not (outside / "f.txt").exists()


async def test_write_failure_is_an_outcome(workspace: Path) -> None:
    (workspace / "file").write_text("")
    outcome = await call(WriteFileTool(), workspace, path="file/child.txt", content="x")
    assert not outcome.success
    assert outcome.output.startswith("cannot write file/child.txt")


# --- edit_file ---------------------------------------------------------------


async def test_edit_replaces_a_unique_string(workspace: Path) -> None:
    (workspace / "m.py").write_text("def f():\n    return 1\n")
    tool = EditFileTool()
    need = approval_of(tool, workspace, path="m.py", old_string="1", new_string="2")
    assert need is not None
    assert (need.kind, need.operation, need.outside_workspace) == ("file", "edit", False)
    assert need.target == real(workspace / "m.py")
    outcome = await call(tool, workspace, path="m.py", old_string="return 1", new_string="return 2")
    assert outcome.success
    assert outcome.output == "Edited m.py: replaced 1 occurrence"
    applied = "--- a/m.py\n+++ b/m.py\n@@ -1,2 +1,2 @@\n def f():\n-    return 1\n+    return 2\n"
    assert outcome.details == {
        "path": "m.py",
        "replacements": 1,
        "changes": [{"path": "m.py", "kind": "update", "diff": applied}],
    }
    assert (workspace / "m.py").read_text() == "def f():\n    return 2\n"


async def test_edit_outside_is_flagged(workspace: Path, outside: Path) -> None:
    (outside / "o.txt").write_text("a")
    need = approval_of(
        EditFileTool(), workspace, path=str(outside / "o.txt"), old_string="a", new_string="b"
    )
    assert need is not None
    assert need.operation == "edit"
    assert need.outside_workspace


async def test_edit_no_match_and_ambiguous_match_fail(workspace: Path) -> None:
    path = workspace / "t.txt"
    path.write_text("x = 1\nx = 1\n")
    tool = EditFileTool()
    outcome = await call(tool, workspace, path="t.txt", old_string="y = 1", new_string="y = 2")
    assert not outcome.success
    assert "old_string was not found in t.txt" in outcome.output
    outcome = await call(tool, workspace, path="t.txt", old_string="x = 1", new_string="x = 2")
    assert not outcome.success
    assert "occurs 2 times in t.txt" in outcome.output
    assert "replace_all" in outcome.output
    assert path.read_text() == "x = 1\nx = 1\n"
    outcome = await call(
        tool, workspace, path="t.txt", old_string="x = 1", new_string="x = 2", replace_all=True
    )
    assert outcome.success
    assert outcome.output == "Edited t.txt: replaced 2 occurrences"
    assert path.read_text() == "x = 2\nx = 2\n"


def test_edit_argument_refusals(workspace: Path) -> None:
    (workspace / "t.txt").write_text("abc")
    tool = EditFileTool()
    with pytest.raises(ToolError, match="old_string must not be empty"):
        approval_of(tool, workspace, path="t.txt", old_string="", new_string="x")
    with pytest.raises(ToolError, match="identical"):
        approval_of(tool, workspace, path="t.txt", old_string="a", new_string="a")
    with pytest.raises(ToolError, match="must be a boolean"):
        approval_of(tool, workspace, path="t.txt", old_string="a", new_string="b", replace_all=1)
    with pytest.raises(ToolError, match="no such file"):
        approval_of(tool, workspace, path="missing.txt", old_string="a", new_string="b")


async def test_edit_refuses_binary_non_utf8_and_oversized_files(workspace: Path) -> None:
    (workspace / "bin").write_bytes(b"ab\0cd")
    (workspace / "latin1.txt").write_bytes("café".encode("latin-1"))
    (workspace / "big.txt").write_text("a" * 200)
    outcome = await call(EditFileTool(), workspace, path="bin", old_string="ab", new_string="x")
    assert not outcome.success
    assert "binary" in outcome.output
    outcome = await call(
        EditFileTool(), workspace, path="latin1.txt", old_string="caf", new_string="x"
    )
    assert not outcome.success
    assert "not valid UTF-8" in outcome.output
    assert (workspace / "latin1.txt").read_bytes() == "café".encode("latin-1")
    outcome = await call(
        EditFileTool(max_bytes=100), workspace, path="big.txt", old_string="a", new_string="b"
    )
    assert not outcome.success
    assert "larger than 100 bytes" in outcome.output


async def test_a_directory_swapped_for_a_link_after_approval_is_refused(
    workspace: Path, outside: Path
) -> None:
    """Between plan (what the approval showed) and run (after a person decided),
    a directory in the path becomes a symlink elsewhere: read and list refuse."""
    shared = workspace / "shared"
    shared.mkdir()
    (shared / "notes.txt").write_text("public\n")
    (outside / "notes.txt").write_text("PRIVATE KEY\n")
    ctx = ToolContext(workspace=workspace, thread_id="t", turn_id="u", call_id="c")
    read, listing = ReadFileTool(), ListDirTool()
    read_plan = read.plan({"path": "shared/notes.txt"}, ctx)
    list_plan = listing.plan({"path": "shared"}, ctx)
    (shared / "notes.txt").unlink()
    shared.rmdir()
    shared.symlink_to(outside)
    for tool, plan in ((read, read_plan), (listing, list_plan)):
        outcome = await tool.run(plan, ctx)
        assert outcome.success is False
        assert "changed" in outcome.output and "PRIVATE" not in outcome.output
