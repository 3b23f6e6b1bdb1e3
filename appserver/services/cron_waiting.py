"""The cron family at start: installed when it has work.

The family (cron jobs, the heartbeat, the agent's ``cron`` tool, wire models:
~9 ms of a server's start) is installed at start when the heartbeat runs on a
timer. Otherwise it waits for the first call of one of its methods (only
``heartbeat/trigger`` when cron is switched off), for the agent's first use of
the ``cron`` tool (offered meanwhile with the same name, description and schema,
see :mod:`appserver.cron.tool_spec`), or for a job in the database: there is one
at start (from an earlier run), or, while other processes or nodes share the
database, one that they added (looked for once a lease, an indexed read: a
process may add a job and leave between two sweeps of the live nodes, and a node
running a job may die, its job then due here).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio

from appserver.cron import tool_spec
from appserver.cron.heartbeat_timer import configured_interval
from appserver.storage.workspace_config import lookup
from appserver.tools.base import ToolContext, ToolError, ToolOutcome, ToolPlan

if TYPE_CHECKING:
    from appserver.services.context import FamilyContext
    from appserver.tools.registry import ToolRegistry

log = logging.getLogger("appserver.cron")
_RETRY_S = 5.0  # after a failed look without a cluster to pace it


def prepare(server: FamilyContext, wait: Callable[..., Callable[[], None]]) -> None:
    """Set the family up on ``server`` (see the module's docstring)."""
    cron_on = lookup(server.workspace_config, "Cron", "Enabled") is not False
    install = wait() if cron_on else wait(["heartbeat/trigger"])
    if configured_interval(os.environ, server.workspace_config) is not None:
        install()  # the timer is work of its own
        return
    if not cron_on:
        return
    tools = server.runtime.engine.tools
    tools.register(WaitingCronTool(install, tools))  # as the family registers its own
    server.start_background(lambda: _watch(server, install))


async def has_jobs(server: FamilyContext) -> bool:
    """Whether the database holds any cron job."""
    return bool(await server.db.fetch("SELECT 1 FROM cron_jobs LIMIT 1"))


async def _watch(server: FamilyContext, install: Callable[[], None]) -> None:
    cluster = server.runtime.cluster
    while server.cron is None and not server.is_draining():
        looked = False
        try:
            found = await has_jobs(server)
            looked = True
        except Exception:  # logged; looked at again a lease later
            log.exception("could not look for cron jobs")
            found = False
        if found and not server.is_draining():
            try:
                install()
            except Exception:  # logged; tried again a lease later
                log.exception("could not load the cron family for its jobs")
                looked = False
        if cluster is None and looked:
            return  # nobody else adds jobs here: only our own methods and tool
        # Once a lease, whoever else is alive now: another process may add a
        # job and leave between two sweeps of the live nodes (one indexed read).
        await anyio.sleep(_RETRY_S if cluster is None else cluster.silence)


class WaitingCronTool:
    """The ``cron`` tool while the family waits: the same name, description and
    schema; its first use installs the family and hands the call to its tool."""

    name = tool_spec.NAME
    description = tool_spec.DESCRIPTION
    input_schema = tool_spec.SCHEMA

    def __init__(self, install: Callable[[], None], tools: ToolRegistry) -> None:
        self._install = install
        self._tools = tools

    def _tool(self) -> Any:
        try:
            self._install()
        except Exception as exc:  # the model is told; the turn goes on
            log.exception("could not load the cron family for its tool")
            raise ToolError(f"the cron service could not start: {exc}") from None
        tool = self._tools.get(self.name)
        if tool is None or tool is self:
            raise ToolError("the cron service could not start")
        return tool

    def plan(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolPlan:
        """The family's tool's plan (the family installs first)."""
        plan: ToolPlan = self._tool().plan(arguments, ctx)
        return plan

    async def run(self, plan: ToolPlan, ctx: ToolContext) -> ToolOutcome:
        """The family's tool's run."""
        outcome: ToolOutcome = await self._tool().run(plan, ctx)
        return outcome
