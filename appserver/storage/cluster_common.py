"""What every engine's cluster store offers: the records nodes exchange and the
interface runtime/cluster.py drives (PostgreSQL: storage/cluster.py; the
workspace's SQLite file: storage/cluster_sqlite.py). Nothing here imports a
database driver."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import anyio.abc

from appserver.protocol.ids import iso_at


@dataclass(frozen=True)
class LogEntry:
    """One event to append to a thread's log (a delta or a lifecycle event)."""

    method: str
    topic: str | None
    params_json: str
    created_at: str
    stream: str | None  # the item a delta belongs to; None for lifecycle events
    broadcast: bool
    stored: bool = True  # False: numbered and announced, never stored (no params)


@dataclass(frozen=True)
class SharedEvent:
    """An event read back from the shared log."""

    seq: int
    method: str
    topic: str | None
    params_json: str
    stream: str | None
    node_id: str | None
    broadcast: bool


def iso_time(seconds: float) -> str:
    """Unix ``seconds`` as the events' ``created_at`` text (UTC, milliseconds)."""
    return iso_at(datetime.fromtimestamp(seconds, UTC))


class TurnTakenOver(RuntimeError):
    """Another node has taken over this node's turn (it failed it when this
    node stopped heartbeating): this node may no longer write its rows."""


class WorkspaceMismatch(ValueError):
    """This node's workspace is not the directory the other nodes share."""


class FeedHandler(Protocol):
    """Who a store's feed wakes (runtime/cluster.py's node)."""

    def on_events(self, thread_id: str, first: int, last: int, node: str, broadcast: bool) -> None:
        """Another node appended seqs ``first..last`` of a thread."""

    def on_commands(self) -> None:
        """Commands may be queued for this node."""

    def on_lost(self) -> None:
        """The feed is down: what is announced from now on does not arrive."""

    def on_reconnect(self) -> None:
        """The feed was down: re-read what this node follows."""


class NodeStore(Protocol):
    """The shared event log, node heartbeats, turn leases and commands."""

    node_id: str
    #: Whether the database may live elsewhere than the workspace (then every
    #: node checks that it sees the same workspace directory).
    remote: bool

    async def close(self) -> None: ...
    async def append(
        self,
        thread_id: str,
        entries: Sequence[LogEntry],
        statements: Sequence[tuple[str, Sequence[Any]]] = (),
        turn_id: str | None = None,
    ) -> int | None: ...
    async def events_after(
        self, thread_id: str, after_seq: int, limit: int = 1000
    ) -> list[SharedEvent]: ...
    async def replay(self, thread_id: str, after_seq: int) -> tuple[list[SharedEvent], int]: ...
    async def broadcasts_since(self, since: float) -> list[tuple[str, SharedEvent]]: ...
    async def last_seq(self, thread_id: str) -> int: ...
    async def prune_deltas(self, older_than_seconds: float) -> int: ...
    async def join(self, workspace_path: str) -> None: ...
    async def heartbeat(self) -> bool: ...
    async def leave(self) -> None: ...
    async def claim_orphaned_turns(self, lease_seconds: float) -> list[tuple[str, str]]: ...
    async def own_running_turns(self) -> list[tuple[str, str]]: ...
    async def live_peers(self, lease_seconds: float) -> list[str]: ...
    async def lease_turn(self, thread_id: str, turn_id: str) -> None: ...
    async def turn_node(self, thread_id: str, turn_id: str) -> tuple[str, str | None] | None: ...
    async def running_turn(self, thread_id: str) -> tuple[str, str | None] | None: ...
    def thread_lock(self, thread_id: str) -> AbstractAsyncContextManager[None]: ...
    def forget_thread_lock(self, thread_id: str) -> None: ...
    async def send(self, node_id: str, kind: str, body: dict[str, Any]) -> None: ...
    async def take_commands(self) -> list[tuple[str, dict[str, Any]]]: ...
    async def workspace_token(self) -> str: ...
    async def follow(
        self, handler: FeedHandler, task_status: anyio.abc.TaskStatus[None]
    ) -> None: ...
