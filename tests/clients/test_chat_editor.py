"""`appserver-client chat` on a real terminal (pexpect, TERM=xterm): the
prompt_toolkit editor with bracketed paste, multi-line input, type-ahead while
a turn runs, the spinner prompt, and Ctrl-C twice to leave."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pexpect

from tests.clients.test_chat import CHAT, TIMEOUT, chat_env, finish

APPROVAL = r"\[c\]ancel turn\?"  # the editor draws the trailing space as a cursor move
PASTE_START, PASTE_END = "\x1b[200~", "\x1b[201~"


@contextmanager
def editor_chat(workspace: Path, state: Path) -> Iterator[pexpect.spawn]:
    env = chat_env()
    env["TERM"] = "xterm"
    env["PROMPT_TOOLKIT_NO_CPR"] = "1"  # pexpect does not answer cursor-position queries
    env["XDG_STATE_HOME"] = str(state)  # the history file goes here
    child = pexpect.spawn(
        CHAT, ["chat"], cwd=str(workspace), env=env, encoding="utf-8", timeout=TIMEOUT
    )
    child.setwinsize(40, 200)
    try:
        yield child
    finally:
        if child.isalive():
            child.terminate(force=True)


def test_a_pasted_block_is_one_message_and_lines_continue(workspace: Path, tmp_path: Path) -> None:
    with editor_chat(workspace, tmp_path / "state") as child:
        child.expect_exact("you>")
        # A pasted ">PATH" + content: one message, so the content is written,
        # and the pasted second line is not the approval's answer.
        child.send(f"{PASTE_START}>notes.txt\nhello\nworld{PASTE_END}\r")
        child.expect(APPROVAL)
        child.send("y\r")
        child.expect_exact("Wrote 12 bytes to notes.txt.")
        assert (workspace / "notes.txt").read_text() == "hello\nworld\n"
        # A line ending with \ goes on; Alt-Enter (Esc Enter) inserts a newline.
        child.expect_exact("you>")
        child.send("one\\\rtwo\x1b\rthree\r")
        child.expect_exact("You said: one")
        child.expect_exact("you>")
        child.sendintr()
        child.expect_exact("(Ctrl-C again to quit, or Ctrl-D)")
        child.sendintr()
        assert finish(child) == 0
    assert "hello" in (tmp_path / "state" / "appserver-client" / "history").read_text()


def test_typing_while_a_turn_runs_is_kept_and_sent_after_it(
    workspace: Path, tmp_path: Path
) -> None:
    gate = workspace / "go"
    with editor_chat(workspace, tmp_path / "state") as child:
        child.expect_exact("you>")
        child.send("!while [ ! -e go ]; do sleep 0.02; done; seq 1 30\r")
        child.expect(APPROVAL)
        child.send("y\r")
        child.expect_exact("(Ctrl-C interrupts)")  # the spinner prompt while it runs
        child.expect_exact("running")
        child.send("typed meanwhile\r")
        child.expect_exact("(queued for after this turn: typed meanwhile)")
        child.send("half-typed")  # not sent: stays in the next prompt
        gate.touch()
        child.expect_exact("/show 1")  # 30 lines: 20 shown
        child.expect_exact("You said: typed meanwhile")
        child.expect_exact("half-typed")
        child.send("\x15/show 1\r")  # Ctrl-U clears the draft
        child.expect_exact("[#1, 30 line(s)]")
        child.expect_exact("30")
        child.expect_exact("you>")  # Ctrl-D at the prompt, not while /show still prints
        child.sendeof()
        assert finish(child) == 0
