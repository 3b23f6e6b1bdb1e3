"""Approvals: deciding whether a gated tool call may run.

Order of checks for one :class:`~appserver.tools.base.ApprovalNeed`:

1. Outside the workspace with ``requireApprovalOutsideWorkspace: false``:
   refused without asking.
2. Thread ``approvalPolicy`` (``default`` defers to the workspace default):
   ``autoApprove`` accepts silently inside the workspace. Outside it the
   question is asked under every policy (step 5).
3. A grant already covers it: the thread's session grants (``scopeKey``,
   from ``acceptForSession``/``acceptAlways``; outside the workspace a key
   names the one path or working directory) or a persisted ``acceptAlways``
   grant for the exact (kind, operation, target).
4. ``interrupt`` policy: the turn is cancelled at the first gated operation.
5. Otherwise every participant watching the turn that can answer approvals
   is asked through its front door (:meth:`Participant.ask_approval`; the
   JSON-RPC front door sends ``item/approval/request``). The first valid
   answer wins; others see ``item/approval/resolved``. Anything malformed, or
   an error answer, counts as ``decline``. A front door may also answer out
   of band with :meth:`ApprovalBroker.answer`.

It never hangs: no answer within the timeout, no participant able to answer,
or every asker gone for longer than the reconnect grace resolves by policy
(``decline``; ``cancel`` under ``interrupt``) with an ``error`` item saying why.
A participant that subscribes to or resumes the thread while a request is
pending is asked too, so a reconnecting client can still answer.
These rules live here once, for every front door.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass, field

import anyio
from anyio.abc import TaskGroup

from appserver.protocol.turns import ApprovalRequestParams
from appserver.runtime.events import Participant, QuestionRefused, QuestionUnanswered
from appserver.storage.threads import EventRepository
from appserver.tools.base import ApprovalNeed

log = logging.getLogger("appserver.approvals")

DECISIONS = ("accept", "acceptForSession", "acceptAlways", "decline", "cancel")


def scope_key(need: ApprovalNeed) -> str:
    """What a session grant covers: exactly what the prompt showed.

    Inside the workspace these are DotCraft's keys: ``shell:*`` (any command
    run in the workspace) and ``file:<operation>`` (that operation on any
    workspace path). Outside the workspace a grant covers that one place:
    ``file:<operation>:<path>``, ``shell:*:<workdir>``, so approving a write
    in the workspace never lets a write to ``~/.bashrc`` through, and one
    read outside never lets ``/etc/passwd`` through.
    """
    if need.kind == "shell":
        return f"shell:*:{need.target}" if need.outside_workspace else "shell:*"
    if need.kind == "file":
        operation = need.operation.lower()
        if need.outside_workspace:
            return f"file:{operation}:{need.target}"
        return f"file:{operation}"
    return f"{need.kind}:{need.operation}:{need.target}"


def parse_decision(decision: object) -> str:
    """A front door's answer as a decision; anything else is ``decline``."""
    return decision if isinstance(decision, str) and decision in DECISIONS else "decline"


@dataclass
class Verdict:
    """How an approval ended.

    ``decision`` is one of :data:`DECISIONS`. ``asked`` is false when no
    request was sent (policy or grant). ``fallback`` explains a decision the
    server took for an absent client (it becomes an ``error`` item).
    """

    decision: str
    asked: bool = False
    request_id: str | None = None
    fallback: str | None = None
    fallback_code: str | None = None
    answered_by: Participant | None = None

    @property
    def approved(self) -> bool:
        return self.decision in ("accept", "acceptForSession", "acceptAlways")


@dataclass
class PendingApproval:
    """One request waiting for its first answer."""

    params: ApprovalRequestParams
    tg: TaskGroup
    timeout: float
    grace: float
    decision: str | None = None
    answered_by: Participant | None = None
    asked: set[Participant] = field(default_factory=set)
    live: set[Participant] = field(default_factory=set)
    changed: anyio.Event = field(default_factory=anyio.Event)

    def resolve(self, decision: str, by: Participant | None) -> None:
        if self.decision is None:
            self.decision = decision
            self.answered_by = by
            self._notify()

    def _notify(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()

    def ask(self, participant: Participant) -> None:
        """Ask ``participant`` (once per participant)."""
        if self.decision is not None or participant in self.asked or participant.closed:
            return
        self.asked.add(participant)
        self.live.add(participant)
        self.tg.start_soon(self._ask, participant)

    async def _ask(self, participant: Participant) -> None:
        try:
            answer = await participant.ask_approval(self.params, self.timeout)
        except QuestionRefused:
            self.resolve("decline", participant)  # an error answer fails closed
        except QuestionUnanswered:
            pass
        except Exception:
            log.exception("asking %r for an approval failed", participant)
        else:
            self.resolve(parse_decision(answer), participant)
        finally:
            self.live.discard(participant)
            self._notify()

    async def wait(self) -> tuple[str | None, str | None]:
        """The decision, or ``(None, reason_code)`` when the server must decide."""
        deadline = anyio.current_time() + self.timeout
        orphaned_since: float | None = None
        while self.decision is None:
            now = anyio.current_time()
            if now >= deadline:
                return None, "approval_timeout"
            if self.live:
                orphaned_since = None
            elif orphaned_since is None:
                orphaned_since = now
            wake = deadline
            if orphaned_since is not None:
                if now >= orphaned_since + self.grace:
                    return None, "approval_client_gone"
                wake = min(wake, orphaned_since + self.grace)
            changed = self.changed
            with anyio.move_on_after(max(0.0, wake - now)):
                await changed.wait()
        return self.decision, None


class ApprovalBroker:
    """Runs the approval flow; knows nothing about items (the engine does those)."""

    def __init__(
        self,
        events: EventRepository,
        timeout: float = 120.0,
        reconnect_grace: float = 15.0,
    ) -> None:
        self.events = events
        self.timeout = timeout
        self.reconnect_grace = reconnect_grace
        self._session_grants: dict[str, set[str]] = {}
        self.pending: dict[str, PendingApproval] = {}  # thread id -> its pending request

    async def precheck(
        self, thread_id: str, need: ApprovalNeed, policy: str, require_outside: bool
    ) -> Verdict | None:
        """Decide without asking when policy or a grant settles it."""
        if need.outside_workspace and not require_outside:
            return Verdict(
                "decline",
                fallback="outside the workspace and requireApprovalOutsideWorkspace is false",
                fallback_code="outside_workspace_refused",
            )
        # autoApprove covers the workspace only: the boundary question is
        # still asked (or refused where nobody can answer) outside it.
        if policy == "autoApprove" and not need.outside_workspace:
            return Verdict("accept")
        if scope_key(need) in self._session_grants.get(thread_id, set()):
            return Verdict("accept")
        if await self.events.is_granted(need.kind, need.operation, need.target):
            return Verdict("accept")
        if policy == "interrupt":
            return Verdict("cancel", fallback="approvalPolicy is interrupt")
        return None

    def new_request_id(self) -> str:
        return secrets.token_hex(6)

    async def ask(
        self,
        params: ApprovalRequestParams,
        askers: list[Participant],
        tg: TaskGroup,
        policy: str,
    ) -> Verdict:
        """Ask ``askers`` and wait for the first answer."""
        capable = [asker for asker in askers if _can_answer(asker)]
        if not capable:
            return self._fallback(policy, params.request_id, "approval_unavailable")
        pending = PendingApproval(params, tg, self.timeout, self.reconnect_grace)
        self.pending[params.thread_id] = pending
        try:
            for conn in capable:
                pending.ask(conn)
            decision, reason = await pending.wait()
        finally:
            self.pending.pop(params.thread_id, None)
        if decision is None:
            assert reason is not None
            return self._fallback(policy, params.request_id, reason)
        return Verdict(decision, True, params.request_id, answered_by=pending.answered_by)

    def offer(self, thread_id: str, participant: Participant) -> None:
        """Ask a participant that (re)joined the thread about its pending request."""
        pending = self.pending.get(thread_id)
        if pending is not None and _can_answer(participant):
            pending.ask(participant)

    def answer(
        self, thread_id: str, request_id: str, decision: str, by: Participant | None = None
    ) -> bool:
        """Answer a pending request out of band (a front door whose protocol
        answers approvals in its own frames); ``False`` if none matches.
        The first answer wins, as for every other way of answering."""
        pending = self.pending.get(thread_id)
        if pending is None or pending.params.request_id != request_id:
            return False
        pending.resolve(parse_decision(decision), by)
        return True

    async def remember(self, thread_id: str, need: ApprovalNeed, decision: str, now: str) -> None:
        """Apply ``acceptForSession`` / ``acceptAlways``."""
        if decision in ("acceptForSession", "acceptAlways"):
            self._session_grants.setdefault(thread_id, set()).add(scope_key(need))
        if decision == "acceptAlways":
            await self.events.grant(need.kind, need.operation, need.target, now)

    def forget_thread(self, thread_id: str) -> None:
        self._session_grants.pop(thread_id, None)

    def _fallback(self, policy: str, request_id: str, code: str) -> Verdict:
        decision = "cancel" if policy == "interrupt" else "decline"
        reasons = {
            "approval_timeout": f"no answer to the approval request within {self.timeout:g}s",
            "approval_unavailable": "no connected client can answer approval requests",
            "approval_client_gone": (
                "the client watching this turn disconnected and did not come back within "
                f"{self.reconnect_grace:g}s"
            ),
        }
        return Verdict(
            decision,
            True,
            request_id,
            fallback=f"{reasons[code]}; resolved as {decision}",
            fallback_code=code,
        )


def _can_answer(participant: Participant) -> bool:
    return not participant.closed and participant.can_answer_approvals()
