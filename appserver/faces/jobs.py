"""A face session's messages, run one at a time in the order they came.

zot's ``rpc`` and Qwen's stream-json each take prompts (and compactions) from
one client and run them as turns on the session's thread, one after another:
the session's reader puts them in a queue and a worker takes them out. What
both need of that is here: the queue, which also remembers what was sent to
the worker and not yet taken (so that a cancel written right behind its
message finds it), a job's turn started on the session's thread (waiting out
a turn another client runs there, a new thread when the old one was deleted),
and the abort of a job, before or during its turn.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import anyio

from appserver.faces.common import wait_out_turn

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

    from appserver.runtime.events import Participant
    from appserver.runtime.host import Runtime
    from appserver.runtime.turns.model import ActiveTurn

#: Interrupts a turn: ``(thread id, turn id)``; one that ended meanwhile is fine.
Interrupt = Callable[[str, str], Awaitable[None]]


@dataclass
class FaceJob:
    """A message waiting for, or holding, its session: ``compact`` compacts the
    thread, any other kind the runner starts is a turn on ``parts``."""

    kind: str
    parts: list[Any] = field(default_factory=list)
    aborted: bool = False
    thread_id: str | None = None  # the thread its turn starts on, once asked
    turn_id: str | None = None  # its turn, once started
    waiting: anyio.CancelScope | None = None  # while it waits out another client's turn


JobT = TypeVar("JobT", bound=FaceJob)


class JobQueue(Generic[JobT]):
    """A session's jobs: those sent to the worker and not yet taken (``queued``,
    oldest first) and the one it runs (``current``)."""

    def __init__(self) -> None:
        self.current: JobT | None = None
        self.queued: deque[JobT] = deque()
        send: MemoryObjectSendStream[JobT]
        receive: MemoryObjectReceiveStream[JobT]
        send, receive = anyio.create_memory_object_stream[JobT](float("inf"))
        self._jobs_in, self._jobs_out = send, receive

    async def put(self, job: JobT) -> None:
        """Queue ``job`` behind the others."""
        self.queued.append(job)
        await self._jobs_in.send(job)

    def close(self) -> None:
        """No more jobs: :meth:`work` runs those queued, then returns."""
        self._jobs_in.close()

    async def work(self, run: Callable[[JobT], Awaitable[None]]) -> None:
        """Run each job with ``run``, one at a time and in order, until the queue
        is closed and empty (``run`` reports its own failures)."""
        async with self._jobs_out:
            async for job in self._jobs_out:
                self.queued.popleft()
                self.current = job
                try:
                    await run(job)
                finally:
                    self.current = None


async def abort(job: FaceJob | None, interrupt: Interrupt) -> None:
    """Abort ``job``: it stops waiting for its thread and its turn is
    interrupted; one not started yet ends without a turn (:func:`start_turn`)."""
    if job is None or job.aborted:
        return
    job.aborted = True
    if job.waiting is not None:
        job.waiting.cancel()
    if job.turn_id is not None and job.thread_id is not None:
        await interrupt(job.thread_id, job.turn_id)


async def start_turn(
    runtime: Runtime,
    job: FaceJob,
    origin: Participant,
    thread: Callable[[], Awaitable[str]],
    forget_thread: Callable[[], None],
    interrupt: Interrupt,
) -> ActiveTurn | None:
    """Start ``job``'s turn on the session's thread (``thread()``), for ``origin``.

    A turn another client runs there is waited out (an abort stops the wait);
    a thread deleted meanwhile is forgotten (``forget_thread``) so that
    ``thread()`` makes a new one, once. ``None`` if the job was aborted before
    its turn started; an abort that came while the turn was being stored
    interrupts it. Raises the runtime's :class:`~appserver.runtime.errors.Refusal`
    when it will not start the turn (the caller tells its client).
    """
    from appserver.runtime.errors import ThreadNotFound, TurnInProgress

    recreated = False
    while not job.aborted:
        thread_id = job.thread_id = await thread()
        try:
            if job.kind == "compact":
                active = await runtime.turns.compact(thread_id, origin=origin)
            else:
                active = await runtime.turns.start(thread_id, job.parts, origin=origin)
        except TurnInProgress:
            if job.aborted:  # while the start was refused: no wait for the other turn
                continue
            with anyio.CancelScope() as job.waiting:
                await wait_out_turn(runtime, thread_id)
            job.waiting = None
            continue
        except ThreadNotFound:
            if recreated:
                raise
            recreated = True
            forget_thread()  # deleted by another client: a new one
            continue
        job.turn_id = active.record.id
        if job.aborted:  # the abort came while the turn was being stored
            await interrupt(thread_id, active.record.id)
        return active
    return None
