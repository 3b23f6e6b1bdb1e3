"""What the runtime says (typed events) and what it asks (the question port).

The runtime speaks no wire protocol. It publishes :class:`Event` objects and
asks approval questions through :class:`Participant`, an interface each front
door implements for each of its clients: the JSON-RPC front door encodes an
event as a DotCraft notification and asks with ``item/approval/request``;
another protocol encodes its own frames, or answers by policy.

Event kinds are named after DotCraft's notification methods (``turn/started``,
``item/agentMessage/delta``): that vocabulary is the runtime's, and the params
are the protocol package's typed models (``protocol.turns``,
``protocol.threads``). A front door reads ``event.params`` (typed),
``event.data`` (the params as JSON data) or ``event.params_json()`` (the
stored JSON text), whichever it needs.

The runtime hands an event either form: a typed model, or its JSON data (a
dict shaped as the model's wire form, built without pydantic). The events
every turn makes are data (:mod:`appserver.runtime.wire`), so a door that
reads data or JSON (a face's one-shot, the DotCraft door's notifications)
never builds their models, nor imports pydantic for them; ``params`` parses
the data on first use.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard, TypeVar, runtime_checkable

from appserver.protocol.encoding import dumps, model_json

if TYPE_CHECKING:
    from pydantic import BaseModel

    from appserver.protocol.base import WireModel
    from appserver.protocol.turns import DeltaNotification

T = TypeVar("T")


# Streamed deltas, the events a front door reads most (one per model chunk),
# and the model of their params (as the method table says: a test checks).
DELTA_KINDS = frozenset(
    {
        "item/agentMessage/delta",
        "item/reasoning/delta",
        "item/toolCall/argumentsDelta",
        "item/commandExecution/outputDelta",
    }
)


def params_model(kind: str) -> type[BaseModel]:
    """The params model of events of ``kind``. A delta's is looked up without
    the method table: importing the table (every family's wire models) on a
    front door's first delta cost a face's first turn 30-50 ms."""
    if kind in DELTA_KINDS:
        from appserver.protocol.turns import DeltaNotification

        return DeltaNotification
    from appserver.protocol.table import notification_spec  # one entry of the table

    spec = notification_spec(kind)
    if spec is None:
        raise KeyError(kind)
    return spec.params


class Event:
    """One thing that happened, as every front door sees it.

    ``thread_id`` and ``seq`` are set for thread-scoped events (``seq`` is the
    thread's event number). ``stream`` names the streaming item a delta
    belongs to (deltas of one stream may be merged for a lagging client).
    ``topic`` narrows delivery beyond the kind (``item:commandExecution``).
    ``text`` is a text delta's text as the runtime streamed it and ``turn_id``
    its turn (both ``None`` for any other event, and for a delta read back from
    the log), so a front door can frame it without parsing the params.
    """

    __slots__ = (
        "_data",
        "_json",
        "_memo",
        "_params",
        "kind",
        "seq",
        "stream",
        "text",
        "thread_id",
        "topic",
        "turn_id",
    )

    def __init__(
        self,
        kind: str,
        params: WireModel | dict[str, Any] | None,
        *,
        thread_id: str | None = None,
        seq: int | None = None,
        topic: str | None = None,
        stream: str | None = None,
        params_json: str | None = None,
        text: str | None = None,
        turn_id: str | None = None,
    ) -> None:
        self.kind = kind
        if type(params) is dict:
            self._params: WireModel | None = None
            self._data: dict[str, Any] | None = params
        else:
            self._params = params  # type: ignore[assignment]
            self._data = None
        self.thread_id = thread_id
        self.seq = seq
        self.topic = topic
        self.stream = stream
        self._json = params_json
        self.text = text
        self.turn_id = turn_id
        self._memo: dict[object, Any] | None = None

    def __repr__(self) -> str:
        return f"<Event {self.kind} thread={self.thread_id} seq={self.seq}>"

    @property
    def params(self) -> WireModel:
        """The typed params (parsed on first use when the event was read back)."""
        params = self._params
        if params is None:
            model = params_model(self.kind)
            if self._data is not None:
                parsed = model.model_validate(self._data)
            else:
                parsed = model.model_validate_json(self._json or "{}")
            params = self._params = parsed  # type: ignore[assignment]
        assert params is not None
        return params

    @property
    def data(self) -> dict[str, Any]:
        """The params as JSON data (wire form; parsed from the JSON text on first
        use when the event was read back). Shared by every reader: not to be changed."""
        data = self._data
        if data is None:
            if self._params is not None:
                data = self._params.to_wire()
            else:
                import json

                data = json.loads(self._json or "{}")
            self._data = data
        return data

    def delta(self) -> tuple[str, str]:
        """A delta's item id and text: as the runtime handed them when it did
        (no params parsed: this runs for every streamed delta), else from the params."""
        if self.text is not None and self.stream is not None:
            return self.stream, self.text
        params = self.params
        return str(getattr(params, "item_id", "")), str(getattr(params, "delta", ""))

    def params_json(self) -> str:
        """The params as compact JSON text (the form stored in the event log)."""
        if self._json is None:
            if self._data is not None:
                self._json = dumps(self._data)
            else:
                assert self._params is not None
                self._json = model_json(self._params)
        return self._json

    def encoded(self, key: object, encode: Callable[[Event], T]) -> T:
        """``encode(self)``, computed once per ``key`` however many clients get it.

        Front doors keep their encoding of the event here, so fan-out to many
        clients of one front door encodes once.
        """
        memo = self._memo
        if memo is None:
            memo = self._memo = {}
        elif key in memo:
            return memo[key]  # type: ignore[no-any-return]
        value = memo[key] = encode(self)
        return value


class Participant(Protocol):
    """A client of some front door, as the runtime sees it.

    It receives events (the front door filters and encodes them) and may be
    asked approval questions. ``deliver`` must not block: a front door queues.
    """

    @property
    def name(self) -> str:
        """Who the client is, for attribution (``initiator.userId``)."""

    @property
    def closed(self) -> bool:
        """The client is gone; nothing more reaches it."""

    def wants(self, kind: str, topic: str | None) -> bool:
        """Whether an event of ``kind`` (and ``topic``) should reach this client.
        Fixed while the participant is joined to the bus, which keeps the
        answers for broadcasts (:meth:`EventBus.joined_fanout
        <appserver.runtime.bus.EventBus.joined_fanout>`)."""

    def deliver(self, event: Event) -> None:
        """Queue ``event`` for the client (never blocks)."""

    def can_answer_approvals(self) -> bool:
        """Whether :meth:`ask_approval` may be called now."""

    async def ask_approval(self, request: WireModel, timeout: float) -> str | Mapping[str, object]:
        """Ask the client; return its decision (``accept``, ``decline``, ...),
        or its whole answer (``{"decision": ..., "scope": ...}``) when it can
        say how far an ``acceptForSession`` reaches.

        Raise :class:`QuestionUnanswered` if the client left or did not answer
        within ``timeout``; :class:`QuestionRefused` if it answered with an
        error (the runtime then declines).
        """


def delta_event(
    thread_id: str,
    item_id: str,
    kind: str,
    params: DeltaNotification | dict[str, Any] | None,
    params_json: str | None,
    topic: str | None,
    turn_id: str | None,
    text: str | None,
) -> Event:
    """A streaming delta's event (see :meth:`ThreadJournal.emit_delta
    <appserver.runtime.journal.ThreadJournal.emit_delta>`)."""
    return Event(
        kind,
        params,
        thread_id=thread_id,
        topic=topic,
        stream=item_id,
        params_json=params_json,
        text=text,
        turn_id=turn_id if text is not None else None,
    )


def deliver_to(event: Event, receivers: list[Participant]) -> None:
    """Hand ``event`` to every participant of ``receivers``.

    Participants of a class with a ``deliver_many(event, participants)``
    static method (a front door's fan-out path) get it in one call per class:
    a broadcast to 200 connections is one encode and one loop, not 200
    ``deliver`` calls. Each participant still gets the event exactly once,
    in the order events are delivered.
    """
    if len(receivers) == 1:
        receivers[0].deliver(event)
        return
    groups: dict[type, list[Participant]] = {}
    for receiver in receivers:
        group = groups.get(type(receiver))
        if group is None:
            groups[type(receiver)] = [receiver]
        else:
            group.append(receiver)
    for kind, group in groups.items():
        deliver_many = getattr(kind, "deliver_many", None)
        if deliver_many is not None:
            deliver_many(event, group)
        else:
            for receiver in group:
                receiver.deliver(event)


@runtime_checkable
class ToolCaller(Protocol):
    """A :class:`Participant` that can also run the tools its client declared
    (``thread/start.dynamicTools``). Optional: a participant without these
    methods (the faces) is never asked, and a call it owns fails at once.
    """

    def can_call_tools(self) -> bool:
        """Whether :meth:`call_tool` may be called now."""

    async def call_tool(
        self, request: WireModel, timeout: float, method: str = "item/tool/call"
    ) -> Mapping[str, object]:
        """Run a client tool with the server->client request ``method``
        (``item/tool/call``, or ``ext/channel/toolCall`` for a channel
        adapter's tool); return the client's whole answer (``{success,
        contentItems?, structuredResult?, errorCode?, errorMessage?}``).

        Raise :class:`QuestionUnanswered` if the client left or did not answer
        within ``timeout``; :class:`QuestionRefused` if it answered with an
        error (the call fails).
        """


@runtime_checkable
class EditorClient(Protocol):
    """A :class:`Participant` whose client may serve the file system, terminals
    and its own request families (DotCraft's ``acpExtensions``). Optional, like
    :class:`ToolCaller`."""

    def editor_fs(self) -> tuple[bool, bool]:
        """Whether it serves ``ext/acp/fs/readTextFile`` and ``writeTextFile`` now."""

    def editor_terminal(self) -> bool:
        """Whether it runs commands in its terminals (``ext/acp/terminal/*``) now."""

    def editor_families(self) -> tuple[str, ...]:
        """The custom families (``_unity``) whose ``ext/acp/<family>/*`` it serves now."""

    async def editor_request(
        self, method: str, request: WireModel, timeout: float
    ) -> Mapping[str, object]:
        """Send an ``ext/acp/*`` request; the client's answer (an object).

        Raise :class:`QuestionUnanswered` if the client left or did not answer
        within ``timeout``; :class:`QuestionRefused` if it answered with an error.
        """


@runtime_checkable
class NodeReplHost(Protocol):
    """A :class:`Participant` whose client may host the thread's Node REPL
    (DotCraft Desktop's ``nodeRepl`` + ``browserUse``). Optional, like :class:`ToolCaller`."""

    def node_repl(self) -> bool:
        """Whether it serves ``ext/nodeRepl/*`` now."""

    async def node_repl_request(
        self, method: str, request: WireModel, timeout: float
    ) -> Mapping[str, object]:
        """Send an ``ext/nodeRepl/*`` request; the client's answer (an object).

        Raise :class:`QuestionUnanswered` if the client left or did not answer
        within ``timeout``; :class:`QuestionRefused` if it answered with an error.
        """


_ROLES: dict[tuple[type, type], bool] = {}


def _plays(participant: object, role: type) -> bool:
    """``isinstance(participant, role)`` for an optional role, remembered per
    class: on Python 3.11 a runtime-checkable protocol's check walks the
    protocol's members at every call (~15 µs, a few a turn), and a
    participant's class decides it (its methods are the class's)."""
    key = (type(participant), role)
    known = _ROLES.get(key)
    if known is None:
        known = _ROLES[key] = isinstance(participant, role)
    return known


def is_tool_caller(participant: object) -> TypeGuard[ToolCaller]:
    """Whether ``participant`` is a :class:`ToolCaller`."""
    return _plays(participant, ToolCaller)


def is_editor_client(participant: object) -> TypeGuard[EditorClient]:
    """Whether ``participant`` is an :class:`EditorClient`."""
    return _plays(participant, EditorClient)


def is_node_repl_host(participant: object) -> TypeGuard[NodeReplHost]:
    """Whether ``participant`` is a :class:`NodeReplHost`."""
    return _plays(participant, NodeReplHost)


class QuestionUnanswered(Exception):
    """The client left, or did not answer in time."""


class QuestionRefused(Exception):
    """The client answered the question with an error."""
