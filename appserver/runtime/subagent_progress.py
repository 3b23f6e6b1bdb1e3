"""``subagent/progress``: what each child of a running parent turn is doing.

DotCraft fills its progress from a process-wide registry keyed by label that
its native children never write (so their entries stay empty until the end).
Here each entry is read from the child's own running turn — the tool it runs
(or last ran), its tokens, whether it ended — or, for an external CLI child,
from the stage its runner reports. A snapshot of every child the parent turn
spawned goes to the parent turn's client and the parent thread's subscribers
at most every 200 ms while a child still runs, only when it changed, and once
more just before the parent turn's terminal event. Snapshots are not stored:
they describe the moment, and the child threads keep the record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anyio

from appserver.protocol.subagent_sessions import (
    SubAgentProgressEntry,
    SubAgentProgressNotification,
)
from appserver.runtime.bus import EventBus
from appserver.runtime.turns.model import ActiveTurn

INTERVAL = 0.2  # seconds between snapshots, as DotCraft's aggregator
EXTERNAL_TOOL = "external-cli"
# The argument that best says what a tool call does, in order of preference.
_DISPLAY_ARGUMENTS = ("command", "path", "file_path", "pattern", "query", "url")
_DISPLAY_LENGTH = 120


@dataclass
class ChildRun:
    """A child's turn this process started, tracked until it ends."""

    parent_thread_id: str
    active: ActiveTurn
    # What an external (cli-oneshot) child is doing now ("Launching codex", ...):
    # ``subagent/progress`` shows it as ``currentToolDisplay``; native children
    # leave it None (their tool items say it).
    stage: str | None = None


@dataclass
class _Child:
    """A child of the parent turn, and its current run."""

    child_id: str
    label: str
    run: ChildRun


@dataclass
class _ParentTurn:
    """The children one parent turn spawned, and what was last sent about them."""

    active: ActiveTurn
    children: dict[str, _Child] = field(default_factory=dict)  # by child id, spawn order
    last_sent: SubAgentProgressNotification | None = None
    ticking: bool = False


def _tool_of(active: ActiveTurn) -> tuple[str | None, str | None]:
    """The tool the turn runs now or last ran, and a readable line for it."""
    for item in reversed(active.items):
        if item.type != "toolCall":
            continue
        name = str(item.payload.get("toolName") or "") or None
        arguments = item.payload.get("arguments")
        display = None
        if isinstance(arguments, dict):
            for key in _DISPLAY_ARGUMENTS:
                value = arguments.get(key)
                if isinstance(value, str) and value.strip():
                    display = " ".join(value.split())[:_DISPLAY_LENGTH]
                    break
        return name, display
    return None, None


def entry_of(child: _Child) -> SubAgentProgressEntry:
    """The child's entry as its run shows it now."""
    active = child.run.active
    tool: str | None
    display: str | None
    if child.run.stage is not None:
        tool, display = EXTERNAL_TOOL, child.run.stage
    else:
        tool, display = _tool_of(active)
    return SubAgentProgressEntry(
        label=child.label,
        child_thread_id=child.child_id,
        current_tool=tool,
        current_tool_display=display,
        input_tokens=active.input_tokens,
        output_tokens=active.output_tokens,
        is_completed=active.done.is_set(),
    )


class SubAgentProgress:
    """Tracks the children of running parent turns and sends their snapshots."""

    def __init__(self, bus: EventBus) -> None:
        self.bus = bus
        self._turns: dict[int, _ParentTurn] = {}  # by id() of the parent's ActiveTurn

    def track(self, parent: ActiveTurn, child_id: str, label: str, run: ChildRun) -> None:
        """Follow ``run`` (a child's new turn) as part of ``parent``'s snapshots."""
        tracked = self._turns.get(id(parent))
        if tracked is None:
            tracked = self._turns[id(parent)] = _ParentTurn(parent)
            parent.announced_at_end = True  # its last snapshot (closing) after its items
        tracked.children[child_id] = _Child(child_id, label, run)
        if not tracked.ticking and parent.tg is not None:
            # In the parent turn's own task group: the ticks stop with its work.
            tracked.ticking = True
            parent.tg.start_soon(self._tick, tracked)

    async def _tick(self, tracked: _ParentTurn) -> None:
        try:
            while True:
                await anyio.sleep(INTERVAL)
                self._send(tracked)
                if all(child.run.active.done.is_set() for child in tracked.children.values()):
                    return
        finally:
            tracked.ticking = False

    def closing(self, active: ActiveTurn) -> None:
        """The parent turn is about to end: its last snapshot, then forget it."""
        tracked = self._turns.pop(id(active), None)
        if tracked is not None:
            tracked.last_sent = None  # always sent, changed or not
            self._send(tracked)

    def _send(self, tracked: _ParentTurn) -> None:
        parent = tracked.active
        snapshot = SubAgentProgressNotification(
            thread_id=parent.thread_id,
            turn_id=parent.record.id,
            entries=[entry_of(child) for child in tracked.children.values()],
        )
        if snapshot == tracked.last_sent:
            return
        tracked.last_sent = snapshot
        targets: set[Any] = set(self.bus.subscribers(parent.thread_id))
        targets.update(parent.watchers)
        self.bus.publish("subagent/progress", snapshot, include=targets)
