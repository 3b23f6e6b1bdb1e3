"""A DotCraft JSON-RPC client as the runtime sees it: a :class:`Participant`.

The peer holds what the client negotiated in ``initialize`` (name,
capabilities, opted-out notifications) and its handshake state, encodes
runtime events as DotCraft notifications, asks approval questions with
``item/approval/request`` and runs the client's own tools with ``item/tool/call``.

Encoding happens once per event for every peer (``Event.encoded``), so
fan-out to many connections shares one frame. Streaming deltas carry a
coalesce key so a lagging connection gets them merged (same text, newest
``seq``) instead of piling up.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from appserver.protocol.base import WireModel
from appserver.rpc import framing
from appserver.rpc.connection import Connection, RequestContext
from appserver.rpc.outbox import Merge
from appserver.rpc.server_requests import PeerClosed, PeerErrorResponse, PeerTimeout
from appserver.runtime.events import Event, QuestionRefused, QuestionUnanswered
from appserver.transport.outbox import text_merger


class Handshake(enum.Enum):
    NEW = "new"  # waiting for `initialize`
    INITIALIZING = "initializing"  # answered `initialize`, waiting for `initialized`
    READY = "ready"


_READY = Handshake.READY

Encoded = tuple[str, tuple[object, Merge] | None]


def encode_event(event: Event) -> Encoded:
    """The notification frame of ``event`` (stamped with its ``seq``) and, for
    a delta, its coalesce key."""
    frame = framing.notification_frame_json(event.kind, event.params_json(), event.seq)
    if event.stream is None:
        return frame, None
    return frame, ((event.thread_id, event.stream, event.kind), merge_delta_frames)


# One delta frame carrying all texts and the newest ``seq`` (lagging peers).
merge_delta_frames = text_merger("params", "delta")


class Peer:
    """One JSON-RPC connection's client, as a runtime participant."""

    __slots__ = (
        "__weakref__",
        "attrs",
        "capabilities",
        "connection",
        "handshake",
        "name",
        "opt_out",
    )

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.handshake = Handshake.NEW
        self.name = ""
        self.capabilities: Any = None
        self.opt_out: frozenset[str] = frozenset()
        # Other families' per-connection state (a channel adapter's binding).
        self.attrs: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"<Peer {self.name!r} on {self.connection!r}>"

    @property
    def ready(self) -> bool:
        return self.handshake is Handshake.READY and not self.connection.closed

    @property
    def closed(self) -> bool:
        return self.connection.closed

    def wants(self, kind: str, topic: str | None) -> bool:
        # Asked for every event and every connection it may go to: the member
        # is read from the module, not looked up on the enum class each time.
        if self.handshake is not _READY:
            return False
        opt_out = self.opt_out
        return kind not in opt_out and (topic is None or topic not in opt_out)

    def deliver(self, event: Event) -> None:
        frame, coalesce = event.encoded(Peer, encode_event)
        self.connection.send(frame, coalesce)

    def deliver_replay(self, events: Sequence[Event]) -> None:
        """:meth:`deliver` each of ``events`` (a replay, in order), encoded only
        as the connection's writer takes them: a history longer than the
        outbox's budget streams at the client's pace instead of closing it."""
        self.connection.send_source(_frames_of(deque(events)))

    @staticmethod
    def deliver_many(event: Event, peers: list[Peer]) -> None:
        """:meth:`deliver` to each of ``peers``: one encode, one loop (for
        :func:`~appserver.runtime.events.deliver_to`: a thread's subscribers and
        workspace-wide events; broadcasts come through :meth:`deliver_prepared`)."""
        Peer.deliver_prepared(event, Peer.fanout_targets(peers))

    @staticmethod
    def fanout_targets(peers: list[Peer]) -> list[Connection]:
        """What a broadcast to ``peers`` sends to: their connections, in order
        (kept by the runtime's :class:`~appserver.runtime.fanout.Fanout`)."""
        return [peer.connection for peer in peers]

    @staticmethod
    def deliver_prepared(event: Event, connections: list[Connection]) -> None:
        """:meth:`deliver` to the peers of ``connections``: one encode, one loop."""
        frame, coalesce = event.encoded(Peer, encode_event)
        Connection.send_to_each(connections, frame, coalesce)

    def notify(self, method: str, params: WireModel) -> None:
        """Send one notification now, whatever the handshake state (only for
        outcomes of the handshake itself, such as ``channelRejected``)."""
        self.connection.notify(method, params)

    def can_answer_approvals(self) -> bool:
        return self.ready and bool(getattr(self.capabilities, "approval_support", True))

    async def ask_approval(self, request: WireModel, timeout: float) -> str | Mapping[str, object]:
        try:
            result = await self.connection.request(
                "item/approval/request", request, timeout=timeout
            )
        except PeerErrorResponse as exc:
            raise QuestionRefused(str(exc)) from exc
        except (PeerClosed, PeerTimeout) as exc:
            raise QuestionUnanswered(str(exc)) from exc
        # The whole answer: its `scope` says how far an acceptForSession reaches
        # (the runtime reads and checks both fields; anything else declines).
        return result if isinstance(result, dict) else ""

    def can_call_tools(self) -> bool:
        return self.ready

    async def call_tool(
        self, request: WireModel, timeout: float, method: str = "item/tool/call"
    ) -> Mapping[str, object]:
        """Run a tool the client declared with ``item/tool/call`` (an adapter's
        channel tool: ``ext/channel/toolCall``); a
        :class:`~appserver.runtime.events.ToolCaller`. A non-object answer has no
        `success`, so the runtime fails it as an invalid answer."""
        return await self._object_answer(method, request, timeout)

    def editor_fs(self) -> tuple[bool, bool]:
        """What of ``ext/acp/fs/*`` the client serves (an
        :class:`~appserver.runtime.events.EditorClient`)."""
        caps = self._acp_extensions()
        return (False, False) if caps is None else (caps.fs_read_text_file, caps.fs_write_text_file)

    def editor_terminal(self) -> bool:
        """Whether the client runs ``ext/acp/terminal/*`` (an
        :class:`~appserver.runtime.events.EditorClient`)."""
        caps = self._acp_extensions()
        return caps is not None and caps.terminal_create

    def editor_families(self) -> tuple[str, ...]:
        """The custom families of ``acpExtensions.extensions`` (an
        :class:`~appserver.runtime.events.EditorClient`)."""
        caps = self._acp_extensions()
        return () if caps is None else tuple(caps.extensions)

    async def editor_request(
        self, method: str, request: WireModel, timeout: float
    ) -> Mapping[str, object]:
        """Send an ``ext/acp/*`` request; its answer (a non-object answer: ``{}``)."""
        return await self._object_answer(method, request, timeout)

    def node_repl(self) -> bool:
        """Whether the client declared both ``nodeRepl`` and ``browserUse``, as
        DotCraft requires for ``ext/nodeRepl/*`` (a
        :class:`~appserver.runtime.events.NodeReplHost`)."""
        caps = self.capabilities if self.ready else None
        return (
            getattr(caps, "node_repl", None) is not None
            and getattr(caps, "browser_use", None) is not None
        )

    async def node_repl_request(
        self, method: str, request: WireModel, timeout: float
    ) -> Mapping[str, object]:
        """Send an ``ext/nodeRepl/*`` request; its answer (a non-object answer: ``{}``)."""
        return await self._object_answer(method, request, timeout)

    def _acp_extensions(self) -> Any:
        """``capabilities.acpExtensions`` of a ready client (``None``: none)."""
        return getattr(self.capabilities, "acp_extensions", None) if self.ready else None

    async def _object_answer(
        self, method: str, request: WireModel, timeout: float
    ) -> Mapping[str, object]:
        """Ask the client ``method``; its answer as an object (otherwise ``{}``).
        :class:`QuestionRefused` for an error answer, :class:`QuestionUnanswered`
        when it left or did not answer within ``timeout``."""
        try:
            result = await self.connection.request(method, request, timeout=timeout)
        except PeerErrorResponse as exc:
            raise QuestionRefused(str(exc)) from exc
        except (PeerClosed, PeerTimeout) as exc:
            raise QuestionUnanswered(str(exc)) from exc
        return result if isinstance(result, dict) else {}


def peer_of(ctx: RequestContext | Connection) -> Peer:
    """The peer of a request's (or a connection's) client."""
    connection = ctx.connection if isinstance(ctx, RequestContext) else ctx
    peer = connection.session
    assert isinstance(peer, Peer), "the connection has no DotCraft peer"
    return peer


def _frames_of(events: deque[Event]) -> Iterator[str]:
    """Each event's frame, encoded when taken; an event is let go once sent
    (a long replay does not keep every encoded frame until its end)."""
    while events:
        yield events.popleft().encoded(Peer, encode_event)[0]
