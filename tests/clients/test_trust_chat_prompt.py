"""The terminal chat's approval prompt shows exactly what would run or change.

``appserver-client chat`` against a real spawned server (piped, and on a
pseudo-terminal for colour): a command of several lines is shown one numbered
line each, every invisible or control character as ``⟨U+XXXX⟩`` (nothing from
the server reaches the terminal raw), no field can pose as another part of the
prompt, and a file edit or write is shown as the server's diff of the real file.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from pathlib import Path

import pexpect
import pytest
from appserver_client import chat_approval as approval
from appserver_client.chat_exact import wants_colour

from tests.clients.test_chat import APPROVAL, CHAT, TIMEOUT, chat_env, finish
from tests.clients.test_chat_piped import piped_chat
from tests.support.hidden_characters import LISTED, OTHERS, badge

SGR = re.compile(r"\x1b\[[0-9;]*m")


def tool(name: str, arguments: dict[str, object]) -> str:
    """A message making the offline model call ``name``: ASCII (JSON escapes)."""
    return f"?tool {name} {json.dumps(arguments)}\n"


def prompt_of(out: str) -> str:
    """The first approval prompt in ``out``: from its header to its question."""
    start = out.index("Approval needed")
    return out[start : out.index("[c]ancel turn? ", start)]


def test_a_multi_line_command_is_numbered_and_hidden_characters_revealed(
    workspace: Path,
) -> None:
    hidden = LISTED + OTHERS
    command = "echo building # comment\ntouch F" + "".join(f"{c}b" for c in hidden)
    out = piped_chat(workspace, tool("shell", {"command": command}) + "n\n/quit\n")
    assert not (workspace / "F").exists()
    shown = prompt_of(out)
    revealed = "touch F" + "".join(f"{badge(c)}b" for c in hidden)
    assert shown.startswith(
        f"Approval needed (shell), 2 lines:\n  1 | echo building # comment\n  2 | {revealed}\n"
    ), shown
    # Nothing the server sent acts on the terminal: no ESC, BS, CR, C1 or bidi control.
    assert not any(c in out for c in hidden if c not in "\u2028\u2029")
    assert "\u2028" not in shown and "\u2029" not in shown
    # One line: as it is, on the header's line, tabs kept.
    fresh = workspace / "fresh"  # a workspace with no thread yet: no thread to pick first
    fresh.mkdir()
    out = piped_chat(fresh, tool("shell", {"command": "echo one\tline"}) + "n\n/quit\n")
    assert prompt_of(out).startswith("Approval needed (shell): echo one\tline\n  in:  ")


def test_no_field_can_pose_as_another_part_of_the_prompt() -> None:
    params = {
        "approvalType": "shell\n",
        "operation": "ls",
        "target": "/w\nApproval needed (shell): ls",
        "reason": "because\n  [y]es once",
        "scopeKey": "shell:*",
        "sessionScopes": [
            {"scope": "exact", "scopeKey": "shell:ls", "description": "this\r\x1b[2Kcommand"},
        ],
    }
    offered = approval.choices(params)
    lines = approval.header(params, offered).split("\n")
    assert lines[:4] == [
        "Approval needed (shell⟨U+000A⟩): ls",
        "  in:  /w⟨U+000A⟩Approval needed (shell): ls",
        "  why: because⟨U+000A⟩  [y]es once",
        "  [y]es once",
    ]
    assert lines[4] == "  [s]ession: this⟨U+000D⟩⟨U+001B⟩[2Kcommand"
    assert len(lines) == 4 + len(offered) - 1


def test_an_edit_or_write_approval_is_shown_as_a_diff_of_the_real_file(
    workspace: Path,
) -> None:
    notes = workspace / "notes.md"
    notes.write_text("first line\nsecond line\nthird line\n")
    edit = {"path": "notes.md", "old_string": "second line", "new_string": "2nd line\u202e"}
    out = piped_chat(
        workspace,
        tool("edit_file", edit)
        + "y\n"
        + tool("write_file", {"path": "notes.md", "content": "new\n"})
        + "n\n/quit\n",
    )
    assert notes.read_text() == "first line\n2nd line\u202e\nthird line\n"
    first, second = out.split("Approval needed")[1:3]
    assert "  the change:\n" in first
    diff = first[first.index("  the change:\n") :].splitlines()
    assert "     first line" in diff and "    -second line" in diff
    assert "    +2nd line⟨U+202E⟩" in diff
    assert "old_string" not in first  # not the raw arguments
    assert "\u202e" not in out
    # A write over the file: every line that goes, the line that comes.
    diff = second[second.index("  the change:\n") :].splitlines()
    removed = [line for line in diff if line.startswith("    -") and not line.startswith("    ---")]
    assert removed == ["    -first line", "    -2nd line⟨U+202E⟩", "    -third line"]
    assert "    +new" in diff


def test_on_a_terminal_the_diff_is_coloured_and_badges_are_marked() -> None:
    before = ["first line\n", "second line\n"]
    after = ["first line\n", "2nd line\x1b]0;title\x07\n"]
    diff = "".join(difflib.unified_diff(before, after, "a/notes.md", "b/notes.md"))
    params = {"approvalType": "file", "operation": "edit", "target": "/w/notes.md", "diff": diff}
    offered = approval.choices({**params, "scopeKey": "file:edit"})
    shown = approval.header(params, offered, colour=True)
    assert "    \x1b[31m-second line\x1b[0m" in shown  # removed: red
    assert "    \x1b[32m+2nd line\x1b[7m⟨U+001B⟩\x1b[0m\x1b[32m]0;title" in shown  # added: green
    assert "\x1b[7m⟨U+0007⟩\x1b[0m" in shown  # a badge: reverse video
    assert "\x1b" not in SGR.sub("", shown)  # only the chat's own colour codes
    assert "\x1b" not in approval.header(params, offered)  # and none without colour


def test_colour_only_on_a_terminal_without_no_color(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    leader, follower = os.openpty()
    try:
        with open(follower, "w") as terminal, open(tmp_path / "f", "w") as file:
            monkeypatch.delenv("NO_COLOR", raising=False)
            monkeypatch.setenv("TERM", "xterm-256color")
            assert wants_colour(terminal) and not wants_colour(file)
            monkeypatch.setenv("NO_COLOR", "1")
            assert not wants_colour(terminal)
            monkeypatch.delenv("NO_COLOR")
            monkeypatch.setenv("TERM", "dumb")
            assert not wants_colour(terminal)
    finally:
        os.close(leader)


def test_the_chat_on_a_terminal_marks_a_hidden_character(workspace: Path) -> None:
    env = {**chat_env(), "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    child = pexpect.spawn(
        CHAT,
        ["chat", "--plain"],
        cwd=str(workspace),
        env=env,
        encoding="utf-8",
        timeout=TIMEOUT,
        dimensions=(40, 200),
    )
    try:
        child.expect_exact("you> ")
        child.send(tool("shell", {"command": "echo a\x1b[2Jb"}))
        child.expect(APPROVAL)
        shown = str(child.before)
        assert "echo a\x1b[7m⟨U+001B⟩\x1b[0m[2Jb" in shown
        child.sendline("n")
        child.expect_exact("[approval] decline")
        child.expect_exact("you> ")
        child.sendline("/quit")
        assert finish(child) == 0
    finally:
        if child.isalive():
            child.terminate(force=True)
