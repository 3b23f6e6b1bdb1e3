"""The user's side of ``appserver-client chat``: reading what is typed, Ctrl-C, a
prompt kept open (with a spinner) while a turn runs, and the approval prompt.

:class:`ChatPrompts` holds the session's state; :class:`~appserver_client.chat_session.Chat`
adds the threads, the prompt loop and the turns.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from typing import Any, TextIO

from appserver_client import chat_approval as approval
from appserver_client._generated import ApprovalRequestParams, SessionIdentity
from appserver_client.chat_commands import SettingsCommands
from appserver_client.chat_exact import wants_colour
from appserver_client.chat_input import (
    CANCELLED,
    INTERRUPTED,
    EditorInput,
    PlainInput,
    _Marker,
    history_path,
)
from appserver_client.chat_subagents import SubAgents
from appserver_client.chat_tasks import Tasks
from appserver_client.chat_view import View, one_line
from appserver_client.client import AppServerClient
from appserver_client.errors import RpcError

PROMPT = "you> "
SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


class ChatPrompts:
    """The session's state, its output, and every prompt that asks the user."""

    def __init__(
        self, args: argparse.Namespace, out: TextIO | None = None, editor: bool = False
    ) -> None:
        self.args = args
        self.out = out or sys.stdout
        self.input: PlainInput | EditorInput = (
            EditorInput(history_path()) if editor else PlainInput(self.out)
        )
        # With the editor, streamed text is held and shown inside the spinner
        # prompt until its line is complete: a redraw erases partial lines.
        self.view = View(self._emit, colour=wants_colour(self.out), live=editor)
        self.identity: SessionIdentity = {"channelName": "cli", "userId": args.user}
        self.client: AppServerClient | None = None
        self.thread_id: str | None = None
        self.workspace_path: str | None = None  # the thread's, for approval prompts
        self.listing: list[str] = []
        self.quit = asyncio.Event()
        self.turn_active = False
        self.turn_id: str | None = None
        self.turn_started_at = 0.0
        self.interrupt_wanted = False
        self.approval_cancel = asyncio.Event()
        self.approval_open = False
        self.idle_interrupts = 0  # Ctrl-C presses at an idle prompt in a row
        self.queued: list[str] = []  # typed while a turn ran; sent after it
        self.settings: SettingsCommands | None = None
        self.agents: SubAgents | None = None  # the current thread's children (/agents)
        self.tasks: Tasks | None = None  # the workspace's automation tasks (/tasks)
        self.prompting: str | None = None  # the prompt a read shows now (ask)
        self._typeahead: asyncio.Task[None] | None = None
        self._typeahead_stop = asyncio.Event()
        self._approval_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[Any]] = set()

    # --- output -------------------------------------------------------------

    def _emit(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    def write(self, text: str) -> None:
        """Write ``text`` as is."""
        self.view.write(text)

    def line(self, text: str = "") -> None:
        """Write ``text`` on a line of its own."""
        self.view.line(text)

    def note(self, text: str) -> None:
        """A line that comes on its own (a SubAgent's or a task's news), in the note colour.
        At a plain prompt it goes below the prompt, which is shown again; the
        line editor prints it above its prompt itself."""
        waiting = self.prompting is not None and not self.input.editor
        if waiting:
            self.write("\n")
        self.view.line(text, "note")
        if waiting and self.prompting is not None:
            self.write(self.prompting)

    def on_sigint(self) -> None:
        """Ctrl-C: answer an open approval with cancel, else interrupt the turn,
        else (at an idle prompt) warn once and leave on the second press."""
        if self.approval_open:
            self.approval_cancel.set()
        elif self.turn_active:
            self.interrupt_turn()
        else:
            self.idle_interrupts += 1
            if self.idle_interrupts >= 2:
                self.quit.set()
            else:
                self.line("(Ctrl-C again to quit, or Ctrl-D)")
                if not self.input.editor:
                    self.write(PROMPT)  # the pending read goes on under this prompt

    def interrupt_turn(self) -> None:
        """Ask the server to interrupt the running turn (once it has an id)."""
        self.line("(interrupting the turn…)")
        self.interrupt_wanted = True
        if self.turn_id is not None:
            self.spawn(self.interrupt(self.turn_id))

    def spawn(self, coroutine: Any) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def interrupt(self, turn_id: str) -> None:
        assert self.client is not None and self.thread_id is not None
        with contextlib.suppress(RpcError):  # it may have just ended
            await self.client.turn_interrupt(thread_id=self.thread_id, turn_id=turn_id)

    async def ask(self, prompt: str) -> str | None:
        """A message from the user; ``None`` when they want to leave."""
        while True:
            self.prompting = prompt
            try:
                answer = await self.input.read(prompt, cancel=self.quit)
            finally:
                self.prompting = None
            self.view.line_start = True
            if answer is INTERRUPTED:  # the editor caught Ctrl-C
                self.on_sigint()
                if self.quit.is_set():
                    return None
                continue
            if answer is None or isinstance(answer, _Marker):
                return None
            self.idle_interrupts = 0
            return answer

    # --- typing while a turn runs (the editor only) -------------------------

    def busy_prompt(self) -> str:
        """The prompt while a turn runs: the text streaming in (not yet a whole
        line or message), then a spinner, what the turn does, for how long."""
        elapsed = time.monotonic() - self.turn_started_at
        frame = SPINNER[int(elapsed * 10) % len(SPINNER)]
        status = f"{frame} {self.view.activity} {elapsed:.0f}s  (Ctrl-C interrupts) > "
        live = self.view.live_text
        return f"{live}\n{status}" if live else status

    def start_typeahead(self) -> None:
        """On a terminal, keep a prompt open while the turn runs: its spinner
        shows the turn is alive, and what is typed is sent after the turn."""
        if not self.input.editor or self._typeahead is not None:
            return
        self._typeahead_stop.clear()
        self._typeahead = asyncio.get_running_loop().create_task(self._type_ahead())

    async def stop_typeahead(self) -> None:
        """Close the type-ahead prompt; what was typed stays as the next draft."""
        task, self._typeahead = self._typeahead, None
        if task is None:
            return
        self._typeahead_stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def _type_ahead(self) -> None:
        while not self._typeahead_stop.is_set():
            answer = await self.input.read(
                self.busy_prompt, cancel=self._typeahead_stop, refresh=0.1
            )
            if answer is INTERRUPTED:
                self.interrupt_turn()
            elif isinstance(answer, str) and answer.strip():
                self.queued.append(answer)
                self.line(f"(queued for after this turn: {one_line(answer, 60)})")
            elif answer is None or answer is CANCELLED:
                return

    # --- approvals ----------------------------------------------------------

    async def approve(self, params: ApprovalRequestParams) -> dict[str, Any]:
        """The approval handler: ask the user (one prompt at a time)."""
        async with self._approval_lock:
            resume_typeahead = self._typeahead is not None
            await self.stop_typeahead()  # the approval prompt takes the input
            self.approval_cancel.clear()
            self.approval_open = True
            offered = approval.choices(params)
            try:
                shown = approval.header(
                    params, offered, colour=wants_colour(self.out), workspace=self.workspace_path
                )
                self.line(shown)
                while True:
                    answer = await self.input.read(
                        approval.prompt(offered), cancel=self.approval_cancel, single_line=True
                    )
                    self.view.line_start = True
                    if answer is CANCELLED or answer is INTERRUPTED:
                        self.line("(cancelling the turn…)")
                        return {"decision": "cancel"}
                    if not isinstance(answer, str):
                        return {"decision": "decline"}
                    result = approval.answer(offered, answer)
                    if result is not None:
                        return result
                    self.line(f"Please answer {approval.keys_hint(offered)}.")
            finally:
                self.approval_open = False
                if resume_typeahead and self.turn_active:
                    self.start_typeahead()
