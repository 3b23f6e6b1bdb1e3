"""A face's seat at the runtime: a :class:`~appserver.runtime.events.Participant`
whose events land in a queue the face reads in order.

Faces here have no approval frames, so a seat never answers approval
questions: a gated tool call follows the thread's approval policy (declined
when nobody else watching the thread can answer). A JSON-RPC client
subscribed to the same thread may still answer it.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from appserver.runtime.events import Event, QuestionRefused

if TYPE_CHECKING:
    from appserver.protocol.base import WireModel

# Opt-in item types and their deltas, as for JSON-RPC clients that did not ask.
HIDDEN_TOPICS = frozenset({"item:commandExecution"})


class Seat:
    """Receives the events of the threads it subscribes to (and broadcasts
    it joins); ``events()`` yields them in delivery order."""

    def __init__(self, name: str, *, topics_hidden: frozenset[str] = HIDDEN_TOPICS) -> None:
        self._name = name
        self._closed = False
        self._hidden = topics_hidden
        send: MemoryObjectSendStream[Event]
        receive: MemoryObjectReceiveStream[Event]
        # Unbounded: the runtime must never wait for a face; a face reads
        # its own queue as fast as its one client takes frames.
        send, receive = anyio.create_memory_object_stream[Event](math.inf)
        self._send = send
        self._receive = receive

    @property
    def name(self) -> str:
        return self._name

    @property
    def closed(self) -> bool:
        return self._closed

    def wants(self, kind: str, topic: str | None) -> bool:
        return topic is None or topic not in self._hidden

    def deliver(self, event: Event) -> None:
        if not self._closed:
            self._send.send_nowait(event)

    def can_answer_approvals(self) -> bool:
        return False

    async def ask_approval(self, request: WireModel, timeout: float) -> str | Mapping[str, object]:
        raise QuestionRefused  # never asked: can_answer_approvals() is false

    async def events(self) -> AsyncIterator[Event]:
        """Events in order until :meth:`close`.

        Once woken, it yields every event already queued before waiting again:
        a stream's ``receive`` is a trip through the event loop each time, and
        a turn's deltas come many to one loop iteration. Taken together, they
        leave in one write (a 2,000-delta turn: ~16,000 loop iterations and
        writes fewer over 8 turns)."""
        receive = self._receive
        while True:
            try:
                yield await receive.receive()
                while True:
                    yield receive.receive_nowait()
            except anyio.WouldBlock:
                continue
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                return

    async def next_event(self) -> Event:
        """The next event (waits)."""
        return await self._receive.receive()

    def close(self) -> None:
        """Stop receiving; ``events()`` ends after what is queued."""
        self._closed = True
        self._send.close()
