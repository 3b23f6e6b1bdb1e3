"""What a person sees of `appserver-client chat`: the chat runs in a
pseudo-terminal of 80 columns and its bytes go through a terminal emulator
(pyte); the assertions read the SCREEN, not the byte stream, so text that was
printed and then erased by a redraw counts as gone."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pexpect
import pyte
import pytest

from tests.clients.test_chat import CHAT, TIMEOUT, chat_env, finish
from tests.clients.test_chat_piped import SPINNER, piped_chat

COLUMNS, ROWS = 80, 40


class Terminal:
    """The chat in a pty of ``COLUMNS`` x ``ROWS``, its output fed to pyte."""

    def __init__(self, child: pexpect.spawn) -> None:
        self.child = child
        self.screen = pyte.HistoryScreen(COLUMNS, ROWS, history=2000)
        self.stream = pyte.ByteStream(self.screen)

    def pump(self, wait: float = 0.05) -> None:
        """Feed whatever the chat wrote (waiting up to ``wait`` for some)."""
        while True:
            try:
                data = self.child.read_nonblocking(65536, timeout=wait)
            except pexpect.TIMEOUT:
                return
            except pexpect.EOF:
                return
            self.stream.feed(data)
            wait = 0  # drain what is there, then return

    def lines(self) -> list[str]:
        """Every line a person can scroll to: the scrollback, then the screen."""
        history = [
            "".join(line[column].data for column in range(COLUMNS)).rstrip()
            for line in self.screen.history.top
        ]
        return history + [line.rstrip() for line in self.screen.display]

    def text(self) -> str:
        return "\n".join(self.lines())

    def flat(self) -> str:
        """The screen as one line: rows joined as the terminal wrapped them
        (a full row runs on into the next), blanks squeezed to one space."""
        history = [
            "".join(line[column].data for column in range(COLUMNS))
            for line in self.screen.history.top
        ]
        return re.sub(r"\s+", " ", "".join(history + list(self.screen.display)))

    def wait_for(self, predicate: Callable[[str], bool], what: str) -> str:
        """Pump until the screen satisfies ``predicate``; the screen's text."""
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            self.pump()
            text = self.text()
            if predicate(text):
                return text
        raise AssertionError(f"never saw {what} on the screen:\n{self.text()}")

    def wait_text(self, needle: str) -> str:
        return self.wait_for(lambda text: needle in text, repr(needle))

    def send(self, keys: str) -> None:
        self.child.send(keys)


@contextmanager
def terminal(workspace: Path, term: str = "xterm-256color", **extra: str) -> Iterator[Terminal]:
    env = chat_env()
    env["TERM"] = term
    env["PROMPT_TOOLKIT_NO_CPR"] = "1"  # the pty does not answer cursor-position queries
    env["XDG_STATE_HOME"] = str(workspace.parent / "state")
    env.update(extra)
    child = pexpect.spawn(CHAT, ["chat"], cwd=str(workspace), env=env, timeout=TIMEOUT)
    child.setwinsize(ROWS, COLUMNS)
    try:
        yield Terminal(child)
    finally:
        if child.isalive():
            child.terminate(force=True)


CHUNKS = " ".join(f"chunk {number}" for number in range(1, 13))


def prompt_shown(text: str) -> bool:
    """The idle prompt is the last thing on the screen."""
    return [line for line in text.splitlines() if line.strip()][-1].startswith("you>")


@pytest.mark.parametrize("term", ["xterm-256color", "xterm"])
def test_a_streamed_answer_stays_on_the_screen(workspace: Path, term: str) -> None:
    with terminal(workspace, term) as screen:
        screen.wait_text("you>")
        screen.send("?delay 150\x1b\r?stream 12\r")  # Alt-Enter: one message of two lines
        # While it streams, every chunk so far stays readable.
        screen.wait_text("chunk 5 ")
        assert "chunk 1 chunk 2 chunk 3 chunk 4 chunk 5" in screen.flat()
        done = screen.wait_for(lambda text: "chunk 12" in text and prompt_shown(text), "the end")
        assert CHUNKS in screen.flat()
        # The spinner is gone with the turn, and never glued onto the reply.
        assert not any(frame in done for frame in SPINNER), done
        screen.send("hello there\r")
        done = screen.wait_for(
            lambda text: "You said: hello there" in text and prompt_shown(text), "the reply"
        )
        reply = next(line for line in done.splitlines() if "You said: hello there" in line)
        assert reply.strip() == "You said: hello there"
        assert not any(frame in done for frame in SPINNER), done
        screen.send("\x04")  # Ctrl-D
        assert finish(screen.child) == 0


@pytest.mark.parametrize("chunks", [60, 400])
def test_a_long_streamed_answer_wraps_and_stays(workspace: Path, chunks: int) -> None:
    # 60 chunks wrap over several 80-column lines; 400 are more than the
    # screen's 40 rows hold, so they are printed as they come: none is lost.
    with terminal(workspace) as screen:
        screen.wait_text("you>")
        screen.send(f"?delay 5\x1b\r?stream {chunks}\r")
        last = f"chunk {chunks}"
        screen.wait_for(lambda text: last in text and prompt_shown(text), "the end")
        expected = " ".join(f"chunk {number}" for number in range(1, chunks + 1))
        assert expected in screen.flat()
        screen.send("\x04")
        assert finish(screen.child) == 0


def test_a_streamed_answer_on_a_dumb_terminal_and_piped(workspace: Path, tmp_path: Path) -> None:
    with terminal(workspace, "dumb") as screen:
        screen.wait_text("you>")
        screen.send("?delay 100\\\r?stream 12\r")  # a trailing \ goes on
        done = screen.wait_for(lambda text: "chunk 12" in text and prompt_shown(text), "the end")
        assert CHUNKS in screen.flat()
        assert not any(frame in done for frame in SPINNER)
        screen.send("\x04")
        assert finish(screen.child) == 0
    (tmp_path / "piped").mkdir()
    out = piped_chat(tmp_path / "piped", "?stream 12\n/quit\n")
    assert CHUNKS in out


def test_an_interrupted_command_says_it_was_interrupted(workspace: Path) -> None:
    with terminal(workspace) as screen:
        screen.wait_text("you>")
        screen.send("!sleep 30\r")
        screen.wait_text("ancel turn?")
        screen.send("y\r")
        screen.wait_text("(Ctrl-C interrupts)")
        screen.wait_text("[#1 $ sleep 30]")
        screen.send("\x03")
        done = screen.wait_for(
            lambda text: "[turn cancelled" in text and prompt_shown(text), "the cancel"
        )
        assert "[#1 interrupted" in done
        assert "exit code None" not in done
        screen.send("\x04")
        assert finish(screen.child) == 0


def test_a_finished_reply_is_rendered_as_markdown_in_colour(workspace: Path) -> None:
    with terminal(workspace) as screen:
        screen.wait_text("you>")
        screen.send("some **bold** and `code`\r")
        done = screen.wait_for(
            lambda text: "You said: some bold and code" in text and prompt_shown(text), "it"
        )
        assert "You said: some bold and code" in done.splitlines()  # no ** nor `
        row = next(
            number
            for number, line in enumerate(screen.screen.display)
            if "You said: some bold" in line
        )
        cells = screen.screen.buffer[row]
        column = screen.screen.display[row].index("bold")
        assert cells[column].bold  # emphasis, as a person sees it
        screen.send("\x04")
        assert finish(screen.child) == 0


def test_no_color_keeps_the_reply_as_written(workspace: Path) -> None:
    with terminal(workspace, NO_COLOR="1") as screen:
        screen.wait_text("you>")
        screen.send("some **bold** text\r")
        done = screen.wait_for(
            lambda text: "You said: some **bold** text" in text and prompt_shown(text), "it"
        )
        assert not any(frame in done for frame in SPINNER)
        screen.send("\x04")
        assert finish(screen.child) == 0


def test_markdown_renders_code_blocks_lists_and_emphasis() -> None:
    from appserver_client.chat_render import markdown

    shown = markdown("# Plan\n\n- *one*\n- two\n\n```python\nprint(1)\n```\n\x1b[2J", 60)
    plain = re.sub(r"\x1b\[[0-9;]*m", "", shown)
    assert "• one" in plain and "• two" in plain
    assert "print(1)" in plain and "```" not in plain
    assert "\x1b[3m" in shown  # italics
    assert "\x1b[2J" not in shown and "⟨U+001B⟩[2J" in plain  # no raw control from the model
    assert all(len(line) < 60 for line in plain.splitlines())


def test_tool_calls_results_and_errors_are_coloured_only_with_colour() -> None:
    from appserver_client.chat_view import View
    from appserver_client.notifications import Notification

    def shown(colour: bool) -> str:
        written: list[str] = []
        view = View(written.append, colour=colour)
        for kind, payload in [
            ("toolCall", {"toolName": "grep", "arguments": {"pattern": "x"}}),
            ("toolResult", {"callId": "c", "result": "found"}),
            ("error", {"message": "it broke"}),
        ]:
            item = {"id": kind, "type": kind, "payload": payload}
            view.render(Notification("item/completed", {"item": item}))
        return "".join(written)

    assert shown(False) == '[tool] grep {"pattern": "x"}\n[result] found\n[error] it broke\n'
    coloured = shown(True)
    assert "\x1b[36m[tool] grep" in coloured and "\x1b[32m[result] found" in coloured
    assert "\x1b[1;31m[error] it broke" in coloured
