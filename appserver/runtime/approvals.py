"""Approvals: deciding whether a gated tool call may run.

Order of checks for one :class:`~appserver.tools.base.ApprovalNeed`:

1. Outside the workspace with ``requireApprovalOutsideWorkspace: false``:
   refused without asking.
2. Thread ``approvalPolicy`` (``default`` defers to the workspace default):
   ``autoApprove`` accepts silently inside the workspace. Outside it the
   question is asked under every policy (step 5).
3. A grant already covers it: the thread's session grants (a key of one of
   its :func:`session_scopes`, from ``acceptForSession``, whose answer's
   ``scope`` picks the exact command or the wider scope, or from
   ``acceptAlways``; outside the workspace a key names the one path or
   working directory) or a persisted ``acceptAlways`` grant for the exact
   call (:func:`stored_grant`).
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
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

import anyio
from anyio.abc import TaskGroup

from appserver.runtime.events import Participant, QuestionRefused, QuestionUnanswered
from appserver.runtime.grant_keys import (  # the keys are importable from here too
    grant_key,
    scope_key,
    session_scopes,
    shell_command_key,
    stored_grant,
)
from appserver.storage.events import EventRepository
from appserver.tools.base import ApprovalNeed, one_line

if TYPE_CHECKING:
    from appserver.protocol.base import WireModel
    from appserver.protocol.turns import ApprovalRequestParams

log = logging.getLogger("appserver.approvals")

__all__ = [
    "DECISIONS",
    "SCOPES",
    "ApprovalBroker",
    "PendingApproval",
    "Verdict",
    "grant_key",
    "parse_answer",
    "parse_decision",
    "scope_key",
    "session_scopes",
    "shell_command_key",
    "stored_grant",
]

DECISIONS = ("accept", "acceptForSession", "acceptAlways", "decline", "cancel")


SCOPES = ("exact", "wider")


def parse_decision(decision: object) -> str:
    """A front door's answer as a decision; anything else is ``decline``."""
    return decision if isinstance(decision, str) and decision in DECISIONS else "decline"


def parse_answer(answer: object) -> tuple[str, str]:
    """``(decision, scope)`` of an answer: a decision string, or the answer
    object (``{"decision": ..., "scope": ...}``). A missing or unknown scope
    is ``exact``."""
    scope: object = None
    if isinstance(answer, Mapping):
        scope = answer.get("scope")
        answer = answer.get("decision")
    return parse_decision(answer), scope if isinstance(scope, str) and scope in SCOPES else "exact"


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
    scope: str = "exact"  # what an acceptForSession covers (see session_scopes)

    @property
    def approved(self) -> bool:
        return self.decision in ("accept", "acceptForSession", "acceptAlways")


P = TypeVar("P", bound="WireModel")


@dataclass
class PendingApproval(Generic[P]):
    """One request waiting for its first answer.

    The question itself is :meth:`_put` (an approval by default); client tool
    calls (``runtime.turns.client_tools``) and editor requests
    (``runtime.turns.editor_proxy``) reuse the rest: asking each participant
    once, first answer wins, the timeout and the reconnect grace.
    """

    params: P
    tg: TaskGroup
    timeout: float
    grace: float
    decision: str | None = None
    scope: str = "exact"
    answered_by: Participant | None = None
    asked: set[Participant] = field(default_factory=set)
    live: set[Participant] = field(default_factory=set)
    changed: anyio.Event = field(default_factory=anyio.Event)

    def resolve(self, decision: str, by: Participant | None, scope: str = "exact") -> None:
        if self.decision is None:
            self.decision = decision
            self.scope = scope
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
            answer = await self._put(participant)
        except QuestionRefused as exc:
            self._refused(participant, str(exc))
        except QuestionUnanswered:
            pass
        except Exception:
            log.exception("asking %r failed", participant)
        else:
            self._answered(participant, answer)
        finally:
            self.live.discard(participant)
            self._notify()

    async def _put(self, participant: Participant) -> object:
        """Ask ``participant`` the question; its raw answer."""
        return await participant.ask_approval(self.params, self.timeout)

    def _refused(self, participant: Participant, message: str) -> None:
        self.resolve("decline", participant)  # an error answer fails closed

    def _answered(self, participant: Participant, answer: object) -> None:
        decision, scope = parse_answer(answer)
        self.resolve(decision, participant, scope)

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
        # What each acceptAlways added to a thread's session grants, by the stored
        # grant: revoking that grant takes these back too.
        self._always_keys: dict[tuple[str, str, str], set[tuple[str, str]]] = {}
        self.pending: dict[str, PendingApproval[ApprovalRequestParams]] = {}  # by thread id
        # Called by :meth:`offer` too: other pending questions (client tool calls).
        self.offer_listeners: list[Callable[[str, Participant], None]] = []
        # Asked besides the turn's own watchers: the clients of other nodes
        # sharing the database (runtime/cluster.py).
        self.remote_askers: list[Participant] = []
        # Told each request id once its question is over (answered or not).
        self.settle_listeners: list[Callable[[str], None]] = []
        # Awaited before each question: the remote askers count the live nodes
        # then, not at their last sweep.
        self.before_asking: list[Callable[[], Awaitable[None]]] = []
        self._asked_here: set[str] = set()  # request ids of the questions ask() put
        # Told each acceptForSession grant (thread, key): nodes sharing a
        # database pass it on, so the session's grant holds on every node.
        self.grant_listeners: list[Callable[[str, str], Awaitable[None]]] = []

    async def precheck(
        self,
        thread_id: str,
        need: ApprovalNeed,
        policy: str,
        require_outside: bool,
        trusted: bool = True,
    ) -> Verdict | None:
        """Decide without asking when policy or a grant settles it. Grants
        remembered in the database count only in a ``trusted`` workspace (a
        database that came with a checkout can hold any)."""
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
        grants = self._session_grants.get(thread_id, set())
        if any(scope.scope_key in grants for scope in session_scopes(need)):
            return Verdict("accept")
        if trusted and await self.events.is_granted(*stored_grant(need)):
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
        for refresh in self.before_asking:
            try:
                await refresh()
            except Exception:
                log.exception("could not count who else can answer %s", params.request_id)
        capable = [asker for asker in [*askers, *self.remote_askers] if _can_answer(asker)]
        fields = _log_fields(params)
        if not capable:
            verdict = self._fallback(policy, params.request_id, "approval_unavailable")
            _log_verdict(params, verdict, fields)
            return verdict
        log.info(
            "approval %s asked on %s (item %s): %s %s in %s, of %d client(s)",
            params.request_id,
            params.thread_id,
            params.item_id,
            params.approval_type,
            one_line(params.operation),
            params.target,
            len(capable),
            extra=fields,
        )
        pending = PendingApproval(params, tg, self.timeout, self.reconnect_grace)
        self.pending[params.thread_id] = pending
        self._asked_here.add(params.request_id)
        try:
            for conn in capable:
                pending.ask(conn)
            decision, reason = await pending.wait()
        finally:
            self.pending.pop(params.thread_id, None)
            self._asked_here.discard(params.request_id)
            for listener in self.settle_listeners:
                listener(params.request_id)
        if decision is None:
            assert reason is not None
            verdict = self._fallback(policy, params.request_id, reason)
        else:
            verdict = Verdict(
                decision,
                True,
                params.request_id,
                answered_by=pending.answered_by,
                scope=pending.scope,
            )
        _log_verdict(params, verdict, fields)
        return verdict

    def offer(self, thread_id: str, participant: Participant) -> None:
        """Ask a participant that (re)joined the thread about its pending request."""
        pending = self.pending.get(thread_id)
        if pending is not None and _can_answer(participant):
            pending.ask(participant)
        for listener in self.offer_listeners:
            listener(thread_id, participant)

    def offer_remote(self) -> None:
        """Put this node's open questions to the remote askers that can answer
        now and were not asked yet (a node joined the cluster)."""
        for pending in list(self.pending.values()):
            if pending.params.request_id in self._asked_here:
                for asker in self.remote_askers:
                    if _can_answer(asker):
                        pending.ask(asker)

    def answer(
        self,
        thread_id: str,
        request_id: str,
        decision: str,
        by: Participant | None = None,
        scope: str | None = None,
    ) -> bool:
        """Answer a pending request out of band (a front door whose protocol
        answers approvals in its own frames); ``False`` if none matches.
        The first answer wins, as for every other way of answering."""
        pending = self.pending.get(thread_id)
        if pending is None or pending.params.request_id != request_id:
            return False
        chosen, chosen_scope = parse_answer({"decision": decision, "scope": scope})
        pending.resolve(chosen, by, chosen_scope)
        return True

    async def remember(
        self, thread_id: str, need: ApprovalNeed, decision: str, now: str, scope: str = "exact"
    ) -> None:
        """Apply ``acceptForSession`` (the key of ``scope``) / ``acceptAlways``
        (the exact operation, this session and later ones)."""
        if decision == "acceptForSession":
            key = grant_key(need, scope)
            self.add_session_grant(thread_id, key)
            for listener in self.grant_listeners:
                try:
                    await listener(thread_id, key)
                except Exception:
                    log.exception("could not pass on a session grant of %s", thread_id)
        if decision == "acceptAlways":
            key = scope_key(need)
            self._session_grants.setdefault(thread_id, set()).add(key)
            stored = stored_grant(need)
            self._always_keys.setdefault(stored, set()).add((thread_id, key))
            await self.events.grant(*stored, now)

    def add_session_grant(self, thread_id: str, key: str) -> None:
        """Let ``key`` (a :func:`grant_key`) cover the thread's session from now on."""
        self._session_grants.setdefault(thread_id, set()).add(key)

    def session_grants(self) -> dict[str, list[str]]:
        """Every thread's session grant keys (what another node is told of)."""
        return {thread: sorted(keys) for thread, keys in self._session_grants.items() if keys}

    async def revoke(self, kind: str, operation: str, target: str) -> bool:
        """Forget a remembered (``acceptAlways``) grant, in the database and in
        the sessions it was given in; whether it was remembered."""
        for thread_id, key in self._always_keys.pop((kind, operation, target), set()):
            self._session_grants.get(thread_id, set()).discard(key)
        return await self.events.revoke_grant(kind, operation, target)

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


def _log_fields(params: ApprovalRequestParams) -> dict[str, str]:
    return {
        "threadId": params.thread_id,
        "turnId": params.turn_id,
        "itemId": params.item_id,
        "requestId": params.request_id,
        "approvalType": params.approval_type,
    }


def _log_verdict(params: ApprovalRequestParams, verdict: Verdict, fields: dict[str, str]) -> None:
    """One info line per answered (or server-resolved) approval: what, and who decided."""
    if verdict.fallback:
        by = f"the server ({verdict.fallback_code})"
    else:
        name = getattr(verdict.answered_by, "name", "") or "a client"
        by = name
    log.info(
        "approval %s on %s (item %s, %s): %s by %s",
        params.request_id,
        params.thread_id,
        params.item_id,
        params.approval_type,
        verdict.decision,
        by,
        extra={**fields, "decision": verdict.decision, "answeredBy": by},
    )


def _can_answer(participant: Participant) -> bool:
    return not participant.closed and participant.can_answer_approvals()
