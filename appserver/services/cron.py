"""The ``cron/*`` and ``heartbeat/trigger`` methods, and installing both services.

``install`` puts ``server.heartbeat`` (always: triggering on demand is
useful without a timer) and, unless the workspace config says
``Cron: {Enabled: false}``, ``server.cron`` with its scheduler task and the
agent's ``cron`` tool. A family that is off registers no handlers, so its
capability flag is not advertised and its methods answer ``-32601``.

Deliberate differences from DotCraft (reference §3.5, §3.6):

- ``heartbeatManagement`` is advertised even without a periodic heartbeat
  (DotCraft: only when Heartbeat is configured); the timer is what is optional.
- ``cron/add`` exists (DotCraft: only the agent's tool creates jobs), and
  schedules gain the kind ``cron`` (DotCraft's unused ``expr`` field).
- Jobs live in SQLite, not ``.craft/cron/jobs.json``; there is no file watcher.
- ``cron/stateChanged`` for a removal carries the whole last job, not only
  ``{id}`` (a superset).
- One-shot jobs are removed after a failed run too (DotCraft's older code
  would re-run an ``at`` job whose run threw, forever).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from pydantic import BaseModel

from appserver.cron.heartbeat import HeartbeatService
from appserver.cron.heartbeat_timer import configured_interval
from appserver.cron.runner import JobRunner
from appserver.cron.schedule import ScheduleError, validate
from appserver.cron.service import CronService
from appserver.cron.tool import CronTool
from appserver.protocol import cron as cron_wire
from appserver.protocol import errors as rpc_errors
from appserver.protocol.base import Empty
from appserver.protocol.errors import RpcError
from appserver.rpc.connection import RequestContext
from appserver.services.cron_waiting import WaitingCronTool
from appserver.storage.cron import CronRepository
from appserver.storage.workspace_config import lookup

if TYPE_CHECKING:
    from appserver.services.context import FamilyContext


def job_not_found(job_id: str) -> RpcError:
    return RpcError(rpc_errors.CRON_JOB_NOT_FOUND, f"Cron job not found: {job_id}")


class CronHandlers:
    """Handlers of the cron family over a :class:`CronService`."""

    def __init__(self, server: FamilyContext, service: CronService) -> None:
        self.server = server
        self.service = service

    def register(self) -> None:
        router = self.server.router
        router.register("cron/add", self.add)
        router.register("cron/list", self.list_jobs)
        router.register("cron/remove", self.remove)
        router.register("cron/enable", self.enable)
        router.register("cron/run", self.run)

    async def add(self, ctx: RequestContext, params: cron_wire.CronAddParams) -> BaseModel:
        try:
            schedule = validate(params.schedule.to_wire(), self.service.clock.now_ms())
        except ScheduleError as exc:
            raise rpc_errors.invalid_params(f"'schedule.{exc.field}': {exc.message}") from None
        if params.thread_id is not None:
            if params.approval_policy is not None:
                raise rpc_errors.invalid_params(
                    "'approvalPolicy' applies only to the job's own thread; "
                    "set it on the given thread with thread/config/update"
                )
            thread = await self.server.threads.get(params.thread_id)
            if thread.history_mode == "client":
                raise rpc_errors.invalid_params(
                    f"Thread {thread.id} uses client-managed history; cron runs need a "
                    "server-history thread."
                )
        job = await self.service.add_job(
            name=params.name,
            message=params.message,
            schedule=schedule,
            enabled=params.enabled,
            delete_after_run=params.delete_after_run,
            thread_id=params.thread_id,
            approval_policy=params.approval_policy,
            defer=ctx.after_response,
        )
        return cron_wire.CronJobResult(job=job)

    async def list_jobs(self, ctx: RequestContext, params: cron_wire.CronListParams) -> BaseModel:
        return cron_wire.CronListResult(jobs=await self.service.list_jobs(params.include_disabled))

    async def remove(self, ctx: RequestContext, params: cron_wire.CronJobIdParams) -> BaseModel:
        if await self.service.remove_job(params.job_id, defer=ctx.after_response) is None:
            raise job_not_found(params.job_id)
        return cron_wire.CronRemoveResult(removed=True)

    async def enable(self, ctx: RequestContext, params: cron_wire.CronEnableParams) -> BaseModel:
        job = await self.service.enable_job(params.job_id, params.enabled, defer=ctx.after_response)
        if job is None:
            raise job_not_found(params.job_id)
        return cron_wire.CronJobResult(job=job)

    async def run(self, ctx: RequestContext, params: cron_wire.CronJobIdParams) -> BaseModel:
        job = await self.service.queue_run(params.job_id)
        if job is None:
            raise job_not_found(params.job_id)
        return cron_wire.CronRunResult(queued=True, job=job)


def install(server: FamilyContext) -> None:
    """Install the heartbeat and (unless switched off) cron on ``server``."""
    repo = CronRepository(server.db)
    cluster = server.runtime.cluster
    if cluster is not None:
        repo.cluster = (cluster.node_id, cluster.silence)
        if not cluster.store.remote:
            # Processes on the workspace's SQLite file: one alone keeps the
            # single-node timing (PostgreSQL nodes always claim).
            node = cluster
            repo.peers = lambda: node.peers
    runner = JobRunner(server.runtime.engine, server.threads, accepting=server.accepting)

    heartbeat = HeartbeatService(
        server.craft_dir,
        repo,
        runner,
        server.runtime.bus,
        interval_s=configured_interval(os.environ, server.workspace_config),
    )
    heartbeat.may_run = lambda: server.trust.trusted

    async def trigger(ctx: RequestContext, params: Empty) -> BaseModel:
        return cron_wire.HeartbeatTriggerResult.model_validate(await heartbeat.trigger())

    server.router.register("heartbeat/trigger", trigger)
    cron = None
    if lookup(server.workspace_config, "Cron", "Enabled") is not False:
        cron = CronService(repo, runner, server.runtime.bus)
        cron.may_run = lambda: server.trust.trusted
        CronHandlers(server, cron).register()
        # In place of the one offered while the family waited (services/cron_waiting.py).
        tools = server.runtime.engine.tools
        tools.register(CronTool(cron), replace=isinstance(tools.get("cron"), WaitingCronTool))

        async def wake_cron() -> None:
            cron.wake()

        server.trust.on_trusted.append(wake_cron)
        server.shutdown_hooks.append(cron.drain)
    # Last, when nothing can fail any more: the family counts as installed once
    # these are set (services/cron_waiting.py looks at server.cron).
    server.heartbeat = heartbeat
    if heartbeat.interval_s is not None:
        server.start_background(heartbeat.run_periodic)
    if cron is not None:
        server.cron = cron
        server.start_background(cron.run)
