"""SubAgent child threads: spawning, waiting on, closing and resuming them.

A parent turn's ``SpawnAgent`` call makes a child thread (``source.kind``
``subagent``, DotCraft's ``subAgent`` block), an edge parent -> child
(``thread_spawn_edges``) and starts the child's first turn on this runtime,
then returns at once (DotCraft's code, not its spec: the parent may spawn
several children and ``WaitAgent`` on each). The child's turn has the parent
turn's client as its watcher, so that client sees the child's events and is
asked the child's approvals. A parent turn that ends cancelled (interrupt,
shutdown) cancels the thread's children that still run; one that completes
leaves them running. The ``profile`` says how the child runs: on this runtime
(``native``) or as an external command per task (``cli-oneshot``, whose turns
:mod:`appserver.runtime.subagent_external` runs).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import anyio

from appserver.protocol import turns as turn_wire
from appserver.protocol.ids import now_iso
from appserver.protocol.spawn_edges import ThreadSpawnEdge
from appserver.protocol.subagent_sessions import (
    SubAgentControlResult,
    SubAgentGraphChangedNotification,
)
from appserver.runtime.errors import (
    InvalidInput,
    Refusal,
    ThreadNotActive,
    ThreadNotFound,
    TurnInProgress,
)
from appserver.runtime.events import Participant
from appserver.runtime.subagent_external import (
    ExternalRuns,
    ExternalTask,
    native_instructions,
    role_task,
    thread_workspace,
)
from appserver.runtime.subagent_progress import ChildRun, SubAgentProgress
from appserver.runtime.subagent_roles import MAX_NICKNAME, child_configuration, find_role
from appserver.runtime.threads import NewThread, Threads
from appserver.runtime.turn_cases import Turns
from appserver.runtime.turns.model import ActiveTurn
from appserver.storage.records import ThreadRecord
from appserver.tools.base import ToolError

NATIVE = "native"
KEPT_FINISHED_RUNS = 64


class SubAgentError(ToolError):
    """A control call the model got wrong (unknown role or child, depth, ...)."""


def sub_agent_of(thread: ThreadRecord) -> dict[str, Any]:
    """The thread's ``source.subAgent`` block (empty for a user thread)."""
    block = (thread.source or {}).get("subAgent")
    return block if isinstance(block, dict) else {}


def turn_text(items: Iterable[Any], error: str | None = None) -> str:
    """A turn's agent messages joined by blank lines (its error texts if none),
    then ``error`` (a failed turn's) when not among them. ``items``: the live
    turn's records or a stored turn's wire items (both have ``type`` and ``payload``)."""
    items = list(items)
    texts = [str(i.payload.get("text") or "") for i in items if i.type == "agentMessage"]
    if not any(texts):
        texts = [str(i.payload.get("message") or "") for i in items if i.type == "error"]
    if error and error not in texts:
        texts.append(error)
    return "\n\n".join(text for text in texts if text)


class SubAgents:
    """The child threads of this workspace's runtime."""

    def __init__(self, threads: Threads, turns: Turns, max_depth: Callable[[], int]) -> None:
        self.threads = threads
        self.turns = turns
        self.edges = threads.edges
        # ``SubAgent.MaxDepth`` of the workspace's config (at least 1).
        self.max_depth = max_depth
        self.runs: dict[str, ChildRun] = {}  # by child thread id
        self.finished: dict[str, ChildRun] = {}  # the last ended ones, oldest first
        self.progress = SubAgentProgress(threads.bus)
        self.external = ExternalRuns(threads)
        threads.engine.turn_listeners.append(self._turn_ended)
        threads.engine.ending.closing_listeners.append(self.progress.closing)

    # --- graph -------------------------------------------------------------------

    async def _changed(self, parent_id: str, child_id: str) -> None:
        self.threads.bus.publish(
            "subagent/graphChanged",
            SubAgentGraphChangedNotification(parent_thread_id=parent_id, child_thread_id=child_id),
            broadcast=True,
        )

    async def set_status(self, parent_id: str, child_id: str, status: str) -> ThreadSpawnEdge:
        """Set the edge's status and announce it (changed or not)."""
        if not await self.edges.set_status(parent_id, child_id, status):
            raise InvalidInput(f"Thread '{child_id}' is not a SubAgent child of '{parent_id}'.")
        await self._changed(parent_id, child_id)
        edge = await self.edges.get(parent_id, child_id)
        assert edge is not None
        return edge

    # --- spawning ----------------------------------------------------------------

    async def spawn(
        self, parent_id: str, parent_turn_id: str, arguments: dict[str, Any]
    ) -> SubAgentControlResult:
        """Make a child of ``parent_id`` and start its first turn (§2.8 of the parity notes)."""
        parent = await self.threads.get(parent_id)
        parent_block = sub_agent_of(parent)
        prompt = str(arguments.get("agentPrompt") or "").strip()
        if not prompt:
            raise SubAgentError("'agentPrompt' is required.")
        nickname = str(arguments.get("agentNickname") or "").strip()[:MAX_NICKNAME]
        if not nickname:
            first = next(line.strip() for line in prompt.splitlines() if line.strip())
            nickname = first[:MAX_NICKNAME]
        role = find_role(str(arguments.get("agentRole") or ""))
        directory = arguments.get("workingDirectory")
        choice = await self.external.choose(
            str(arguments.get("profile") or ""), directory if isinstance(directory, str) else None
        )
        depth = int(parent_block.get("depth", 0)) + 1
        max_depth = max(1, self.max_depth())
        if depth > max_depth:
            raise SubAgentError(f"Subagent depth limit reached. Maximum depth is {max_depth}.")
        root = str(parent_block.get("rootThreadId") or parent.id)
        block = {
            "parentThreadId": parent.id,
            "parentTurnId": parent_turn_id,
            "rootThreadId": root,
            "depth": depth,
            "agentNickname": nickname,
            "agentRole": role.name,
            "profileName": choice.name,
            "runtimeType": choice.runtime,
            "supportsSendInput": choice.resumable,
            "supportsResume": choice.resumable,
            "supportsClose": True,
        }
        configuration = child_configuration(parent.configuration, role, depth, max_depth)
        # Once the child is stored, its edge and announcement follow even if the
        # parent's turn is cancelled meanwhile: no child a client cannot place.
        with anyio.CancelScope(shield=True):
            child = await self.threads.create(
                NewThread(
                    user_id=parent.user_id,
                    channel_name="subagent",
                    workspace_path=thread_workspace(choice, parent.workspace_path),
                    channel_context=parent.id,
                    display_name=nickname,
                    source={"kind": "subagent", "subAgent": block},
                    configuration=native_instructions(configuration, choice),
                    metadata=choice.thread_metadata(),
                ),
                announce=False,  # after its edge: a client told of the child can list it
            )
            now = now_iso()
            edge = ThreadSpawnEdge(
                parent_thread_id=parent.id,
                child_thread_id=child.id,
                parent_turn_id=parent_turn_id,
                depth=depth,
                agent_nickname=nickname,
                agent_role=role.name,
                profile_name=choice.name,
                runtime_type=choice.runtime,
                supports_send_input=choice.resumable,
                supports_resume=choice.resumable,
                status="open",
                created_at=now,
                updated_at=now,
            )
            await self.edges.upsert(edge)
            await self.threads.announce_started(child)
            await self._changed(parent.id, child.id)
        external = None
        if choice.external:
            task = role_task(role.name, role.instructions, prompt)
            external = ExternalTask(choice, task, nickname)
        await self._start_child(parent.id, child.id, prompt, nickname, external)
        return self.result(edge, "running")

    async def _start_child(
        self,
        parent_id: str,
        child_id: str,
        text: str,
        label: str,
        external: ExternalTask | None = None,
    ) -> None:
        """Start a turn of the child with ``text``: the agent's, or the run of
        its external command (its turn's work)."""
        parent_turn = self.threads.engine.active.get(parent_id)
        # The parent turn's client watches the child's turn: it sees its events
        # and is asked its approvals.
        origin = parent_turn.origin if parent_turn is not None else None
        work = None
        if external is not None:
            work = self.external.work(external, parent_id, parent_turn, self._stage)
        active = await self.turns.start(
            child_id, [turn_wire.TextPart(type="text", text=text)], origin, work=work
        )
        self.finished.pop(child_id, None)
        run = self.runs[child_id] = ChildRun(parent_id, active)
        if parent_turn is not None:
            self.progress.track(parent_turn, child_id, label, run)

    def _stage(self, active: ActiveTurn, stage: str) -> None:
        """What an external child's running turn is doing now (``ChildRun.stage``)."""
        run = self.runs.get(active.thread_id)
        if run is not None and run.active is active:
            run.stage = stage

    def _turn_ended(self, active: ActiveTurn) -> None:
        """A parent turn that ended cancelled takes the thread's running children with
        it (whichever turn spawned them: stopping a turn that waits on a child stops it)."""
        run = self.runs.get(active.thread_id)
        if run is not None and run.active is active:
            # Kept (the newest few) so a WaitAgent just after still shows the
            # ended run in its progress and answers from it.
            self.finished[active.thread_id] = self.runs.pop(active.thread_id)
            while len(self.finished) > KEPT_FINISHED_RUNS:
                del self.finished[next(iter(self.finished))]
        if active.record.status != "cancelled":
            return
        for child_run in list(self.runs.values()):
            if (
                child_run.parent_thread_id == active.thread_id
                and not child_run.active.done.is_set()
            ):
                child_run.active.cancel("interrupted")

    # --- control -----------------------------------------------------------------

    @staticmethod
    def result(
        edge: ThreadSpawnEdge, status: str, message: str | None = None
    ) -> SubAgentControlResult:
        """The control result for ``edge`` (DotCraft's ``SubAgentControlResult``)."""
        return SubAgentControlResult(
            child_thread_id=edge.child_thread_id,
            status=status,
            message=message,
            agent_nickname=edge.agent_nickname,
            agent_role=edge.agent_role,
            profile_name=edge.profile_name,
            runtime_type=edge.runtime_type,
            supports_send_input=edge.supports_send_input,
            supports_resume=edge.supports_resume,
            supports_close=edge.supports_close,
        )

    async def edge(self, parent_id: str, child_id: str) -> ThreadSpawnEdge:
        """The edge parent -> child; ``InvalidInput`` when there is none."""
        if not child_id.strip():
            raise InvalidInput("'childThreadId' is required.")
        edge = await self.edges.get(parent_id, child_id)
        if edge is None:
            await self.threads.get(child_id)  # an unknown thread: ThreadNotFound
            raise InvalidInput(f"Thread '{child_id}' is not a SubAgent child of '{parent_id}'.")
        return edge

    async def wait(
        self, parent_id: str, child_id: str, timeout: float | None
    ) -> SubAgentControlResult:
        """Wait for the child's running turn (at most ``timeout`` seconds); the
        waiting turn's ``subagent/progress`` follows the child meanwhile."""
        edge = await self.edge(parent_id, child_id)
        run = self.runs.get(child_id) or self.finished.get(child_id)
        active = run.active if run is not None else self.threads.engine.active.get(child_id)
        waiting = self.threads.engine.active.get(parent_id)
        if run is not None and waiting is not None:
            self.progress.track(waiting, child_id, edge.agent_nickname or child_id, run)
        if active is None:
            # Nothing of this process runs it (it ended, or the server restarted
            # since: recovery failed the turn it was running): its last turn says.
            view = await self.threads.view(await self.threads.get(child_id), include_turns=True)
            turns = view.thread.turns
            if not turns:
                return self.result(edge, "idle")
            last = turns[-1]
            failure = last.error if last.status == "failed" else None
            return self.result(edge, last.status, turn_text(last.items or [], failure) or None)
        with anyio.move_on_after(timeout if timeout else float("inf")):
            await active.done.wait()
        if not active.done.is_set():
            return self.result(edge, "timeout")
        return self.result(edge, active.record.status, turn_text(active.items) or None)

    async def send_input(
        self, parent_id: str, child_id: str, message: str
    ) -> SubAgentControlResult:
        """Start another turn on the child."""
        edge = await self.edge(parent_id, child_id)
        if not message.strip():
            raise SubAgentError("'message' is required.")
        label = edge.agent_nickname or child_id
        external = None
        if (edge.runtime_type or NATIVE) != NATIVE:
            # Only a session the command can continue may take more input.
            child = await self.threads.get(child_id)
            external = await self.external.again(
                edge.profile_name or "", child.workspace_path, message, label
            )
            if not edge.supports_send_input:
                # Resuming was switched on since the spawn: the edge says so now.
                edge = edge.model_copy(
                    update={"supports_send_input": True, "supports_resume": True}
                )
                await self.edges.upsert(edge)
        if await self.threads.running_anywhere(child_id):
            raise TurnInProgress(child_id)
        await self._start_child(parent_id, child_id, message, label, external)
        return self.result(edge, "running")

    async def close(self, parent_id: str, child_id: str) -> SubAgentControlResult:
        """Cancel the child's running turn and close its edge."""
        await self.edge(parent_id, child_id)
        await self.stop(child_id)
        return self.result(await self.set_status(parent_id, child_id, "closed"), "closed")

    async def stop(self, child_id: str) -> None:
        """Cancel the child's running turn: here (waiting for its end, within the
        shutdown grace), or on the node of a cluster that runs it (told to)."""
        if child_id in self.threads.engine.active:
            await self.threads.engine.cancel_and_wait(child_id, "interrupted")
            return
        cluster = self.threads.cluster
        running = await cluster.store.running_turn(child_id) if cluster is not None else None
        if running is not None:
            with contextlib.suppress(Refusal):  # it ended meanwhile
                await self.turns.interrupt(child_id, running[0])

    async def resume(self, parent_id: str, child_id: str) -> SubAgentControlResult:
        """Reopen the child's edge (an archived child cannot be)."""
        await self.edge(parent_id, child_id)
        child = await self.threads.get(child_id)
        if child.status == "archived":
            raise ThreadNotActive(child_id)
        return self.result(await self.set_status(parent_id, child_id, "open"), "open")

    # --- lifecycle of trees ------------------------------------------------------

    async def refuse_child(self, thread_id: str, verb: str) -> None:
        """A child is managed through its parent: ``InvalidInput`` for one."""
        thread = await self.threads.get(thread_id)
        if thread.source_kind != "subagent":
            return
        parent = sub_agent_of(thread).get("parentThreadId") or thread.channel_context
        raise InvalidInput(
            f"SubAgent child thread '{thread.id}' cannot be {verb} directly; "
            f"manage its parent thread '{parent}' instead."
        )

    async def archive(self, thread_id: str) -> None:
        """Archive a thread and its whole subtree (closed edges too); a child is refused.

        The thread's own running turn refuses it (``TurnInProgress``, as for any
        thread); its descendants' running turns are cancelled first, since an
        archived child has no one left to report to."""
        await self.refuse_child(thread_id, "archived")
        if await self.threads.running_anywhere(thread_id):
            raise TurnInProgress(thread_id)
        below = await self.descendants(thread_id)
        await self.threads.archive(thread_id)
        for child_id in below:
            await self.stop(child_id)
            await self._quietly(self.threads.archive(child_id))

    async def unarchive(self, thread_id: str) -> None:
        """Unarchive a thread and its whole subtree; a child is refused."""
        await self.refuse_child(thread_id, "unarchived")
        below = await self.descendants(thread_id)
        await self.threads.unarchive(thread_id)
        for child_id in below:
            await self._quietly(self.threads.unarchive(child_id))

    async def delete(self, thread_id: str, by: Participant | None = None) -> None:
        """Delete a thread and its whole subtree, leaves first (each gets
        ``thread/deleted``); a child is refused."""
        await self.refuse_child(thread_id, "deleted")
        for child_id in reversed(await self.descendants(thread_id)):
            await self._quietly(self.threads.delete(child_id, by=by))
        await self.threads.delete(thread_id, by=by)

    @staticmethod
    async def _quietly(change: Awaitable[None]) -> None:
        """A descendant deleted meanwhile (another process, a race) is already gone."""
        try:
            await change
        except ThreadNotFound:
            return

    async def descendants(self, thread_id: str) -> list[str]:
        """Every thread below ``thread_id``, parents first."""
        return await self.edges.descendants(thread_id)

    async def known(self, thread_id: str) -> bool:
        """Whether the thread exists."""
        try:
            await self.threads.get(thread_id)
        except ThreadNotFound:
            return False
        return True
