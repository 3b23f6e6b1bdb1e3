"""Where the chat's input comes from: a prompt_toolkit line editor on a terminal,
a plain line reader otherwise (pipes, scripts, ``TERM=dumb``).

Both read one *message* at a time, which may span lines:

* the editor: Enter sends; Alt-Enter (Esc then Enter) or a line ending with
  ``\\`` starts a new line; a bracketed paste is inserted as it is, newlines
  included, so a pasted block is one message.
* the plain reader: a line ending with ``\\`` continues on the next line (the
  backslash becomes a newline).

``read`` returns the text, ``None`` at end of input (Ctrl-D), :data:`CANCELLED`
when its ``cancel`` event fired first, or :data:`INTERRUPTED` for a Ctrl-C the
editor caught (the plain reader gets Ctrl-C as SIGINT instead).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TextIO


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


CANCELLED = _Marker("CANCELLED")
"""``read`` was abandoned because its ``cancel`` event was set."""
INTERRUPTED = _Marker("INTERRUPTED")
"""The user pressed Ctrl-C in the editor."""

ReadResult = str | _Marker | None


class _CtrlC(Exception):
    """Ctrl-C in the editor (an ordinary exception, unlike KeyboardInterrupt)."""


Prompt = str | Callable[[], str]


class ChatInput(Protocol):
    """What the chat reads messages and answers from."""

    editor: bool  # a full-screen-aware line editor (spinner, type-ahead)

    async def read(
        self,
        prompt: Prompt,
        *,
        cancel: asyncio.Event | None = None,
        single_line: bool = False,
        refresh: float | None = None,
    ) -> ReadResult:
        """One message (or one line with ``single_line``)."""

    def close(self) -> None:
        """Release what reading holds (threads, the terminal)."""


async def _first(task: asyncio.Future[Any], cancel: asyncio.Event | None) -> bool:
    """Wait for ``task`` or ``cancel``; whether ``task`` finished."""
    if cancel is None:
        await asyncio.wait({task})
        return True
    waiter = asyncio.get_running_loop().create_task(cancel.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
    return task.done()


class PlainInput:
    """Lines from ``input()`` on a daemon thread, one read at a time.

    A read abandoned by its caller (Ctrl-C at an approval prompt) stays
    pending; the next ``read`` takes it over and shows its own prompt, so the
    user's next line is never lost or read twice. The thread is a daemon so a
    read that never completes cannot keep the process alive.
    """

    editor = False

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._pending: asyncio.Future[str | None] | None = None
        self._thread: threading.Thread | None = None

    @property
    def busy(self) -> bool:
        """Whether a thread is blocked waiting for a line."""
        return self._thread is not None and self._thread.is_alive()

    async def read(
        self,
        prompt: Prompt,
        *,
        cancel: asyncio.Event | None = None,
        single_line: bool = False,
        refresh: float | None = None,
    ) -> ReadResult:
        """A message; lines ending with ``\\`` continue it (unless ``single_line``)."""
        text = prompt() if callable(prompt) else prompt
        lines: list[str] = []
        while True:
            line = await self._line(text, cancel)
            if line is None and lines:  # end of input inside a message: send what came
                return "\n".join(lines)
            if line is None or isinstance(line, _Marker):
                return line
            if single_line or not line.endswith("\\"):
                return "\n".join([*lines, line])
            lines.append(line[:-1])
            text = "... "

    async def _line(self, prompt: str, cancel: asyncio.Event | None) -> str | _Marker | None:
        loop = asyncio.get_running_loop()
        if self._pending is None:
            future: asyncio.Future[str | None] = loop.create_future()
            self._pending = future
            self._thread = threading.Thread(
                target=self._read, args=(loop, future, prompt), daemon=True
            )
            self._thread.start()
        elif not self._pending.done():
            self.out.write(prompt)
            self.out.flush()
        future = self._pending
        if not await _first(future, cancel):
            return CANCELLED
        self._pending = None
        return future.result()

    @staticmethod
    def _read(
        loop: asyncio.AbstractEventLoop, future: asyncio.Future[str | None], prompt: str
    ) -> None:
        try:
            line: str | None = input(prompt)
        except (EOFError, OSError, ValueError):
            line = None

        def deliver() -> None:
            if not future.done():
                future.set_result(line)

        with contextlib.suppress(RuntimeError):  # the loop is gone: we are exiting
            loop.call_soon_threadsafe(deliver)

    def close(self) -> None:
        """Nothing to release: a blocked read is a daemon thread."""


class EditorInput:
    """A prompt_toolkit session: editing, history, bracketed paste, multi-line.

    Text typed into a prompt that is abandoned (``cancel``) is kept as a draft
    and offered again by the next ``read``, so switching to an approval prompt
    or ending a turn never loses what the user was typing.
    """

    editor = True

    def __init__(self, history: Path | None) -> None:
        from prompt_toolkit import PromptSession
        from prompt_toolkit.filters import Condition
        from prompt_toolkit.history import FileHistory, History, InMemoryHistory
        from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent

        bindings = KeyBindings()

        @bindings.add("c-c")
        def _interrupt(event: KeyPressEvent) -> None:
            # Not KeyboardInterrupt, prompt_toolkit's default: raised in a task,
            # a BaseException escapes asyncio's event loop.
            event.app.exit(exception=_CtrlC())

        @bindings.add("escape", "enter")  # Alt-Enter sends the same keys
        def _newline(event: KeyPressEvent) -> None:
            event.current_buffer.insert_text("\n")

        @Condition
        def _continued() -> bool:
            before = self.session.default_buffer.document.text_before_cursor
            return not self._single_line and before.endswith("\\")

        @bindings.add("enter", filter=_continued)
        def _continue(event: KeyPressEvent) -> None:
            event.current_buffer.delete_before_cursor(1)
            event.current_buffer.insert_text("\n")

        store: History = InMemoryHistory()
        if history is not None:
            with contextlib.suppress(OSError):
                history.parent.mkdir(parents=True, exist_ok=True)
                store = FileHistory(str(history))
        self.session: PromptSession[str] = PromptSession(
            history=store, key_bindings=bindings, multiline=False
        )
        self._single_line = False
        self.draft = ""

    async def read(
        self,
        prompt: Prompt,
        *,
        cancel: asyncio.Event | None = None,
        single_line: bool = False,
        refresh: float | None = None,
    ) -> ReadResult:
        """A message from the editor (the draft from an abandoned read pre-filled)."""
        self._single_line = single_line
        draft, self.draft = ("", self.draft) if single_line else (self.draft, "")
        # A prompt that redraws itself (the spinner) leaves nothing behind.
        self.session.app.erase_when_done = refresh is not None
        task = asyncio.get_running_loop().create_task(
            self.session.prompt_async(
                prompt,
                default=draft,
                refresh_interval=refresh,
            )
        )
        finished = await _first(task, cancel)
        if not finished:
            kept = self.session.default_buffer.text
            self.session.app.erase_when_done = True  # an abandoned prompt leaves no trace
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, _CtrlC, EOFError):
                await task
            if not single_line:
                self.draft = kept
            return CANCELLED
        try:
            return task.result()
        except _CtrlC:
            return INTERRUPTED
        except EOFError:
            return None

    def close(self) -> None:
        """Nothing to release: prompt_toolkit restores the terminal per read."""


def history_path() -> Path:
    """Where the editor keeps message history across sessions."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "appserver-client" / "history"


def wants_editor(stdin: TextIO | None = None, stdout: TextIO | None = None) -> bool:
    """Use the line editor only on a real terminal: both ends a tty, not ``TERM=dumb``."""
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    try:
        ttys = stdin.isatty() and stdout.isatty()
    except (AttributeError, ValueError):
        return False
    return ttys and os.environ.get("TERM", "") not in ("", "dumb")
