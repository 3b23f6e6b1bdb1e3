"""``appserver-client chat``: talk to an appserver from a terminal.

Plain line-based I/O (no curses): type a message, watch the answer stream,
answer approval prompts, Ctrl-C interrupts the running turn (at the prompt it
exits, as does Ctrl-D). Input is read on a helper thread, with readline
editing when available, so notifications keep streaming meanwhile.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import json
import os
import shlex
import shutil
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from appserver_client import __version__
from appserver_client._generated import ApprovalRequestParams, SessionIdentity, ThreadSummary
from appserver_client.client import AppServerClient
from appserver_client.errors import AppServerError, ConnectionLost, RpcError
from appserver_client.notifications import Notification

PROMPT = "you> "
APPROVAL_CHOICES = {
    "a": "accept",
    "accept": "accept",
    "s": "acceptForSession",
    "session": "acceptForSession",
    "w": "acceptAlways",
    "always": "acceptAlways",
    "d": "decline",
    "decline": "decline",
    "c": "cancel",
    "cancel": "cancel",
}
APPROVAL_PROMPT = "[a]ccept once / [s]ession / al[w]ays / [d]ecline / [c]ancel turn? "
HELP = """\
Type a message and press Enter to send it to the agent.
  /threads     list your recent threads
  /resume N    switch to thread N of the last /threads listing
  /new         start a new thread
  /help        this help
  /quit        leave (also Ctrl-D, or Ctrl-C at the prompt)
Ctrl-C while the agent works interrupts the turn.
"""


class _Cancelled:
    """Returned by :meth:`LineReader.readline` when ``cancel`` fired first."""


CANCELLED = _Cancelled()


class LineReader:
    """Reads lines with ``input()`` on a daemon thread, one read at a time.

    A read abandoned by its caller (Ctrl-C at an approval prompt) stays
    pending; the next ``readline`` takes it over and shows its own prompt, so
    the user's next line is never lost or read twice. The thread is a daemon
    so a read that never completes cannot keep the process alive.
    """

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._pending: asyncio.Future[str | None] | None = None
        self._thread: threading.Thread | None = None

    @property
    def busy(self) -> bool:
        """Whether a thread is blocked waiting for a line."""
        return self._thread is not None and self._thread.is_alive()

    async def readline(
        self, prompt: str, cancel: asyncio.Event | None = None
    ) -> str | _Cancelled | None:
        """The next line (without newline), ``None`` at end of input, or
        :data:`CANCELLED` if ``cancel`` was set first."""
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
        waiters: set[asyncio.Future[Any]] = {future}
        waiter: asyncio.Task[bool] | None = None
        if cancel is not None:
            waiter = loop.create_task(cancel.wait())
            waiters.add(waiter)
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if waiter is not None:
                waiter.cancel()
        if not future.done():
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


def _one_line(text: str, limit: int = 160) -> str:
    lines = text.strip().splitlines() or [""]
    first = lines[0]
    more = len(lines) > 1 or len(first) > limit
    return first[:limit] + (" …" if more else "")


class Chat:
    """The interactive session."""

    def __init__(self, args: argparse.Namespace, out: TextIO | None = None) -> None:
        self.args = args
        self.out = out or sys.stdout
        self.reader = LineReader(self.out)
        self.identity: SessionIdentity = {"channelName": "cli", "userId": args.user}
        self.client: AppServerClient | None = None
        self.thread_id: str | None = None
        self.listing: list[str] = []
        self.quit = asyncio.Event()
        self.turn_active = False
        self.turn_id: str | None = None
        self.interrupt_wanted = False
        self.approval_cancel = asyncio.Event()
        self.approval_open = False
        self._approval_lock = asyncio.Lock()
        self._line_start = True
        self._streamed: set[str] = set()
        self._tasks: set[asyncio.Task[Any]] = set()

    # --- output -------------------------------------------------------------

    def write(self, text: str) -> None:
        if not text:
            return
        self.out.write(text)
        self.out.flush()
        self._line_start = text.endswith("\n")

    def line(self, text: str = "") -> None:
        """Write ``text`` on a line of its own."""
        if not self._line_start:
            self.write("\n")
        self.write(text + "\n")

    # --- lifecycle ----------------------------------------------------------

    async def open(self) -> AppServerClient:
        options: dict[str, Any] = {
            "client_name": "appserver-client-chat",
            "approval_handler": self.approve,
        }
        if self.args.url:
            token = self.args.token or os.environ.get("APPSERVER_TOKEN") or None
            return await AppServerClient.connect(self.args.url, token=token, **options)
        return await AppServerClient.spawn(
            server_command(self.args), cwd=self.args.workspace, stderr="capture", **options
        )

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        try:
            self.client = await self.open()
        except (AppServerError, OSError) as exc:
            self.line(f"appserver-client: could not reach the server: {exc}")
            return 1
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
            for task in list(self._tasks):
                task.cancel()
            await self.client.close()

    def on_sigint(self) -> None:
        """Ctrl-C: answer an open approval with cancel, else interrupt the turn,
        else leave."""
        if self.approval_open:
            self.approval_cancel.set()
        elif self.turn_active:
            self.line("(interrupting the turn…)")
            self.interrupt_wanted = True
            if self.turn_id is not None:
                self.spawn(self.interrupt(self.turn_id))
        else:
            self.quit.set()

    def spawn(self, coroutine: Any) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def interrupt(self, turn_id: str) -> None:
        assert self.client is not None and self.thread_id is not None
        with contextlib.suppress(RpcError):  # it may have just ended
            await self.client.turn_interrupt(thread_id=self.thread_id, turn_id=turn_id)

    async def ask(self, prompt: str) -> str | None:
        """A line from the user; ``None`` when they want to leave."""
        line = await self.reader.readline(prompt, self.quit)
        self._line_start = True
        if line is None or isinstance(line, _Cancelled):
            return None
        return line

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
                f" {mark}{number:>2}) {_one_line(name, 60)}  [{status}, {turns} turn(s), "
                f"{when}]  {summary['id']}"
            )

    async def pick_thread(self) -> bool:
        threads = await self.recent_threads(10)
        if threads:
            self.line("Recent threads:")
            self.show_threads(threads)
            while True:
                answer = await self.ask("Pick a number, or press Enter for a new thread: ")
                if answer is None:
                    return False
                answer = answer.strip()
                if not answer:
                    break
                if answer.isdigit() and 1 <= int(answer) <= len(self.listing):
                    await self.resume(self.listing[int(answer) - 1])
                    return True
                self.line(f"Please type a number from 1 to {len(self.listing)}, or just Enter.")
        await self.new_thread()
        return True

    async def new_thread(self) -> None:
        assert self.client is not None
        thread = (await self.client.thread_start(identity=self.identity))["thread"]
        self.thread_id = thread["id"]
        self.line(f"New thread {thread['id']}. Type a message.")

    async def resume(self, thread_id: str) -> None:
        assert self.client is not None
        thread = (await self.client.thread_resume(thread_id=thread_id))["thread"]
        self.thread_id = thread["id"]
        turns = thread.get("turns") or []
        name = thread.get("displayName") or "(untitled)"
        self.line(f"Resumed {_one_line(name, 60)} ({thread['id']}, {len(turns)} turn(s)).")
        for turn in turns[-2:]:
            for item in turn.get("items") or []:
                text = str((item.get("payload") or {}).get("text", ""))
                if item["type"] == "userMessage":
                    self.line(f"  you: {_one_line(text, 100)}")
                elif item["type"] == "agentMessage":
                    self.line(f"  agent: {_one_line(text, 100)}")

    # --- the prompt loop ----------------------------------------------------

    async def prompt_loop(self) -> None:
        while not self.quit.is_set():
            line = await self.ask(PROMPT)
            if line is None:
                self.line("Bye.")
                return
            text = line.strip()
            if not text:
                continue
            try:
                if text.startswith("/"):
                    if not await self.command(text):
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
        if name in ("/quit", "/exit", "/q"):
            return False
        if name in ("/help", "/?"):
            self.write(HELP)
        elif name == "/threads":
            threads = await self.recent_threads(20)
            if threads:
                self.show_threads(threads)
            else:
                self.line("No threads yet.")
        elif name == "/resume":
            choice = rest.strip()
            if not choice.isdigit() or not 1 <= int(choice) <= len(self.listing):
                # No listing yet, or a number beyond it: number the current threads.
                self.listing = [summary["id"] for summary in await self.recent_threads(20)]
            if choice.isdigit() and 1 <= int(choice) <= len(self.listing):
                await self.resume(self.listing[int(choice) - 1])
            else:
                self.line("Usage: /resume N, with N from /threads.")
        elif name == "/new":
            await self.new_thread()
        else:
            self.line(f"Unknown command {name}; /help lists them.")
        return True

    async def turn(self, text: str) -> None:
        assert self.client is not None and self.thread_id is not None
        self.turn_active = True
        self.turn_id = None
        self.interrupt_wanted = False
        self._streamed.clear()
        stream = self.client.notifications(thread_id=self.thread_id, buffer=None)
        try:
            started = await self.client.turn_start(
                thread_id=self.thread_id, input=[{"type": "text", "text": text}]
            )
            self.turn_id = started["turn"]["id"]
            if self.interrupt_wanted:
                self.spawn(self.interrupt(self.turn_id))
            async for notification in stream:
                if notification.turn_id != self.turn_id:
                    continue
                self.render(notification)
                if notification.is_terminal:
                    break
        finally:
            self.turn_active = False
            self.turn_id = None
            await stream.aclose()

    def render(self, notification: Notification) -> None:
        method, params = notification.method, notification.params
        if method == "item/agentMessage/delta":
            self._streamed.add(str(params.get("itemId")))
            self.write(str(params.get("delta", "")))
        elif method == "item/completed":
            self.render_item(params.get("item") or {})
        elif method == "turn/failed":
            self.line(f"[turn failed: {params.get('error', 'unknown error')}]")
        elif method == "turn/cancelled":
            self.line(f"[turn cancelled: {params.get('reason', '')}]")
        elif method == "turn/completed" and not self._line_start:
            self.write("\n")

    def render_item(self, item: dict[str, Any]) -> None:
        kind = item.get("type")
        payload = item.get("payload") or {}
        if kind == "agentMessage":
            if item.get("id") not in self._streamed:
                self.write(str(payload.get("text", "")))
            if not self._line_start:
                self.write("\n")
        elif kind == "reasoningContent":
            self.line(f"[thinking] {_one_line(str(payload.get('text', '')))}")
        elif kind == "toolCall":
            arguments = json.dumps(payload.get("arguments") or {}, ensure_ascii=False)
            self.line(f"[tool] {payload.get('toolName', '?')} {_one_line(arguments)}")
        elif kind == "toolResult":
            self.line(f"[result] {_one_line(str(payload.get('result', '')))}")
        elif kind == "approvalResponse":
            self.line(f"[approval] {payload.get('decision', '?')}")
        elif kind == "error":
            self.line(f"[error] {payload.get('message', '')}")

    # --- approvals ----------------------------------------------------------

    async def approve(self, params: ApprovalRequestParams) -> str:
        """The approval handler: ask the user (one prompt at a time)."""
        async with self._approval_lock:
            self.approval_cancel.clear()
            self.approval_open = True
            try:
                self.line(
                    f"Approval needed ({params['approvalType']}): {params['operation']}\n"
                    f"  where: {params['target']}\n"
                    f"  why:   {params['reason']}"
                )
                while True:
                    answer = await self.reader.readline(APPROVAL_PROMPT, self.approval_cancel)
                    self._line_start = True
                    if isinstance(answer, _Cancelled):
                        self.line("(cancelling the turn…)")
                        return "cancel"
                    if answer is None:
                        return "decline"
                    decision = APPROVAL_CHOICES.get(answer.strip().lower())
                    if decision is not None:
                        return decision
                    self.line("Please answer a, s, w, d or c.")
            finally:
                self.approval_open = False


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
    chat.add_argument("--url", help="WebSocket URL of a running server, e.g. ws://127.0.0.1:9100")
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
        "--user", default=_os_user(), help="userId of your threads (default: your login name)"
    )
    return parser


def _os_user() -> str:
    try:
        return getpass.getuser()
    except Exception:
        return "local"


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
    _enable_line_editing()
    saved = _save_terminal()
    chat = Chat(args)
    try:
        code = asyncio.run(chat.run())
    except KeyboardInterrupt:
        code = 130
    finally:
        _restore_terminal(saved)
    if chat.reader.busy:
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
