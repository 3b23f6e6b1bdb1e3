"""Everything one face's client is sent: a bounded :class:`Outbox` and the one
task that writes it.

The faces' stdio (and the router's TCP clients) follow the JSON-RPC
connection's policy for a peer that reads slower than we write:

* a producer never waits: :meth:`PeerWriter.put` queues and returns;
* past ``soft_bytes`` queued, frames given a ``coalesce`` key (streamed text)
  are merged, so a lagging client gets fewer, larger deltas with the same text;
* past ``max_bytes`` queued (behind the write in progress), or when one write
  makes no progress for ``send_timeout`` seconds, the client is *dropped*: what
  is queued is freed, :attr:`PeerWriter.stalled` is set and the face ends that
  client as its protocol does (a stdio face exits, the router disconnects a
  TCP client). Nothing is dropped silently: either a frame is queued or the
  client is dropped.

A client that closed its end (a broken pipe) is *gone*: later frames are
discarded and the face goes on reading its input, as before.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable

import anyio

from appserver.transport.base import DEFAULT_MAX_BYTES, TransportClosed
from appserver.transport.outbox import Merge, Outbox, OutboxClosed

log = logging.getLogger("appserver.transport")

__all__ = ["DEFAULT_MAX_BYTES", "DEFAULT_SOFT_BYTES", "PeerWriter", "write_within"]

DEFAULT_SOFT_BYTES = 256 * 1024
"""Past this much queued, streamed deltas are coalesced (as for JSON-RPC)."""
DEFAULT_SEND_TIMEOUT = 30.0
"""A write that makes no progress for this long means the client stopped reading."""

SendBatch = Callable[[list[str]], Awaitable[None]]


async def write_within(
    deadline: anyio.CancelScope, seconds: float, send_batch: SendBatch, batch: list[str]
) -> None:
    """``send_batch(batch)``, cancelled through ``deadline`` (a scope around the
    writer's whole loop) if it makes no progress for ``seconds``. One scope whose
    deadline moves costs a third of a new ``fail_after`` a write, and a stream
    of deltas is a write each."""
    deadline.deadline = anyio.current_time() + seconds
    await send_batch(batch)
    deadline.deadline = math.inf


class PeerWriter:
    """One client's outbound frames. ``put`` from anywhere; ``run`` in one task."""

    def __init__(
        self,
        send_batch: SendBatch,
        *,
        name: str = "stdout",
        max_bytes: int = DEFAULT_MAX_BYTES,
        soft_bytes: int = DEFAULT_SOFT_BYTES,
        send_timeout: float = DEFAULT_SEND_TIMEOUT,
        on_stall: Callable[[], None] | None = None,
        try_send: Callable[[str], bool] | None = None,
    ) -> None:
        self.name = name
        self.outbox = Outbox(max_bytes, soft_bytes)
        self.send_timeout = send_timeout
        self.stalled = anyio.Event()
        """Set once the client is dropped for not reading (see :attr:`dropped`)."""
        self.dropped: str | None = None
        """Why the client was dropped; ``None`` while it keeps up."""
        self.gone = False
        """The client closed its end: nothing more can be written."""
        self._send_batch = send_batch
        self._try_send = try_send
        self._idle = False  # run() waits for frames: no batch is being written
        self._on_stall = on_stall
        self._closing = False
        self._writing = anyio.CancelScope()  # run()'s: cancelled when the client is dropped
        self._finished = anyio.Event()
        self._wrote = anyio.Event()  # set (and replaced) as batches are written

    @property
    def max_bytes(self) -> int:
        return self.outbox.max_bytes

    @property
    def close_code(self) -> int:
        """How the transport is to be closed: normally (1000: what is left is
        written first), or, for a client dropped for not reading, at once (1008)."""
        return 1000 if self.dropped is None else 1008

    def put(self, frame: str, coalesce: tuple[object, Merge] | None = None) -> bool:
        """Queue ``frame`` (never waits). ``False`` when it will not be written:
        the client is gone or dropped, or this frame dropped it."""
        if self.dropped is not None or self.gone or self._closing:
            return False
        # Fast path (the JSON-RPC connection's): nothing queued and no batch
        # being written means the client keeps up, so the transport takes the
        # frame now rather than the writer task being woken for it (a streamed
        # delta is usually alone). Order is kept: nothing can be ahead of it.
        try_send = self._try_send
        if try_send is not None and self._idle and not len(self.outbox) and try_send(frame):
            return True
        if self.outbox.put(frame, coalesce):
            return True
        self.drop(f"more than {self.max_bytes} bytes unread")
        return False

    async def room(self) -> None:
        """Wait until at most half the budget is queued (or the client is
        dropped, gone or done): a burst of the server's own making (a session's
        history) goes at the client's pace instead of past the budget."""
        while (
            self.outbox.queued_bytes > self.max_bytes // 2
            and self.dropped is None
            and not self.gone
            and not self._finished.is_set()
        ):
            await self._wrote.wait()

    def _written(self) -> None:
        self._wrote.set()
        self._wrote = anyio.Event()

    def drop(self, why: str) -> None:
        """Drop the client: free what is queued, stop writing, set :attr:`stalled`."""
        if self.dropped is not None:
            return
        self.dropped = why
        self.outbox.discard()
        self._writing.cancel()  # a write stuck on the client is abandoned too
        log.warning("dropping client %s: %s", self.name, why)
        self.stalled.set()
        if self._on_stall is not None:
            self._on_stall()

    def close(self) -> None:
        """No more frames: :meth:`run` returns once the queued ones are written."""
        self._closing = True
        self.outbox.close()

    async def run(self) -> None:
        """Write queued frames in batches until closed and empty, or the client
        is dropped or gone. Other errors of ``send_batch`` propagate."""
        deadline = anyio.CancelScope()  # set only while a batch is being written
        try:
            with self._writing, deadline:
                while True:
                    self._idle = True
                    batch = await self.outbox.get_batch()
                    self._idle = False
                    await write_within(deadline, self.send_timeout, self._send_batch, batch)
                    self._written()
            if deadline.cancelled_caught:
                self.drop(f"no write progress for {self.send_timeout:g} s")
        except OutboxClosed:
            pass
        except TransportClosed:
            self.gone = True
            self.outbox.discard()
            log.info("client %s closed its end; later frames are discarded", self.name)
        except TimeoutError:  # the transport's own
            self.drop(f"no write progress for {self.send_timeout:g} s")
        finally:
            self._idle = False
            self._finished.set()
            self._written()  # no more room will come: wake who waits for it

    async def flushed(self, timeout: float | None = None) -> bool:
        """Wait (at most ``timeout`` seconds) for :meth:`run` to end after
        :meth:`close`; whether it did."""
        with anyio.move_on_after(self.send_timeout if timeout is None else timeout):
            await self._finished.wait()
        return self._finished.is_set()
