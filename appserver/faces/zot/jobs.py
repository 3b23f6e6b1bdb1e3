"""How the session drives the runtime: ``prompt`` and ``compact`` are jobs, run one at a
time in the order they came. ``Jobs`` holds the queue and its worker; each job is
answered when it starts (at once when the session is idle), its turn is started on the
session's thread (waiting out a turn another client runs there), and its events are
streamed until it ends.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from appserver.faces.common import wait_out_turn
from appserver.faces.zot.events import CompactStream, PromptStream

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

    from appserver.faces.zot.session import Session
    from appserver.runtime.turns.model import ActiveTurn

log = logging.getLogger("appserver.faces.zot")


@dataclass
class Job:
    """A ``prompt`` or ``compact`` waiting for (or holding) the session."""

    kind: str
    id: str | None
    parts: list[Any] = field(default_factory=list)
    answered: bool = False  # its response went out
    aborted: bool = False
    thread_id: str | None = None
    turn_id: str | None = None
    waiting: anyio.CancelScope | None = None


class Jobs:
    """The session's queue of jobs and the worker that runs them."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.pending = 0  # jobs queued or running
        self.current: Job | None = None
        self.queued: deque[Job] = deque()  # sent to the worker, not taken yet
        send: MemoryObjectSendStream[Job]
        receive: MemoryObjectReceiveStream[Job]
        send, receive = anyio.create_memory_object_stream[Job](float("inf"))
        self._jobs_in = send
        self._jobs_out = receive

    async def enqueue(self, job: Job) -> None:
        if self.pending == 0:
            # Idle: it starts now, so answer before reading the next command.
            # A queued job is answered when it starts (zot's order), which
            # also tells the client where its events begin.
            job.answered = True
            await self.session.respond(job.id, job.kind, {"started": True})
        self.pending += 1
        self.queued.append(job)
        await self._jobs_in.send(job)

    def close(self) -> None:
        """No more jobs: the worker drains the queue, then ends."""
        self._jobs_in.close()

    async def abort(self) -> None:
        """Abort the running job: stop its wait for the thread, or interrupt its turn.
        A job answered as started but not yet taken by the worker (an ``abort``
        written right behind its ``prompt``) is the running one: it ends aborted."""
        job = self.current
        if job is None and self.queued and self.queued[0].answered:
            job = self.queued[0]
        if job is None or job.aborted:
            return
        job.aborted = True
        if job.waiting is not None:
            job.waiting.cancel()
        if job.turn_id is not None and job.thread_id is not None:
            await self.session.interrupt(job.thread_id, job.turn_id)

    async def work(self) -> None:
        """Run the queued jobs, one at a time, until the queue is closed."""
        session = self.session
        async with self._jobs_out:
            async for job in self._jobs_out:
                self.queued.popleft()
                self.current = job
                try:
                    await self._run(job)
                except Exception:
                    log.exception("%s failed", job.kind)
                    await session.send(
                        {"type": "error", "message": f"internal error in {job.kind}"}
                    )
                    await session.send({"type": "done"})
                finally:
                    self.current = None
                    self.pending -= 1

    async def _run(self, job: Job) -> None:
        session = self.session
        if not job.answered:
            await session.respond(job.id, job.kind, {"started": True})
        active = await self._start(job)
        if active is None:
            return
        turn_id = active.record.id
        if job.kind == "prompt":
            await PromptStream(session.seat, session.send, session.totals, turn_id).run()
        else:
            await CompactStream(session.seat, session.send, session.totals, turn_id).run()

    async def _start(self, job: Job) -> ActiveTurn | None:
        """Start the job's turn, waiting out a turn another client runs on the
        thread; ``None`` (after the closing events) if it never started."""
        from appserver.runtime.errors import Refusal, ThreadNotFound, TurnInProgress

        session = self.session
        runtime = session.runtime
        recreated = False
        while not job.aborted:
            thread_id = job.thread_id = await session.thread()
            try:
                if job.kind == "prompt":
                    active = await runtime.turns.start(thread_id, job.parts, origin=session.seat)
                else:
                    active = await runtime.turns.compact(thread_id, origin=session.seat)
            except TurnInProgress:
                with anyio.CancelScope() as job.waiting:
                    await wait_out_turn(runtime, thread_id)
                job.waiting = None
                continue
            except ThreadNotFound:
                if recreated:
                    raise
                recreated = True
                session.thread_id = None  # deleted by another client: a new one
                continue
            except Refusal as exc:
                await session.send({"type": "error", "message": exc.message})
                await session.send({"type": "done"})
                return None
            job.turn_id = active.record.id
            if job.aborted:  # abort came while the turn was being stored
                await session.interrupt(thread_id, active.record.id)
            return active
        await session.send({"type": "turn_end", "stop": "aborted"})
        await session.send({"type": "done"})
        return None
