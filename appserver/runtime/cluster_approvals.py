"""Approvals across nodes: the clients of every other node answer this node's
questions, and this node's clients answer theirs (docs/scale-out.md,
"Approvals across nodes").

Who can answer never waits for a sweep: the broker counts the live nodes
just before it asks (:meth:`RemoteAskers.refresh`), and a node that joins
while a question is open is asked too (:meth:`RemoteAskers.joined`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import anyio.abc

from appserver.protocol.encoding import model_json
from appserver.runtime.approvals import ApprovalBroker, PendingApproval
from appserver.runtime.events import Participant, QuestionUnanswered
from appserver.storage.cluster_common import NodeStore

if TYPE_CHECKING:
    from appserver.protocol.turns import ApprovalRequestParams


class NodeLink(Protocol):
    """What approvals need of this node (runtime/cluster.py's ClusterNode)."""

    store: NodeStore
    silence: float

    @property
    def node_id(self) -> str: ...

    @property
    def task_group(self) -> anyio.abc.TaskGroup | None: ...

    async def send(self, node_id: str, kind: str, body: dict[str, Any]) -> None: ...


class _RemoteQuestion:
    """A question this node put to the other nodes' clients."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body  # the approval/ask sent to each node
        self.asked: set[str] = set()  # nodes it was sent to
        self.nodes: set[str] = set()  # nodes that have not replied
        self.answer: dict[str, Any] | None = None
        self.settled = False
        self.changed = anyio.Event()

    def wake(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()


class RemoteAskers:
    """The clients of every other node, as one participant of a turn's approval.

    Asking sends ``approval/ask`` to each live node; a node asks its clients
    subscribed to the thread and sends back the first answer
    (``approval/answer``), or ``null`` when none of them answered. The
    broker's first-answer-wins rule then holds across nodes; once the
    question is over, nodes still asking are told to stop (``approval/settled``).
    """

    name = "another node's client"
    closed = False

    def __init__(self, node: NodeLink) -> None:
        self.node = node
        self.peers = 0  # other live nodes, counted just before each question
        self._questions: dict[str, _RemoteQuestion] = {}

    def wants(self, kind: str, topic: str | None) -> bool:
        return False

    def deliver(self, event: object) -> None:
        return None

    def can_answer_approvals(self) -> bool:
        return self.peers > 0

    async def refresh(self) -> None:
        """Count the live nodes now (the broker calls this before it asks)."""
        self.peers = len(await self.node.store.live_peers(self.node.silence))

    async def ask_approval(self, request: Any, timeout: float) -> dict[str, Any]:
        question = self._questions[request.request_id] = _RemoteQuestion(
            {
                "threadId": request.thread_id,
                "requestId": request.request_id,
                "params": model_json(request),
                "timeout": timeout,
                "from": self.node.node_id,
            }
        )
        try:
            # Registered before the nodes are counted: one that joins after the
            # count is asked by joined(), so none falls between the two.
            for node_id in await self.node.store.live_peers(self.node.silence):
                await self._send_to(question, node_id)
            with anyio.move_on_after(timeout):
                while question.answer is None and question.nodes and not question.settled:
                    await question.changed.wait()
        finally:
            self._questions.pop(request.request_id, None)
            with anyio.CancelScope(shield=True):
                for node_id in question.nodes:
                    await self.node.send(
                        node_id, "approval/settled", {"requestId": request.request_id}
                    )
        if question.answer is None:
            raise QuestionUnanswered("no client of another node answered")
        return question.answer

    async def _send_to(self, question: _RemoteQuestion, node_id: str) -> None:
        if node_id in question.asked or node_id == self.node.node_id:
            return
        question.asked.add(node_id)
        question.nodes.add(node_id)
        await self.node.send(node_id, "approval/ask", question.body)

    async def joined(self, node_id: str) -> None:
        """A node joined: ask it every question still open here."""
        self.peers += 1
        for question in list(self._questions.values()):
            if question.answer is None and not question.settled:
                await self._send_to(question, node_id)

    def gone(self, alive: set[str]) -> None:
        """Stop waiting for nodes not in ``alive``: a node that died never answers."""
        for question in self._questions.values():
            if question.nodes - alive:
                question.nodes &= alive
                question.wake()

    def settle(self, request_id: str) -> None:
        """The broker's question is over (answered here, or timed out)."""
        question = self._questions.get(request_id)
        if question is not None:
            question.settled = True
            question.wake()

    async def on_answer(self, body: dict[str, Any]) -> None:
        question = self._questions.get(str(body.get("requestId")))
        if question is None:
            return
        question.nodes.discard(str(body.get("node")))
        answer = body.get("answer")
        if isinstance(answer, dict) and question.answer is None:
            question.answer = answer
        question.wake()


class RemoteQuestions:
    """This node's side of another node's approval: ask the local clients
    subscribed to the thread, answer the asking node."""

    def __init__(
        self,
        node: NodeLink,
        broker: ApprovalBroker,
        subscribers: Callable[[str], frozenset[Participant]],
    ) -> None:
        self.node = node
        self.broker = broker
        self.subscribers = subscribers
        self._pending: dict[str, PendingApproval[ApprovalRequestParams]] = {}
        self._askers: dict[str, str] = {}  # request id -> the node that asked

    def gone(self, alive: set[str]) -> None:
        """End the questions of nodes not in ``alive``: a node that died asks
        nothing any more (a sweep fails its turn), and its question must not be
        offered to clients that subscribe later, nor hide a live one."""
        for request_id, asker in list(self._askers.items()):
            pending = self._pending.get(request_id)
            if asker not in alive and pending is not None:
                pending.resolve(_SETTLED, None)

    async def on_ask(self, body: dict[str, Any]) -> None:
        from appserver.protocol.turns import ApprovalRequestParams  # another node asks

        params = ApprovalRequestParams.model_validate_json(body["params"])
        asker, request_id = str(body["from"]), params.request_id
        capable = [
            participant
            for participant in self.subscribers(params.thread_id)
            if not participant.closed and participant.can_answer_approvals()
        ]
        answer: dict[str, Any] | None = None
        # Even with nobody here yet: a client that reconnects to this node and
        # subscribes within the reconnect grace is asked (broker.offer).
        task_group = self.node.task_group
        if task_group is not None:
            timeout = float(body.get("timeout") or self.broker.timeout)
            pending = PendingApproval(params, task_group, timeout, self.broker.reconnect_grace)
            self._pending[request_id] = pending
            self._askers[request_id] = asker
            # Here too a client that subscribes meanwhile is asked (broker.offer). A
            # thread runs one turn at a time in the cluster: a question still
            # registered for it is one whose end never came, and the new one wins.
            self.broker.pending[params.thread_id] = pending
            try:
                for participant in capable:
                    pending.ask(participant)
                decision, _reason = await pending.wait()
            finally:
                self._pending.pop(request_id, None)
                self._askers.pop(request_id, None)
                if self.broker.pending.get(params.thread_id) is pending:
                    del self.broker.pending[params.thread_id]
            if decision == _SETTLED:
                return  # the asking node has its answer: no reply wanted
            if decision is not None:
                answer = {"decision": decision, "scope": pending.scope}
        await self.node.send(
            asker,
            "approval/answer",
            {"requestId": request_id, "node": self.node.node_id, "answer": answer},
        )

    async def on_settled(self, body: dict[str, Any]) -> None:
        pending = self._pending.get(str(body.get("requestId")))
        if pending is not None:
            pending.resolve(_SETTLED, None)


_SETTLED = "settled"  # not a decision: the question ended on the asking node
