"""``appserver-client chat``: talk to an appserver from a terminal.

On a terminal the input is a prompt_toolkit line editor (history, multi-line
messages, bracketed paste, a prompt that stays below streaming output and
keeps what you type while the agent works); from a pipe or with ``TERM=dumb``
it is a plain line reader. See :mod:`appserver_client.chat_input`. Output is
printed by :class:`~appserver_client.chat_view.View`; approvals are asked as
:mod:`appserver_client.chat_approval` describes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import re
import shlex
import shutil
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from appserver_client import __version__
from appserver_client import chat_approval as approval
from appserver_client._generated import ApprovalRequestParams, SessionIdentity, ThreadSummary
from appserver_client.chat_commands import SettingsCommands
from appserver_client.chat_exact import wants_colour
from appserver_client.chat_input import (
    CANCELLED,
    INTERRUPTED,
    EditorInput,
    PlainInput,
    _Marker,
    history_path,
    wants_editor,
)
from appserver_client.chat_view import View, one_line
from appserver_client.client import AppServerClient
from appserver_client.errors import AppServerError, ConnectFailed, ConnectionLost, RpcError
from appserver_client.transport import websocket_url

PROMPT = "you> "
SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
HELP = """\
Type a message and press Enter to send it to the agent.
  Several lines: end a line with \\ to go on (on a terminal, Alt-Enter / Esc Enter
  too); a pasted block is one message. Up and Down recall earlier messages.
What the built-in offline model understands (a real model reads plain language):
  !COMMAND            run COMMAND with the shell tool (you approve it first)
  >PATH               then the content on the next lines: write it to PATH
  ?tool NAME {json}   call any tool, e.g. ?tool read_file {"path": "README.md"}
  ?think TEXT         think TEXT aloud first; ?stream N, ?delay MS, ?fail KIND
Commands:
  /threads            list your recent threads
  /resume X           switch to a thread: its number in /threads, its id, or its name
  /new                start a new thread
  /show N             all of output #N (long outputs are cut at 20 lines)
  /model [N|NAME]     list the provider's models; switch this thread to one
  /status             workspace, provider, model, endpoint, approval policy, trust
  /grants             approvals remembered for good (an [a]lways answer)
  /revoke N           forget remembered approval N of /grants
  /help               this help
  /quit               leave (also Ctrl-D, or Ctrl-C twice at the prompt)
Approvals: y once, s this thread (the scope shown), w wider (every command there, this
  thread), a always (this exact call, remembered for good: /grants, /revoke), n no,
  c cancel the turn.
Ctrl-C while the agent works interrupts the turn; at an approval prompt it cancels it.
On a terminal, what you type while the agent works is sent when the turn ends.
"""


class Chat:
    """The interactive session."""

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

    # --- lifecycle ----------------------------------------------------------

    async def open(self) -> AppServerClient:
        options: dict[str, Any] = {
            "client_name": "appserver-client-chat",
            "approval_handler": self.approve,
            # Command output as it is produced (item/commandExecution/outputDelta).
            "capabilities": {"commandExecutionStreaming": True},
        }
        if self.args.url:
            token = self.args.token or os.environ.get("APPSERVER_TOKEN") or None
            return await AppServerClient.connect(self.args.url, token=token, **options)
        return await AppServerClient.spawn(
            server_command(self.args), cwd=self.args.workspace, stderr="capture", **options
        )

    async def run(self) -> int:
        """Open the connection, pick a thread, chat; the exit status."""
        if self.input.editor:
            from prompt_toolkit.patch_stdout import patch_stdout

            # Output printed while a prompt is shown goes above it.
            with patch_stdout(raw=True):
                self.out = sys.stdout
                return await self._run()
        return await self._run()

    async def _run(self) -> int:
        loop = asyncio.get_running_loop()
        try:
            self.client = await self.open()
        except (AppServerError, OSError, ValueError) as exc:
            self.line(f"appserver-client: {open_failure(self.args, exc)}")
            return 1
        self.client.on_disconnect(lambda _client: self.line("(connection lost; reconnecting…)"))
        self.client.on_reconnect(lambda _client: self.line("(reconnected)"))
        handled_sigint = True
        try:
            loop.add_signal_handler(signal.SIGINT, self.on_sigint)
        except (NotImplementedError, RuntimeError):  # not the main thread / Windows
            handled_sigint = False
        try:
            where = self.args.url or f"{self.args.workspace} (stdio)"
            info = self.client.server_info
            self.line(
                f"Connected to {info.get('name', 'appserver')} {info.get('version', '')} "
                f"at {where}. /help for help."
            )
            if await self.pick_thread():
                await self.prompt_loop()
            return 0
        except ConnectionLost as exc:
            self.line(f"appserver-client: connection lost: {exc}")
            return 1
        finally:
            if handled_sigint:
                loop.remove_signal_handler(signal.SIGINT)
            await self.stop_typeahead()
            for task in list(self._tasks):
                task.cancel()
            await self.client.close()

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
            answer = await self.input.read(prompt, cancel=self.quit)
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

    # --- threads ------------------------------------------------------------

    async def recent_threads(self, limit: int) -> list[ThreadSummary]:
        assert self.client is not None
        result = await self.client.thread_list(identity=self.identity, limit=limit)
        return list(result["data"])

    def show_threads(self, threads: list[ThreadSummary]) -> None:
        self.listing = [summary["id"] for summary in threads]
        for number, summary in enumerate(threads, 1):
            mark = "*" if summary["id"] == self.thread_id else " "
            name = summary.get("displayName") or "(untitled)"
            turns = summary.get("turnCount", 0)
            status = summary["status"]
            when = summary["lastActiveAt"][:16].replace("T", " ")
            self.line(
                f" {mark}{number:>2}) {one_line(name, 60)}  [{status}, {turns} turn(s), "
                f"{when}]  {summary['id']}"
            )

    async def pick_thread(self) -> bool:
        threads = await self.recent_threads(10)
        if threads:
            self.line("Recent threads:")
            self.show_threads(threads)
            while True:
                answer = await self.ask(
                    "Pick a number (or an id or name), or press Enter for a new thread: "
                )
                if answer is None:
                    return False
                if not answer.strip():
                    break
                if await self.resume_choice(answer.strip()):
                    return True
        await self.new_thread()
        return True

    async def new_thread(self) -> None:
        assert self.client is not None
        thread = (await self.client.thread_start(identity=self.identity))["thread"]
        self.thread_id = thread["id"]
        self.workspace_path = thread.get("workspacePath")
        self.line(f"New thread {thread['id']}. Type a message.")

    async def resume_choice(self, choice: str) -> bool:
        """Resume the thread ``choice`` names (number, id, or name); whether one did."""
        if not choice.isdigit() or not 1 <= int(choice) <= len(self.listing):
            threads = await self.recent_threads(50)
            if not self.listing:
                self.listing = [summary["id"] for summary in threads[:20]]
        else:
            threads = []
        found = pick_thread(choice, self.listing, threads)
        if isinstance(found, str):
            await self.resume(found)
            return True
        if found:
            self.line(f"{len(found)} threads match {choice!r}:")
            self.show_threads(found)
        else:
            self.line(f"No thread {choice!r}: give a number from /threads, an id, or a name.")
        return False

    async def resume(self, thread_id: str) -> None:
        assert self.client is not None
        thread = (await self.client.thread_resume(thread_id=thread_id))["thread"]
        self.thread_id = thread["id"]
        self.workspace_path = thread.get("workspacePath")
        turns = thread.get("turns") or []
        name = thread.get("displayName") or "(untitled)"
        self.line(f"Resumed {one_line(name, 60)} ({thread['id']}, {len(turns)} turn(s)).")
        for turn in turns[-2:]:
            for item in turn.get("items") or []:
                text = str((item.get("payload") or {}).get("text", ""))
                if item["type"] == "userMessage":
                    self.line(f"  you: {one_line(text, 100)}")
                elif item["type"] == "agentMessage":
                    self.line(f"  agent: {one_line(text, 100)}")

    # --- the prompt loop ----------------------------------------------------

    async def prompt_loop(self) -> None:
        while not self.quit.is_set():
            if self.queued:  # typed while the last turn ran
                text = self.queued.pop(0)
                self.line(f"{PROMPT}{text}")
            else:
                line = await self.ask(PROMPT)
                if line is None:
                    self.line("Bye.")
                    return
                text = line
            if not text.strip():
                continue
            try:
                if text.strip().startswith("/"):
                    if not await self.command(text.strip()):
                        self.line("Bye.")
                        return
                else:
                    await self.turn(text)
            except RpcError as exc:
                self.line(f"error: {exc}")

    async def command(self, text: str) -> bool:
        """Run a slash command; ``False`` to leave."""
        name, _, rest = text.partition(" ")
        name = name.lower()
        rest = rest.strip()
        if name in ("/quit", "/exit", "/q"):
            return False
        if name in ("/help", "/?"):
            self.line(HELP.rstrip("\n"))
        elif name == "/threads":
            threads = await self.recent_threads(20)
            if threads:
                self.show_threads(threads)
            else:
                self.line("No threads yet.")
        elif name == "/resume":
            if rest:
                await self.resume_choice(rest)
            else:
                self.line("Usage: /resume N | ID | NAME (N from /threads).")
        elif name == "/new":
            await self.new_thread()
        elif name in ("/model", "/status", "/grants", "/revoke"):
            await self.settings_command(name, rest)
        elif name == "/show":
            if not (rest.isdigit() and self.view.show(int(rest))):
                known = len(self.view.outputs)
                self.line(f"Usage: /show N, with N from 1 to {known}." if known else "No outputs.")
        else:
            self.line(f"Unknown command {name}; /help lists them.")
        return True

    async def settings_command(self, name: str, rest: str) -> None:
        """``/model``, ``/status``, ``/grants``, ``/revoke`` (chat_commands)."""
        assert self.client is not None and self.thread_id is not None
        if self.settings is None:
            self.settings = SettingsCommands(self.client, self.line)
        if name == "/model":
            await self.settings.model(self.thread_id, rest)
        elif name == "/status":
            await self.settings.status(self.thread_id)
        elif name == "/grants":
            await self.settings.list_grants()
        else:
            await self.settings.revoke(rest)

    async def turn(self, text: str) -> None:
        assert self.client is not None and self.thread_id is not None
        self.turn_active = True
        self.turn_id = None
        self.interrupt_wanted = False
        self.view.start_turn()
        self.turn_started_at = time.monotonic()
        stream = self.client.notifications(thread_id=self.thread_id, buffer=None)
        try:
            started = await self.client.turn_start(
                thread_id=self.thread_id, input=[{"type": "text", "text": text}]
            )
            self.turn_id = started["turn"]["id"]
            if self.interrupt_wanted:
                self.spawn(self.interrupt(self.turn_id))
            self.start_typeahead()
            async for notification in stream:
                if notification.turn_id != self.turn_id:
                    continue
                self.view.render(notification)
                if notification.is_terminal:
                    break
        finally:
            await self.stop_typeahead()
            self.view.commit_live()
            self.turn_active = False
            self.turn_id = None
            await stream.aclose()

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


def pick_thread(
    choice: str, listing: list[str], threads: list[ThreadSummary]
) -> str | list[ThreadSummary]:
    """The thread id ``choice`` names: a number of ``listing`` (1-based), an id,
    or a name (case-insensitive; a unique prefix will do). Otherwise the
    threads it could mean (none, or several)."""
    if choice.isdigit() and 1 <= int(choice) <= len(listing):
        return listing[int(choice) - 1]
    ids = {summary["id"] for summary in threads} | set(listing)
    if choice in ids:
        return choice
    wanted = choice.casefold()
    named = [
        summary for summary in threads if (summary.get("displayName") or "").casefold() == wanted
    ]
    if not named:
        named = [
            summary
            for summary in threads
            if (summary.get("displayName") or "").casefold().startswith(wanted)
            or summary["id"].startswith(choice)
        ]
    if len(named) == 1:
        return named[0]["id"]
    return named


def open_failure(args: argparse.Namespace, exc: BaseException) -> str:
    """One line saying why the chat could not open its connection, and what to do."""
    if isinstance(exc, ConnectFailed) and exc.status == 401:
        given = args.token or os.environ.get("APPSERVER_TOKEN")
        which = "" if given else " (none was given)"
        return (
            f"the server at {args.url} refused the token{which} (HTTP 401): pass the "
            "server's token with --token TOKEN or set APPSERVER_TOKEN"
        )
    if not args.url:  # a spawned server: the message has its exit code and stderr tail
        return str(exc)
    return (
        f"could not reach the server at {args.url}: {exc}; is it running? Start one with "
        "`make run` in the appserver checkout (or `appserver app-server --listen "
        "ws://127.0.0.1:9100`)"
    )


def server_command(args: argparse.Namespace) -> list[str]:
    """The command that starts a stdio server for ``args.workspace``."""
    if args.server_command:
        return shlex.split(args.server_command)
    beside = Path(sys.executable).parent / "appserver"
    if beside.exists():
        base = [str(beside)]
    elif found := shutil.which("appserver"):
        base = [found]
    else:
        base = [sys.executable, "-m", "appserver"]
    return [*base, "app-server", "--workspace", str(args.workspace), "--log-level", "warning"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="appserver-client", description="Client for the appserver JSON-RPC AppServer."
    )
    parser.add_argument("--version", action="version", version=f"appserver-client {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    chat = commands.add_parser(
        "chat",
        help="chat with the agent in this terminal",
        description=(
            "Chat with the agent. With --url, connect to a running server over WebSocket; "
            "otherwise start `appserver app-server` over stdio for --workspace."
        ),
    )
    chat.add_argument(
        "--url",
        help=(
            "WebSocket URL of a running server, e.g. ws://127.0.0.1:9100 (its web page's "
            "http:// address works too)"
        ),
    )
    chat.add_argument("--token", help="WebSocket token (default: $APPSERVER_TOKEN)")
    chat.add_argument(
        "--workspace",
        type=Path,
        default=Path.cwd(),
        help="workspace for a spawned server (default: the current directory)",
    )
    chat.add_argument(
        "--server-command",
        metavar="CMD",
        help="command line that starts a stdio server (default: appserver app-server ...)",
    )
    chat.add_argument(
        "--user",
        default="local",
        help="userId of your threads (default: local, the user of every local client: the web "
        "page lists the same threads)",
    )
    chat.add_argument(
        "--plain",
        action="store_true",
        help="read plain lines even on a terminal (no line editor, no spinner)",
    )
    return parser


def _enable_line_editing() -> None:
    with contextlib.suppress(ImportError):
        import readline  # noqa: F401  (input() gains history and editing)


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point of ``appserver-client``."""
    args = build_parser().parse_args(argv)
    if args.command != "chat":
        build_parser().print_help(sys.stderr)
        return 2
    if not args.url and not args.workspace.is_dir():
        sys.stderr.write(f"appserver-client: {args.workspace} is not a directory\n")
        return 2
    if args.url:
        # The address the server prints for its web page works too.
        args.url = re.sub(r"^http(s?)://", r"ws\1://", args.url, flags=re.I)
        try:
            websocket_url(args.url, None)
        except ValueError as exc:  # checked here, like a bad flag: one line, exit 2
            sys.stderr.write(f"appserver-client: --url: {exc}\n")
            return 2
    # The chat says itself when the connection drops and comes back; the
    # library's own warnings would repeat that on stderr.
    logging.getLogger("appserver_client").setLevel(logging.CRITICAL)
    editor = not args.plain and wants_editor()
    if not editor:
        _enable_line_editing()
    saved = _save_terminal()
    chat = Chat(args, editor=editor)
    try:
        code = asyncio.run(chat.run())
    except KeyboardInterrupt:
        code = 130
    finally:
        _restore_terminal(saved)
    if isinstance(chat.input, PlainInput) and chat.input.busy:
        # A read is still blocked in input() on the helper thread; leave without
        # waiting for it (or for interpreter teardown to trip over stdin).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _save_terminal() -> Any:
    with contextlib.suppress(Exception):
        import termios

        if sys.stdin.isatty():
            return termios.tcgetattr(sys.stdin.fileno())
    return None


def _restore_terminal(saved: Any) -> None:
    if saved is None:
        return
    with contextlib.suppress(Exception):
        import termios

        termios.tcsetattr(sys.stdin.fileno(), termios.TCSADRAIN, saved)


if __name__ == "__main__":
    raise SystemExit(main())
