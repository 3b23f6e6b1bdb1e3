"""How the session drives the runtime: ``prompt`` and ``compact`` are jobs, run one at a
time in the order they came (appserver/faces/jobs.py). Each job is answered when it
starts (at once when the session is idle), its turn is started on the session's thread
(waiting out a turn another client runs there), and its events are streamed until it
ends.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from appserver.faces import jobs
from appserver.faces.zot.events import CompactStream, PromptStream

if TYPE_CHECKING:
    from appserver.faces.zot.session import Session

log = logging.getLogger("appserver.faces.zot")


@dataclass
class Job(jobs.FaceJob):
    """A ``prompt`` or ``compact`` waiting for (or holding) the session."""

    id: str | None = None  # the command's id, echoed in its response
    answered: bool = False  # its response went out


class Jobs:
    """The session's queue of jobs and the worker that runs them."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.pending = 0  # jobs queued or running
        self._queue = jobs.JobQueue[Job]()

    async def enqueue(self, job: Job) -> None:
        if self.pending == 0:
            # Idle: it starts now, so answer before reading the next command.
            # A queued job is answered when it starts (zot's order), which
            # also tells the client where its events begin.
            job.answered = True
            await self.session.respond(job.id, job.kind, {"started": True})
        self.pending += 1
        await self._queue.put(job)

    def close(self) -> None:
        """No more jobs: the worker drains the queue, then ends."""
        self._queue.close()

    async def abort(self) -> None:
        """Abort the running job: stop its wait for the thread, or interrupt its turn.
        A job answered as started but not yet taken by the worker (an ``abort``
        written right behind its ``prompt``) is the running one: it ends aborted."""
        queue = self._queue
        job = queue.current
        if job is None and queue.queued and queue.queued[0].answered:
            job = queue.queued[0]
        await jobs.abort(job, self.session.interrupt)

    async def work(self) -> None:
        """Run the queued jobs, one at a time, until the queue is closed."""
        await self._queue.work(self._run_reported)

    async def _run_reported(self, job: Job) -> None:
        session = self.session
        try:
            await self._run(job)
        except Exception:
            log.exception("%s failed", job.kind)
            await session.send({"type": "error", "message": f"internal error in {job.kind}"})
            await session.send({"type": "done"})
        finally:
            self.pending -= 1

    async def _run(self, job: Job) -> None:
        from appserver.runtime.errors import Refusal

        session = self.session
        if not job.answered:
            await session.respond(job.id, job.kind, {"started": True})
        try:
            active = await jobs.start_turn(
                session.runtime,
                job,
                session.seat,
                session.thread,
                session.forget_thread,
                session.interrupt,
            )
        except Refusal as exc:
            await session.send({"type": "error", "message": exc.message})
            await session.send({"type": "done"})
            return
        if active is None:  # aborted before its turn started
            await session.send({"type": "turn_end", "stop": "aborted"})
            await session.send({"type": "done"})
            return
        turn_id = active.record.id
        if job.kind == "prompt":
            await PromptStream(session.seat, session.send, session.totals, turn_id).run()
        else:
            await CompactStream(session.seat, session.send, session.totals, turn_id).run()
