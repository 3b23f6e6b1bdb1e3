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
import os
import shlex
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

from appserver_client._generated import ThreadSummary
from appserver_client.chat_commands import SettingsCommands
from appserver_client.chat_prompts import PROMPT, ChatPrompts
from appserver_client.chat_subagents import SubAgents
from appserver_client.chat_tasks import Tasks
from appserver_client.chat_view import one_line
from appserver_client.client import AppServerClient
from appserver_client.errors import AppServerError, ConnectFailed, ConnectionLost, RpcError

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
                      (or a SubAgent's id from /agents)
  /new                start a new thread
  /agents             this thread's SubAgents: role, profile, open or closed, running
                      or idle, what each did last (↳ lines tell as it happens)
  /tasks              the workspace's automation tasks: status, schedule, thread
                      (⚙ lines tell when one runs, is done or failed)
  /tasks run N        run task N of /tasks (or give its id) now
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


class Chat(ChatPrompts):
    """The interactive session."""

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
        self.agents = SubAgents(self.client, self.note)
        self.spawn(self.agents.watch())
        self.tasks = Tasks(self.client, self.note)
        self.spawn(self.tasks.watch())
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
        if self.agents is not None:
            await self.agents.follow(thread["id"], new=True)
        self.line(f"New thread {thread['id']}. Type a message.")

    async def resume_choice(self, choice: str) -> bool:
        """Resume the thread ``choice`` names (number, id, or name); whether one did."""
        if self.agents is not None and choice in self.agents.children:
            await self.resume(choice)  # a child's id from /agents (thread/list hides children)
            return True
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
        if self.agents is not None:
            await self.agents.follow(thread["id"])
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
        elif name == "/agents" and self.agents is not None:
            await self.agents.show()
        elif name == "/tasks" and self.tasks is not None:
            await self.tasks.command(rest)
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
                    # The children's last snapshot came before the turn's end: its
                    # lines print before the next prompt.
                    if self.agents is not None:
                        await self.agents.caught_up()
                    break
        finally:
            await self.stop_typeahead()
            self.view.commit_live()
            self.turn_active = False
            self.turn_id = None
            await stream.aclose()


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
