"""The chat's view of SubAgent children (docs/subagents.md): ``/agents`` lists the
current thread's children, and a compact ``↳`` line tells when one starts, what
it runs, when it is done, closed or reopened.

The children come from ``subagent/children/list`` (closed ones too), listed
again whenever ``subagent/graphChanged`` names the current thread. What a child
does comes from ``subagent/progress`` (sent while one of the thread's turns
follows its children: the turn that spawned them, or a ``WaitAgent``) and
whether it runs from its ``thread/runtimeChanged``. A line is printed only when
what it says changed, so a snapshot every 200 ms prints nothing new.

Nicknames, roles and tool displays come from a model: they are printed with
hidden characters revealed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from appserver_client.chat_exact import reveal
from appserver_client.client import AppServerClient
from appserver_client.errors import AppServerError, RpcError
from appserver_client.notifications import Notification

Note = Callable[[str], None]
WATCHED = ("subagent/graphChanged", "subagent/progress", "thread/runtimeChanged")
MARK = "↳"


@dataclass
class Child:
    """One child of the current thread, as the chat last heard of it."""

    thread_id: str
    nickname: str = ""
    role: str = ""
    profile: str = ""
    status: str = "open"  # the edge's: open or closed
    running: bool = False
    progress: dict[str, Any] = field(default_factory=dict)  # its last subagent/progress entry
    said_tool: tuple[str, str] = ("", "")  # the tool line printed last
    said_done: bool = False  # "done" was printed for its current run

    @property
    def name(self) -> str:
        """Its nickname (else its id), fit for one line."""
        return reveal(" ".join((self.nickname or self.thread_id).split())[:60])


def tokens(count: object) -> str:
    """``1234`` -> ``1.2k``, ``2500000`` -> ``2.5M``: tokens at a glance."""
    value = count if isinstance(count, int) and not isinstance(count, bool) else 0
    if value >= 1_000_000:
        return f"{value / 1_000_000:.1f}M"
    if value >= 1_000:
        return f"{value / 1_000:.1f}k"
    return str(value)


def tool_of(entry: dict[str, Any]) -> tuple[str, str]:
    """The tool a progress entry names and what it works on (``("", "")``: none)."""
    tool = entry.get("currentTool")
    display = entry.get("currentToolDisplay")
    return (
        tool if isinstance(tool, str) else "",
        " ".join(display.split()) if isinstance(display, str) else "",
    )


def spent(entry: dict[str, Any]) -> str:
    """``(1.2k tokens)``: what the child's turn used so far (in and out)."""
    total = 0
    for key in ("inputTokens", "outputTokens"):
        value = entry.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            total += value
    return f"({tokens(total)} tokens)"


def doing(child: Child) -> str:
    """What ``/agents`` says a child does: ``done, list_dir . (1.2k tokens)``."""
    entry = child.progress
    if not entry:
        return ""
    tool, display = tool_of(entry)
    words = "done" if child.said_done and not child.running else ""
    if tool:
        shown = reveal(f"{tool} {display}".strip())
        words = f"{words}, {shown}" if words else shown
    return f"{words} {spent(entry)}".strip()


class SubAgents:
    """The current thread's children: ``/agents`` and the ``↳`` lines."""

    def __init__(self, client: AppServerClient, note: Note) -> None:
        self.client = client
        self.note = note  # prints one line on its own, wherever the chat is
        self.thread_id: str | None = None
        self.children: dict[str, Child] = {}
        # Collects from now: nothing that comes before watch() runs is lost.
        self.stream = client.notifications(methods=WATCHED, buffer=None)
        self._handling = False
        self._stopped = False
        self._handled = asyncio.Event()

    # --- following a thread -------------------------------------------------

    async def follow(self, thread_id: str, *, new: bool = False) -> None:
        """The chat now shows ``thread_id``: learn its children (quietly)."""
        self.thread_id = thread_id
        self.children = {}
        if not new:
            await self.refresh(quiet=True)

    async def refresh(self, *, quiet: bool = False) -> None:
        """List the children again; say what is new (unless ``quiet``)."""
        thread_id = self.thread_id
        if thread_id is None:
            return
        try:
            listed = await self.client.subagent_children_list(
                parent_thread_id=thread_id, include_closed=True, include_threads=True
            )
        except RpcError:
            return  # an older server without SubAgent sessions: no children to show
        if thread_id != self.thread_id:
            return  # the chat moved on meanwhile
        for entry in sorted(listed.get("data") or [], key=_created):
            edge: dict[str, Any] = dict(entry.get("edge") or {})
            child_id = edge.get("childThreadId")
            if not isinstance(child_id, str) or not child_id:
                continue
            self._update(child_id, edge, dict(entry.get("thread") or {}), quiet)

    def _update(
        self, child_id: str, edge: dict[str, Any], thread: dict[str, Any], quiet: bool
    ) -> None:
        child = self.children.get(child_id)
        status = "closed" if edge.get("status") == "closed" else "open"
        if child is None:
            child = self.children[child_id] = Child(child_id, status=status)
            if not quiet:
                self.note(f"{MARK} {_name(edge, child_id)} started" + _role(edge.get("agentRole")))
        elif child.status != status:
            child.status = status
            if not quiet:
                self.note(f"{MARK} {child.name} {'closed' if status == 'closed' else 'reopened'}")
        child.nickname = str(edge.get("agentNickname") or thread.get("displayName") or "")
        child.role = str(edge.get("agentRole") or "")
        child.profile = str(edge.get("profileName") or "")
        runtime = thread.get("runtime")
        if isinstance(runtime, dict):
            # Its thread/runtimeChanged says when it ends; this only keeps /agents true.
            child.running = runtime.get("running") is True

    # --- what arrives -------------------------------------------------------

    async def watch(self) -> None:
        """Handle the watched notifications for the chat's whole life."""
        try:
            async for notification in self.stream:
                self._handling = True
                try:
                    await self.handle(notification)
                except RpcError:
                    pass  # a listing that failed: the next change lists them again
                finally:
                    self._handling = False
                    self._handled.set()
        except AppServerError:
            pass  # the connection is gone for good: the chat says so itself
        finally:
            self._stopped = True
            self._handled.set()

    async def caught_up(self) -> None:
        """Wait until everything that arrived so far is handled (a turn's
        last snapshot comes before its end: its lines print before the prompt)."""
        while (self.stream.pending or self._handling) and not self._stopped:
            self._handled.clear()
            await self._handled.wait()

    async def handle(self, notification: Notification) -> None:
        """One watched notification; only the current thread's children matter."""
        params = notification.params
        if notification.method == "subagent/graphChanged":
            if params.get("parentThreadId") == self.thread_id:
                await self.refresh()
        elif notification.method == "subagent/progress":
            if params.get("threadId") == self.thread_id:
                for entry in params.get("entries") or []:
                    if isinstance(entry, dict):
                        self.progressed(entry)
        elif notification.thread_id in self.children:
            running = (params.get("runtime") or {}).get("running") is True
            self.ran(self.children[str(notification.thread_id)], running)

    def progressed(self, entry: dict[str, Any]) -> None:
        """A child's progress entry: a line when its tool changed or it is done."""
        child_id = entry.get("childThreadId")
        child = self.children.get(child_id) if isinstance(child_id, str) else None
        if child is None:  # an older server's entry names the child by its nickname
            label = entry.get("label")
            named = [known for known in self.children.values() if known.nickname == label]
            child = named[0] if named else None
        if child is None:
            return  # not listed yet: subagent/graphChanged lists it
        child.progress = entry
        if entry.get("isCompleted") is True:
            if not child.said_done:
                child.said_done = True
                self.note(f"{MARK} {child.name} done {spent(entry)}")
            return
        child.said_done = False
        tool, display = tool_of(entry)
        if tool and (tool, display) != child.said_tool:
            child.said_tool = (tool, display)
            shown = reveal(f"{tool} {display}".strip()[:100])
            self.note(f"{MARK} {child.name}: {shown} {spent(entry)}")

    def ran(self, child: Child, running: bool) -> None:
        """A child's ``thread/runtimeChanged``: it ended (between snapshots too)."""
        child.running = running
        if running:
            child.said_done = False
        elif not child.said_done:
            # Between snapshots: the tokens of the last one are not the run's total.
            child.said_done = True
            self.note(f"{MARK} {child.name} done")

    # --- /agents ------------------------------------------------------------

    async def show(self) -> None:
        """``/agents``: the current thread's children, as the server has them now."""
        await self.refresh(quiet=True)
        if not self.children:
            self.note("This thread has no SubAgents (the agent makes them with SpawnAgent).")
            return
        self.note("SubAgents of this thread:")
        for number, child in enumerate(self.children.values(), 1):
            activity = "running" if child.running else "idle"
            facts = [child.role, child.profile, child.status, activity]
            shown = ", ".join(reveal(fact) for fact in facts if fact)
            now = doing(child)
            self.note(
                f" {number:>2}) {child.name}  [{shown}]"
                + (f"  {now}" if now else "")
                + f"  {child.thread_id}"
            )


def _created(entry: Any) -> str:
    edge = entry.get("edge") if isinstance(entry, dict) else None
    return str(edge.get("createdAt") or "") if isinstance(edge, dict) else ""


def _name(edge: dict[str, Any], child_id: str) -> str:
    return Child(child_id, nickname=str(edge.get("agentNickname") or "")).name


def _role(role: object) -> str:
    return f" ({reveal(role)})" if isinstance(role, str) and role else ""
