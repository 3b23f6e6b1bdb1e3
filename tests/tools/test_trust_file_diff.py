"""The diff an approval of ``write_file`` or ``edit_file`` carries
(``ApprovalNeed.diff``): the real file as it is against what the call would
write, paths relative to the workspace, bounded (issue 24)."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

from appserver.tools.base import ApprovalNeed, ToolContext
from appserver.tools.file_diff import DIFF_MAX_BYTES, MATCH_MAX_PAIRS, unified_diff
from appserver.tools.files import EditFileTool, WriteFileTool


def need_of(tool: Any, workspace: Path, **arguments: Any) -> ApprovalNeed:
    ctx = ToolContext(workspace=workspace, thread_id="t", turn_id="u", call_id="c")
    need: ApprovalNeed | None = tool.plan(arguments, ctx).approval
    assert need is not None
    return need


def test_a_new_file_diffs_against_nothing(workspace: Path) -> None:
    need = need_of(WriteFileTool(), workspace, path="src/new.py", content="a = 1\nb = 2\n")
    assert need.diff == "--- /dev/null\n+++ b/src/new.py\n@@ -0,0 +1,2 @@\n+a = 1\n+b = 2\n"


def test_a_write_diffs_the_real_file(workspace: Path) -> None:
    (workspace / "m.py").write_text("one\ntwo\nthree\n")
    need = need_of(WriteFileTool(), workspace, path="m.py", content="one\n2\nthree\n")
    assert need.diff == (
        "--- a/m.py\n+++ b/m.py\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n three\n"
    )  # fmt: skip


def test_an_edit_diffs_the_file_before_and_after_the_replacement(workspace: Path) -> None:
    (workspace / "sub").mkdir()
    (workspace / "sub" / "f.txt").write_text("x = 1\ny = 1\n")
    need = need_of(
        EditFileTool(), workspace, path="sub/f.txt", old_string="y = 1", new_string="y = 2"
    )
    assert need.diff == (
        "--- a/sub/f.txt\n+++ b/sub/f.txt\n@@ -1,2 +1,2 @@\n x = 1\n-y = 1\n+y = 2\n"
    )  # fmt: skip
    need = need_of(
        EditFileTool(),
        workspace,
        path="sub/f.txt",
        old_string="1",
        new_string="3",
        replace_all=True,
    )
    assert need.diff is not None and "-x = 1\n-y = 1\n+x = 3\n+y = 3\n" in need.diff


def test_an_edit_that_would_fail_says_why_instead(workspace: Path) -> None:
    (workspace / "f.txt").write_text("a a\n")
    need = need_of(EditFileTool(), workspace, path="f.txt", old_string="zzz", new_string="y")
    assert need.diff == "[no diff of f.txt: old_string does not occur in the file now]\n"
    need = need_of(EditFileTool(), workspace, path="f.txt", old_string="a", new_string="b")
    assert need.diff is not None and "occurs 2 times" in need.diff


def test_outside_the_workspace_the_path_is_absolute(workspace: Path, tmp_path: Path) -> None:
    (tmp_path / "o.txt").write_text("old\n")
    need = need_of(WriteFileTool(), workspace, path="../o.txt", content="new\n")
    where = os.path.realpath(tmp_path / "o.txt")
    assert need.diff == f"--- {where}\n+++ {where}\n@@ -1 +1 @@\n-old\n+new\n"


def test_a_missing_final_newline_is_marked() -> None:
    diff = unified_diff("f", "a\nb", "a\nc")
    assert diff.endswith("-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n")


def test_lines_split_only_at_newlines() -> None:
    """U+2028, form feeds and CRs are part of a line: a change hidden after
    one is shown on the line it is on, not as a separate harmless line."""
    diff = unified_diff("f", "safe\n", "safe\u2028rm -rf ~\r\n")
    assert "-safe\n+safe\u2028rm -rf ~\r\n" in diff


def test_a_long_diff_is_cut_with_a_line_saying_so(workspace: Path) -> None:
    content = "".join(f"line {n}\n" for n in range(20000))
    need = need_of(WriteFileTool(), workspace, path="big.txt", content=content)
    assert need.diff is not None
    assert len(need.diff.encode()) <= DIFF_MAX_BYTES + 100
    last = need.diff.splitlines()[-1]
    assert last.startswith("[... diff truncated at 64 KiB: ") and last.endswith(" more lines]")


def test_binary_and_huge_files_are_not_diffed(workspace: Path) -> None:
    (workspace / "bin").write_bytes(b"\x00\x01")
    need = need_of(WriteFileTool(), workspace, path="bin", content="text\n")
    assert need.diff == "[no diff of bin: it looks like a binary file]\n"
    (workspace / "huge.txt").write_text("x" * (2 * 1024 * 1024))
    need = need_of(WriteFileTool(), workspace, path="huge.txt", content="small\n")
    assert need.diff is not None and "larger than" in need.diff


def test_a_name_with_a_newline_cannot_fake_a_header() -> None:
    diff = unified_diff("a\n+++ b/evil", None, "x\n")
    assert diff.splitlines()[1] == '+++ "b/a\\n+++ b/evil"'


def test_no_change_is_said() -> None:
    assert unified_diff("f", "same\n", "same\n").endswith("(no change)\n")


def _apply(old: str, diff: str) -> str:
    """``old`` patched with a unified ``diff`` (what a person reading it infers)."""
    lines = diff.split("\n")[2:]  # past the --- / +++ header
    source = old.split("\n")
    result: list[str] = []
    at = 0
    for line in lines:
        if line.startswith("@@"):
            start = int(line.split()[1][1:].split(",")[0])
            count = line.split()[1][1:].split(",")
            begin = start - 1 if len(count) == 1 or count[1] != "0" else start
            result.extend(source[at:begin])
            at = begin
        elif line.startswith((" ", "-")):
            assert source[at] == line[1:]
            at += 1
            if line[0] == " ":
                result.append(line[1:])
        elif line.startswith("+"):
            result.append(line[1:])
    result.extend(source[at:])
    return "\n".join(result)


def test_applying_the_diff_gives_what_the_call_writes() -> None:
    """On random edits of files with many equal lines (where matching is
    ambiguous), and past the matching budget (one replacing hunk)."""
    chance = random.Random(24)
    for budget in (MATCH_MAX_PAIRS, 4):
        for _ in range(300):
            old = [str(chance.randint(0, 4)) for _ in range(chance.randint(1, 40))]
            new = list(old)
            for _ in range(chance.randint(1, 5)):
                where = chance.randint(0, len(new))
                roll = chance.random()
                if roll < 0.3 and new:
                    del new[min(where, len(new) - 1)]
                elif roll < 0.6:
                    new.insert(where, str(chance.randint(0, 6)))
                elif new:
                    new[min(where, len(new) - 1)] = "z"
            before, after = "\n".join(old) + "\n", "\n".join(new) + "\n"
            diff = unified_diff("f", before, after, match_max_pairs=budget)
            if before != after:
                assert _apply(before, diff) == after, (before, after, diff)
