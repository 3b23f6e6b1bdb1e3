"""DotCraft's Automations: tasks the agent runs on its own, kept as files under
``.craft/tasks/`` (docs/automations.md).

``install`` serves ``automation/task/*`` and ``automation/template/*``
(capability ``automations``), registers the agent's ``CompleteLocalTask``
tool and starts the runner (``appserver.cron.automations``), unless the
workspace config says ``Automations: {Enabled: false}``: then nothing is
served and the methods answer ``-32601``. In a workspace that is not trusted
the methods work but no task runs until it is (docs/security.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from appserver.cron.automations.runner import AutomationRunner
from appserver.cron.automations.settings import enabled, read_settings
from appserver.cron.automations.tool import CompleteLocalTaskTool
from appserver.cron.runner import JobRunner
from appserver.services.automations.tasks import TaskHandlers
from appserver.services.automations.templates import TemplateHandlers
from appserver.storage.automation_runs import AutomationRunRepository
from appserver.storage.automation_tasks import TaskFiles

if TYPE_CHECKING:
    from appserver.services.context import FamilyContext


def install(server: FamilyContext) -> None:
    """Serve the automation methods and run the tasks (unless switched off)."""
    if not enabled(server.workspace_config):
        return
    runner = AutomationRunner(
        TaskFiles(server.craft_dir),
        AutomationRunRepository(server.db),
        JobRunner(server.runtime.engine, server.threads, accepting=server.accepting),
        server.threads,
        server.runtime.bus,
        read_settings(server.workspace_config),
        server.runtime.cluster,
    )
    runner.may_run = lambda: server.trust.trusted
    templates = TemplateHandlers(server, runner)
    templates.register()
    TaskHandlers(server, runner, templates).register()
    tools = server.runtime.engine.tools
    tool = CompleteLocalTaskTool(runner.files, runner.task_of_turn)
    if tools.admits(tool.name):
        tools.register(tool)

    async def wake() -> None:
        runner.wake()

    server.trust.on_trusted.append(wake)
    # Last: the family counts as installed once this is set
    # (services/automations_waiting.py looks at it).
    server.automations = runner
    server.start_background(runner.run)
    server.shutdown_hooks.append(runner.drain)
