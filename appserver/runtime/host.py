"""The runtime of one workspace, assembled: the in-process API every front
door (and cron) drives.

``runtime.threads`` and ``runtime.turns`` are the use cases; a front door
gives each of its clients a :class:`~appserver.runtime.events.Participant`,
calls :meth:`Runtime.join` to let it receive broadcasts, passes it as the
origin of what it starts, and subscribes it to threads.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from appserver.providers.base import Provider
from appserver.runtime.approvals import ApprovalBroker
from appserver.runtime.bus import EventBus
from appserver.runtime.events import Participant
from appserver.runtime.inputs import InputMaterializer
from appserver.runtime.journal import ThreadJournal
from appserver.runtime.state import RuntimeStates
from appserver.runtime.subagent_roles import subagent_max_depth
from appserver.runtime.subagent_tools import control_tools
from appserver.runtime.threads import Threads
from appserver.runtime.turn_cases import Turns
from appserver.runtime.turns import EngineConfig, TurnEngine
from appserver.storage.db import Database
from appserver.storage.events import EventRepository
from appserver.storage.threads import ThreadRepository
from appserver.tools.registry import ToolRegistry

if TYPE_CHECKING:
    from appserver.runtime.cluster import ClusterNode
    from appserver.runtime.subagents import SubAgents
    from appserver.storage.cluster_common import NodeStore


class Runtime:
    """Threads, turns, items, events and approvals of one workspace."""

    def __init__(
        self,
        db: Database,
        workspace: Path,
        provider: Provider,
        *,
        config: EngineConfig | None = None,
        tools: ToolRegistry | None = None,
        attachments: Path | None = None,
        allow_private_image_urls: bool = False,
        default_approval_policy: Callable[[], str] = lambda: "default",
        workspace_trusted: Callable[[], bool] = lambda: True,
        bus: EventBus | None = None,
        node_id: str | None = None,
    ) -> None:
        config = config or EngineConfig()
        self.db = db
        # Whether the workspace's own files may run code (storage/trust.py): front
        # doors that approve by their own rules (a face's --yolo) ask it too.
        self.workspace_trusted = workspace_trusted
        self.bus = bus if bus is not None else EventBus()
        self.events = EventRepository(db)
        self.journal = ThreadJournal(self.bus, self.events)
        self.states = RuntimeStates(self.journal)
        self.repo = ThreadRepository(db)
        self.approvals = ApprovalBroker(
            self.events, config.approval_timeout, config.reconnect_grace
        )
        self.engine = TurnEngine(
            self.repo,
            self.journal,
            self.states,
            self.approvals,
            tools if tools is not None else ToolRegistry.with_defaults(),
            provider,
            workspace,
            config,
            default_approval_policy=default_approval_policy,
            workspace_trusted=workspace_trusted,
        )
        self.materializer = InputMaterializer(
            workspace,
            attachments or workspace / ".craft" / "attachments" / "images",
            allow_private_image_urls,
        )
        self.threads = Threads(
            self.repo, self.bus, self.journal, self.states, self.engine, self.approvals, workspace
        )
        self.turns = Turns(self.threads, self.engine, self.materializer)
        # Child threads and the agent-control tools that make them (the children's
        # runtime, external CLIs included, is made at its first use: see subagents).
        self._subagents: SubAgents | None = None
        self._workspace = workspace
        for tool in control_tools(lambda: self.subagents, workspace):
            if self.engine.tools.admits(tool.name):
                self.engine.tools.register(tool, replace=True)
        # Processes sharing the database (PostgreSQL nodes, or every process
        # serving the workspace's SQLite file): numbering, delivery and
        # failover go through the cluster (runtime/cluster.py).
        self.cluster: ClusterNode | None = None
        if db.cluster:
            from appserver.runtime.cluster import ClusterNode

            self.cluster = ClusterNode(
                _node_store(db, node_id, workspace),
                self.journal,
                self.repo,
                self.states,
                self.engine.inputs,
                workspace,
                config.node_lease,
            )
            self.turns.cluster = self.cluster
            self.threads.cluster = self.cluster
            self.repo.node_id = self.cluster.node_id

            async def on_deleted(body: dict[str, Any]) -> None:
                self.threads.deleted(str(body["threadId"]))

            self.cluster.commands["thread/deleted"] = on_deleted
            self.engine.inputs.reload = True
            self.engine.busy_elsewhere = self.threads.running_anywhere
            self.engine.inputs.lock = self.cluster.store.thread_lock
            self.engine.inputs.forget_lock = self.cluster.store.forget_thread_lock
            self.cluster.commands["interrupt"] = self.turns.on_interrupt
            self.cluster.commands["steer"] = self.turns.on_steer
            self.cluster.wire_approvals(self.approvals)
            self.cluster.on_presumed_dead = self.engine.shutdown
            self.cluster.runs_turn = self._runs_turn
            self.cluster.watchers_of = self.engine.ending.take_watchers

    @property
    def subagents(self) -> SubAgents:
        """The workspace's child threads and their runs: made, with their modules
        (external agent CLIs among them), at the first use (a control tool's call,
        a parent's archive or delete), not at every start. Their turn listeners
        act only on runs made here, so none is missed before that."""
        if self._subagents is None:
            from appserver.runtime.subagents import SubAgents

            workspace = self._workspace
            self._subagents = SubAgents(
                self.threads, self.turns, lambda: subagent_max_depth(workspace)
            )
        return self._subagents

    def _runs_turn(self, thread_id: str, turn_id: str) -> bool:
        active = self.engine.active.get(thread_id)
        return active is not None and active.record.id == turn_id

    async def run(
        self, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Run turns until cancelled (start with ``task_group.start``), after
        failing the turns a previous process left running (with several
        nodes: the turns of nodes that stopped heartbeating)."""
        if self.cluster is None:
            await self.engine.recover()
            await self.engine.run(task_status)
            return
        async with anyio.create_task_group() as tg:
            await tg.start(self.cluster.run)
            await self.engine.run(task_status)

    async def shutdown(self) -> None:
        """Cancel running turns; each ends with ``turn/cancelled`` (``serverShutdown``)."""
        await self.engine.shutdown()

    def join(self, participant: Participant) -> None:
        """``participant`` receives workspace-wide broadcasts from now on."""
        self.bus.join(participant)

    def leave(self, participant: Participant) -> None:
        """``participant`` left: drop it from broadcasts and subscriptions."""
        self.bus.leave(participant)


def _node_store(db: Database, node_id: str | None, workspace: Path) -> NodeStore:
    """The cluster store for ``db``'s engine (each imported only when used)."""
    from appserver.storage.nodes import new_node_id

    node_id = node_id or new_node_id()
    if db.dialect == "postgresql":
        from appserver.storage.cluster import ClusterStore
        from appserver.storage.postgres import PostgresDatabase

        assert isinstance(db, PostgresDatabase)
        return ClusterStore(db, node_id)
    from appserver.storage.cluster_sqlite import SqliteClusterStore
    from appserver.storage.db import SqliteDatabase

    assert isinstance(db, SqliteDatabase)
    return SqliteClusterStore(db, node_id, workspace / ".craft")
