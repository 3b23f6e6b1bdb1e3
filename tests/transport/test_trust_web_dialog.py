"""The web page's approval dialog shows exactly what would run or change (docs/web.md).

Real Chromium and a real ``appserver app-server --listen`` (the fixtures of
tests/transport/test_web_browser.py): a multi-line command is shown line by line and numbered,
every invisible or control character is a visible badge, a command too long for its box
opens at its start with no accept button focused, and a file edit is shown as a diff of
the real file.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tests.support.hidden_characters import LISTED, OTHERS, badge
from tests.transport import test_web_browser as web
from tests.transport.test_web_browser import (
    ARTIFACTS,
    Page,
    Tabs,
    WebServer,
    new_thread,
    turn,
    wait_turn,
)

# The browser tests' fixtures: one Chromium per module, servers and tabs per test.
browser = web.browser
servers = web.servers
tabs = web.tabs

ACCEPTS = ("accept", "acceptForSession", "acceptAlways")


def ask(page: Page, tool: str, arguments: dict[str, object]) -> None:
    """Have the offline model call ``tool``: the message is ASCII (JSON escapes)."""
    box = page.locator("#composer")
    box.fill(f"?tool {tool} {json.dumps(arguments)}")
    box.press("Enter")


def snapshot(page: Page, name: str) -> None:
    """A screenshot of the dialog as shown, for a reviewer (test-artifacts/)."""
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"web-approval-{name}.png"))


def focused_decision(page: Page) -> str | None:
    decision = page.evaluate("document.activeElement?.dataset?.decision ?? null")
    return None if decision is None else str(decision)


def test_a_multi_line_command_is_shown_line_by_line_and_numbered(
    servers: Callable[..., WebServer], tabs: Callable[..., Tabs]
) -> None:
    server = servers()
    page = tabs().open(server.base + "/")
    new_thread(page)
    ask(page, "shell", {"command": "echo building # comment\ntouch F"})
    dialog = page.locator("#approval")
    dialog.wait_for(state="visible")
    lines = page.locator("#approval-operation .exact-lines > li")
    assert lines.all_inner_texts() == ["echo building # comment", "touch F"]
    # Numbered: each line is a decimal list item, its number drawn in the gutter.
    styles = page.evaluate(
        """[...document.querySelectorAll('#approval-operation .exact-lines > li')]
             .map((li) => [getComputedStyle(li).display, getComputedStyle(li).listStyleType])"""
    )
    assert styles == [["list-item", "decimal"]] * 2
    assert page.inner_text("#approval-operation") == "echo building # comment\ntouch F"
    snapshot(page, "lines")
    dialog.locator('[data-decision="decline"]').click()
    wait_turn(page, 1, "completed")
    assert not (server.workspace / "F").exists()
    # The tool call in the chat reads as one line with its newline shown, not joined.
    summary = page.inner_text(f"{turn(page, 1)} .tool-call summary")
    assert summary == "shell echo building # comment⟨U+000A⟩touch F"
    # One line: shown as it is, no numbers; "Allow once" has the focus as before.
    ask(page, "shell", {"command": "echo one\tline"})
    dialog.wait_for(state="visible")
    assert page.locator("#approval-operation .exact-lines").count() == 0
    assert page.inner_text("#approval-operation") == "echo one\tline"
    assert focused_decision(page) == "accept"
    dialog.locator('[data-decision="decline"]').click()
    wait_turn(page, 2, "completed")


def test_every_invisible_or_control_character_is_a_visible_badge(
    servers: Callable[..., WebServer], tabs: Callable[..., Tabs]
) -> None:
    server = servers()
    page = tabs().open(server.base + "/")
    new_thread(page)
    hidden = LISTED + OTHERS
    command = "echo a" + "".join(f"{c}b" for c in hidden) + "\ttab"
    ask(page, "shell", {"command": command})
    dialog = page.locator("#approval")
    dialog.wait_for(state="visible")
    badges = page.locator("#approval-operation .hidden-char")
    assert badges.all_inner_texts() == [badge(c) for c in hidden]
    # The whole text reads as the command with each hidden character spelled out.
    expected = "echo a" + "".join(f"{badge(c)}b" for c in hidden) + "\ttab"
    assert page.inner_text("#approval-operation") == expected
    # Each badge is drawn, marked apart from plain text (a border), not a zero-width box.
    drawn = page.evaluate(
        """[...document.querySelectorAll('#approval-operation .hidden-char')].map((b) => {
             const box = b.getBoundingClientRect();
             return box.width > 0 && getComputedStyle(b).borderStyle !== 'none';
           })"""
    )
    assert drawn == [True] * len(hidden)
    snapshot(page, "hidden-characters")
    dialog.locator('[data-decision="decline"]').click()
    wait_turn(page, 1, "completed")


def test_a_30k_command_opens_at_its_start_with_no_accept_focused(
    servers: Callable[..., WebServer], tabs: Callable[..., Tabs]
) -> None:
    server = servers()
    page = tabs().open(server.base + "/")
    new_thread(page)
    command = "echo START " + "x" * 30_000 + " END"
    ask(page, "shell", {"command": command})
    dialog = page.locator("#approval")
    dialog.wait_for(state="visible")
    assert page.inner_text("#approval-operation") == command
    state = page.evaluate(
        """(() => {
             const box = document.getElementById('approval-operation');
             const dialog = document.getElementById('approval');
             const top = box.getBoundingClientRect().top;
             return {box: box.scrollTop, dialog: dialog.scrollTop,
                     cut: box.scrollHeight > box.clientHeight,
                     topInView: top >= 0 && top < innerHeight};
           })()"""
    )
    assert state == {"box": 0, "dialog": 0, "cut": True, "topInView": True}
    # Nothing that accepts has the focus: Enter declines, and the dialog says to scroll.
    assert focused_decision(page) not in ACCEPTS
    assert page.is_visible("#approval-overflow")
    snapshot(page, "long-command")
    page.keyboard.press("Enter")
    dialog.wait_for(state="hidden")
    wait_turn(page, 1, "completed")
    assert "Declined" in page.inner_text(f"{turn(page, 1)} .approval-word")
    # Many short lines too: the first line is where the box starts.
    command = "\n".join(f"echo {n}" for n in range(1, 2001))
    ask(page, "shell", {"command": command})
    dialog.wait_for(state="visible")
    assert page.locator("#approval-operation .exact-lines > li").count() == 2000
    assert page.evaluate("document.getElementById('approval-operation').scrollTop") == 0
    assert focused_decision(page) not in ACCEPTS
    dialog.locator('[data-decision="decline"]').click()
    wait_turn(page, 2, "completed")
    # A short command after a long one: at its start again, "Allow once" focused.
    ask(page, "shell", {"command": "echo short"})
    dialog.wait_for(state="visible")
    assert focused_decision(page) == "accept"
    assert not page.is_visible("#approval-overflow")
    dialog.locator('[data-decision="decline"]').click()
    wait_turn(page, 3, "completed")


def test_an_edit_or_write_approval_shows_a_diff_of_the_real_file(
    servers: Callable[..., WebServer], tabs: Callable[..., Tabs]
) -> None:
    server = servers()
    notes = Path(server.workspace) / "notes.md"
    notes.write_text("first line\nsecond line\nthird line\n")
    page = tabs().open(server.base + "/")
    new_thread(page)
    edit = {"path": "notes.md", "old_string": "second line", "new_string": "2nd line\u202e"}
    ask(page, "edit_file", edit)
    dialog = page.locator("#approval")
    dialog.wait_for(state="visible")
    assert page.is_visible("#approval-diff")
    assert page.locator("#approval-diff .diff-del").all_inner_texts() == ["-second line"]
    assert page.locator("#approval-diff .diff-add").all_inner_texts() == ["+2nd line⟨U+202E⟩"]
    shown = page.inner_text("#approval-diff").splitlines()
    assert " first line" in shown and " third line" in shown  # the real file around it
    colours = page.evaluate(
        """['.diff-add', '.diff-del', '.diff-line:not(.diff-add):not(.diff-del)'].map(
             (s) => getComputedStyle(document.querySelector('#approval-diff ' + s)).color)"""
    )
    assert len(set(colours)) == 3  # added, removed and context lines each have their colour
    for part in (".approval-facts", "#approval-change"):  # not the raw arguments
        assert "old_string" not in page.inner_text(f"#approval {part}")
    snapshot(page, "diff")
    dialog.locator('[data-decision="accept"]').click()
    wait_turn(page, 1, "completed")
    assert notes.read_text() == "first line\n2nd line\u202e\nthird line\n"
    # A write over an existing file: what goes and what comes.
    ask(page, "write_file", {"path": "notes.md", "content": "all new\n"})
    dialog.wait_for(state="visible")
    removed = page.locator("#approval-diff .diff-del").all_inner_texts()
    assert removed == ["-first line", "-2nd line⟨U+202E⟩", "-third line"]
    assert page.locator("#approval-diff .diff-add").all_inner_texts() == ["+all new"]
    dialog.locator('[data-decision="decline"]').click()
    wait_turn(page, 2, "completed")
    # A shell command has no diff.
    ask(page, "shell", {"command": "echo no diff"})
    dialog.wait_for(state="visible")
    assert not page.is_visible("#approval-change")
    dialog.locator('[data-decision="decline"]').click()
    wait_turn(page, 3, "completed")
