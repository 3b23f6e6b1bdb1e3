"""This node among several that share one database: PostgreSQL, or the
workspace's SQLite file that every process serving the workspace opens.

A node heartbeats (every lease/4), follows the other nodes' events through
its store's feed (PostgreSQL ``LISTEN``; SQLite polling), which
runtime/shared_log.py delivers, carries out the
commands other nodes send it (an interrupt, a steer, an approval's answer for
a turn it runs), and sweeps: a running turn whose node has missed three
heartbeats is failed within the lease, by exactly one node, with one
``turn/failed``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from appserver.runtime.approvals import ApprovalBroker
from appserver.runtime.cluster_approvals import RemoteAskers, RemoteQuestions
from appserver.runtime.events import Event, Participant
from appserver.runtime.journal import ThreadJournal
from appserver.runtime.shared_log import SharedLog
from appserver.runtime.state import RuntimeStates
from appserver.runtime.turns.queue import InputQueues
from appserver.runtime.turns.recovery import RECOVERED_ERROR, fail_interrupted
from appserver.storage.cluster_common import NodeStore, SharedEvent, WorkspaceMismatch
from appserver.storage.threads import ThreadRepository

log = logging.getLogger("appserver.cluster")

WORKSPACE_MARK = "cluster-workspace"  # under .craft/: the token every node must see
DELTA_RETENTION = 300.0  # seconds a completed item's stored deltas are kept
RECENT_BROADCASTS = 60.0  # seconds (beyond a lease) a delivered broadcast is remembered

Command = Callable[[dict[str, Any]], Awaitable[None]]


STRANDED = (
    "This node lost track of the turn (a write whose answer never came may or may "
    "not have reached the database); it marked the turn failed."
)

PROCESS_LOST = (
    "The appserver process running this turn stopped; another process serving the "
    "workspace marked the turn failed."
)


def lost_error(silence: float) -> str:
    return (
        f"The server node running this turn stopped (no heartbeat for {silence:g} s); "
        "another node marked the turn failed."
    )


class ClusterNode:
    """Heartbeat, event feed, commands and failover of one node."""

    def __init__(
        self,
        store: NodeStore,
        journal: ThreadJournal,
        repo: ThreadRepository,
        states: RuntimeStates,
        inputs: InputQueues,
        workspace: Path,
        lease: float,
    ) -> None:
        self.store = store
        self.journal = journal
        self.repo = repo
        self.inputs = inputs
        self.workspace = workspace
        self.lease = lease
        # Heartbeats come every lease/4; a node silent for three of them is
        # dead, and sweeps every lease/8 fail its turns: at most 7/8 of the
        # lease after it stopped (at least half of it), so within the lease.
        self.silence = lease * 3 / 4
        self.shared = SharedLog(
            store, journal._deliver, journal.lock, journal.bus.subscribers, journal.forget_lock
        )
        journal.shared = self.shared
        self.states = states
        self.shared.on_remote = self._remote_event
        self.commands: dict[str, Command] = {}  # kind -> handler (set by the runtime)
        self._tg: anyio.abc.TaskGroup | None = None
        self._scheduled: set[str] = set()
        self._commands_pending = False
        self.peers = 0  # other live nodes, as of the last sweep
        # Set (and dropped) when another node announces a thread idle: what
        # wait_idle waits on.
        self._idle_signals: dict[str, anyio.Event] = {}
        self._down_since: float | None = None  # when the feed went down (Unix seconds)
        self._askers: RemoteAskers | None = None  # set by wire_approvals
        self._questions: RemoteQuestions | None = None  # the same
        # Whether this node runs the turn (thread, turn); set by the runtime.
        self.runs_turn: Callable[[str, str], bool] = lambda _thread, _turn: True
        # Who watched a turn of this node whose end it could not store; set by the runtime.
        self.watchers_of: Callable[[str, str], list[Participant]] = lambda _thread, _turn: []
        self._stranded: set[tuple[str, str]] = set()  # this node's, not run, at the last sweep
        # Called when a heartbeat finds that the other nodes took this one for dead.
        self.on_presumed_dead: Callable[[], Awaitable[None]] | None = None

    @property
    def node_id(self) -> str:
        return self.store.node_id

    @property
    def task_group(self) -> anyio.abc.TaskGroup | None:
        """Where this node runs what other nodes ask of it (``None`` until it runs)."""
        return self._tg

    def wire_approvals(self, broker: ApprovalBroker) -> None:
        """Let the clients of other nodes answer this node's approvals, and
        this node's clients answer theirs."""
        remote = self._askers = RemoteAskers(self)
        broker.remote_askers.append(remote)
        broker.settle_listeners.append(remote.settle)
        broker.before_asking.append(remote.refresh)
        questions = self._questions = RemoteQuestions(self, broker, self.journal.bus.subscribers)

        async def joined(body: dict[str, Any]) -> None:
            # A node that joins is asked what is open here, as if it had been
            # alive when the question was put, and told the session grants.
            node_id = str(body.get("node"))
            await remote.joined(node_id)
            broker.offer_remote()
            grants = broker.session_grants()
            if grants:
                await self.send(node_id, "approval/grant", {"grants": grants})

        async def share_grant(thread_id: str, key: str) -> None:
            await self.broadcast("approval/grant", {"grants": {thread_id: [key]}})

        async def on_grant(body: dict[str, Any]) -> None:
            grants = body.get("grants")
            for thread_id, keys in (grants if isinstance(grants, dict) else {}).items():
                for key in keys if isinstance(keys, list) else []:
                    broker.add_session_grant(str(thread_id), str(key))

        broker.grant_listeners.append(share_grant)
        self.commands["approval/grant"] = on_grant

        self.commands["approval/answer"] = remote.on_answer
        self.commands["approval/ask"] = questions.on_ask
        self.commands["approval/settled"] = questions.on_settled
        self.commands["node/joined"] = joined

    async def check_workspace(self) -> None:
        """Refuse to start on a workspace the other nodes do not share.

        The first node writes the database's token into the workspace; a node
        that finds another token, or none while other nodes are alive, is on
        another directory (not the shared storage) and would fail later, when
        a turn reads files another node wrote. (Not for the workspace's own
        SQLite file: it cannot belong to another directory.)
        """
        if not self.store.remote:
            return
        token = await self.store.workspace_token()
        mark = self.workspace / ".craft" / WORKSPACE_MARK
        try:
            found: str | None = mark.read_text("utf-8").strip()
        except FileNotFoundError:
            found = None
        if found == token:
            return
        if found is not None:
            raise WorkspaceMismatch(
                f"workspace {self.workspace} belongs to another database's nodes "
                f"({mark} holds another token): nodes sharing a database must share "
                "one workspace directory"
            )
        others = len(await self.store.live_peers(self.silence))
        if others:
            raise WorkspaceMismatch(
                f"workspace {self.workspace} is not the one the other {others} node(s) use "
                f"(no {mark}): nodes sharing a database must share one workspace "
                "directory (shared storage, the same path on every node)"
            )
        mark.parent.mkdir(parents=True, exist_ok=True)
        mark.write_text(token + "\n", "utf-8")

    async def run(self, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Join, fail what dead nodes left running, then follow the cluster
        until cancelled (start with ``task_group.start``)."""
        await self.check_workspace()
        await self.store.join(str(self.workspace))
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                await tg.start(self.shared.run)
                await tg.start(self.store.follow, self)
                await self.sweep(starting=True)
                # The others learn of this node now, not at their next sweep:
                # an approval open there is put to this node's clients too.
                await self.broadcast("node/joined", {"node": self.node_id})
                tg.start_soon(self._heartbeat)
                tg.start_soon(self._sweeper)
                task_status.started()
                await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(2):
                await self.store.leave()
                await self.store.close()

    # --- heartbeat and failover --------------------------------------------------------

    async def _heartbeat(self) -> None:
        while True:
            await anyio.sleep(self.lease / 4)
            try:
                alive = await self.store.heartbeat()
            except Exception as exc:
                log.warning("heartbeat failed: %s", exc)
                continue
            if not alive:
                # Silent too long (a stall, a lost network): the other
                # nodes have failed this node's turns; stop running them here.
                log.error("this node was taken for dead; cancelling its turns")
                if self.on_presumed_dead is not None:
                    await self.on_presumed_dead()

    async def _sweeper(self) -> None:
        last_prune = 0.0
        while True:
            await anyio.sleep(max(self.lease / 8, 0.05))
            try:
                await self.sweep()
                self.shared.drop_idle()  # threads whose last follower left
                if self._down_since is None:  # kept while the feed is down
                    self.shared.recent.prune(RECENT_BROADCASTS + self.lease)
                now = anyio.current_time()
                if now - last_prune > DELTA_RETENTION / 2:
                    last_prune = now
                    await self.store.prune_deltas(DELTA_RETENTION)
            except Exception as exc:
                log.warning("sweep failed: %s", exc)

    async def sweep(self, starting: bool = False) -> int:
        """Fail the running turns of dead nodes that this node claims.
        ``starting``: this process's first sweep; on the workspace's own file,
        what it fails is what a restart fails, and says so as a restart does."""
        restart = starting and not self.store.remote
        peers = await self.store.live_peers(self.silence)
        self.peers = len(peers)
        if self._askers is not None and self._questions is not None:
            self._askers.gone(set(peers))  # a node asked that died will not answer
            self._questions.gone(set(peers))  # nor ask any more
        failed = 0
        for thread_id, turn_id in await self.store.claim_orphaned_turns(self.silence):
            try:
                turn = await self.journal.events.turn(thread_id, turn_id)
                if turn is None or turn.status not in ("running", "waitingApproval"):
                    continue
                log.warning("failing turn %s on %s: its node stopped", turn_id, thread_id)
                if restart:
                    error = RECOVERED_ERROR
                else:
                    error = lost_error(self.silence) if self.store.remote else PROCESS_LOST
                await fail_interrupted(self.journal, self.repo, self.inputs, turn, error)
                await self.states.announce_idle(thread_id)
                self._signal_idle(thread_id)
                failed += 1
            except Exception:
                # Deleted meanwhile, taken over again, the database gone: the
                # next sweep looks again; the node carries on.
                log.exception("could not fail turn %s on %s", turn_id, thread_id)
        return failed + await self._fail_stranded()

    async def _fail_stranded(self) -> int:
        """Fail the turns the database says this node runs and it does not: a
        COMMIT whose answer was lost (the turn's start, or its end) left them
        running there. Seen at two sweeps in a row, so a turn that is just
        starting or ending here is not taken for one."""
        stranded = {
            (thread_id, turn_id)
            for thread_id, turn_id in await self.store.own_running_turns()
            if not self.runs_turn(thread_id, turn_id)
        }
        failed = 0
        for thread_id, turn_id in stranded & self._stranded:
            try:
                turn = await self.journal.events.turn(thread_id, turn_id)
                if turn is None or turn.status not in ("running", "waitingApproval"):
                    continue
                log.warning("failing turn %s on %s: this node lost track of it", turn_id, thread_id)
                watchers = self.watchers_of(thread_id, turn_id)  # its end, unstored here
                await fail_interrupted(
                    self.journal, self.repo, self.inputs, turn, STRANDED, include=watchers
                )
                await self.states.announce_idle(thread_id)
                self._signal_idle(thread_id)
                failed += 1
            except Exception:
                log.exception("could not fail turn %s on %s", turn_id, thread_id)
        self._stranded = stranded
        return failed

    def _remote_event(self, event: Event) -> None:
        # Another node runs the thread's turn: its runtime flags hold here too.
        if event.kind == "thread/runtimeChanged":
            params = event.data
            thread_id, runtime = str(params.get("threadId")), params.get("runtime") or {}
            self.states.adopt(thread_id, runtime)
            if not runtime.get("running"):
                self._signal_idle(thread_id)

    def _signal_idle(self, thread_id: str) -> None:
        signal = self._idle_signals.pop(thread_id, None)
        if signal is not None:
            signal.set()

    async def wait_idle(self, thread_id: str) -> None:
        """Return once no turn runs on the thread by the database (a new one may
        start at once: a caller that starts a turn still meets ``TurnInProgress``).
        Callers wait for this node's own turns first; one it lost track of is
        failed by a sweep, which wakes this too."""
        while True:
            # Armed before looking: an end announced meanwhile still wakes us.
            signal = self._idle_signals.setdefault(thread_id, anyio.Event())
            if await self.store.running_turn(thread_id) is None:
                return
            # The end comes as the other node's thread/runtimeChanged; look again
            # now and then all the same (a node that dies never says it; a sweep
            # here or elsewhere fails its turn within the lease).
            with anyio.move_on_after(max(self.lease / 4, 0.05)):
                await signal.wait()

    # --- the store's feed (FeedHandler) -------------------------------------------------

    def on_events(self, thread_id: str, first: int, last: int, node: str, broadcast: bool) -> None:
        """Another node appended ``first..last`` of a thread."""
        if node == self.node_id:
            return  # this node delivers its own events as it commits them
        if self.shared.announced(thread_id, first, last, broadcast):
            self._schedule_pump(thread_id)

    def on_commands(self) -> None:
        """Commands may be queued for this node."""
        self._wake_commands()

    def on_lost(self) -> None:
        """The feed went down: note since when (what it missed is read back)."""
        if self._down_since is None:
            self._down_since = time.time()

    def on_reconnect(self) -> None:
        """The feed was down: read what was announced meanwhile."""
        self._catch_up()
        since, self._down_since = self._down_since, None
        if since is not None and self._tg is not None:
            # From a lease before the loss was noticed: noticing may lag it, and
            # the events' times are their writers' clocks.
            self._tg.start_soon(self.catch_up_broadcasts, since - self.lease)

    async def catch_up_broadcasts(self, since: float) -> None:
        """Deliver other nodes' broadcasts stored since ``since`` (Unix seconds)
        of threads this node does not follow: their notifications were lost
        while the feed was down (the followed threads' pumps read the log)."""
        try:
            rows = await self.store.broadcasts_since(since)
        except Exception as exc:
            log.warning("event feed: cannot read the broadcasts it missed: %s", exc)
            return
        by_thread: dict[str, list[SharedEvent]] = {}
        for thread_id, row in rows:
            by_thread.setdefault(thread_id, []).append(row)
        for thread_id, missed in by_thread.items():
            await self.shared.deliver_missed(thread_id, missed)

    def _schedule_pump(self, thread_id: str, force: bool = False) -> None:
        if thread_id in self._scheduled or self._tg is None:
            return
        self._scheduled.add(thread_id)

        async def pump() -> None:
            self._scheduled.discard(thread_id)
            try:
                await self.shared.pump(thread_id, force=force)
            except Exception as exc:
                log.warning("event feed: cannot read %s: %s", thread_id, exc)

        self._tg.start_soon(pump)

    def _catch_up(self) -> None:
        for thread_id in self.shared.reconnected():
            self._schedule_pump(thread_id, force=True)

    # --- commands ----------------------------------------------------------------------

    def _wake_commands(self) -> None:
        if self._commands_pending or self._tg is None:
            return
        self._commands_pending = True
        self._tg.start_soon(self._take_commands)

    async def _take_commands(self) -> None:
        self._commands_pending = False
        try:
            commands = await self.store.take_commands()
        except Exception as exc:
            log.warning("cannot read commands: %s", exc)
            return
        for kind, body in commands:
            handler = self.commands.get(kind)
            if handler is None:
                log.warning("unknown cluster command %r", kind)
            elif self._tg is not None:
                # Each on its own: an approval question waits for a person.
                self._tg.start_soon(self._carry_out, kind, handler, body)

    async def _carry_out(self, kind: str, handler: Command, body: dict[str, Any]) -> None:
        try:
            await handler(body)
        except Exception:
            log.exception("cluster command %s failed", kind)

    async def broadcast(self, kind: str, body: dict[str, Any]) -> None:
        """Send ``kind`` to every other live node."""
        for node_id in await self.store.live_peers(self.silence):
            await self.send(node_id, kind, body)

    async def cancel_and_wait(self, thread_id: str, reason: str, grace: float = 5.0) -> None:
        """Cancel the thread's turn if another node runs it, and wait (up to
        ``grace`` seconds) until it has ended."""
        running = await self.store.running_turn(thread_id)
        if running is None or running[1] in (None, self.node_id):
            return
        turn_id, node_id = running
        assert node_id is not None
        await self.send(
            node_id, "interrupt", {"threadId": thread_id, "turnId": turn_id, "reason": reason}
        )
        with anyio.move_on_after(grace):
            while await self.store.running_turn(thread_id) is not None:
                await anyio.sleep(0.02)  # polled: the end arrives as an event elsewhere

    async def send(self, node_id: str, kind: str, body: dict[str, Any]) -> None:
        """Ask ``node_id`` to carry out ``kind`` (it runs the turn ``body`` names)."""
        await self.store.send(node_id, kind, body)
