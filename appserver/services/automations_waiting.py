"""The automations family at start: installed only when it has work.

The family (its runner, its tool, its handlers and wire models: ~20 ms of a
server's start) waits for the first call of an ``automation/*`` method, unless
tasks are already in ``.craft/tasks``. Meanwhile a light poll, at the runner's
own interval (``Automations.PollingInterval``), installs it once a task appears
there (written by hand, by another process or by another node): the runner
then starts and looks at the tasks at once, as it would have at its next poll.
Switched off (``Automations.Enabled: false``), nothing is served.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from appserver.cron.automations.settings import enabled, read_settings
from appserver.storage import craft_files

if TYPE_CHECKING:
    from appserver.services.context import FamilyContext

log = logging.getLogger("appserver.automations")


def prepare(server: FamilyContext, wait: Callable[[], Callable[[], None]]) -> None:
    """Set the family up on ``server`` (see the module's docstring)."""
    if not enabled(server.workspace_config):
        return
    install = wait()
    if has_tasks(server.craft_dir):
        install()
        return
    interval = read_settings(server.workspace_config).polling_interval_ms / 1000
    server.start_background(partial(_watch, server, interval, install))


def has_tasks(craft_dir: Path) -> bool:
    """Whether ``<craft_dir>/tasks`` holds a directory, listed as the runner
    lists its tasks (never through a link): a task, or what may be one."""
    try:
        with craft_files.directory(craft_dir, ("tasks",)) as root:
            return bool(craft_files.subdirectories(root))
    except OSError:  # none yet, or unreadable: the runner would find no task either
        return False


async def _watch(server: FamilyContext, interval: float, install: Callable[[], None]) -> None:
    # Until installed (by a call meanwhile, or here) or the server ends.
    while server.automations is None and not server.is_draining():
        cluster = server.runtime.cluster
        if cluster is not None and cluster.peers:
            # As the runner looks while other nodes live: a task one of them made,
            # or left running when it died, is taken up as soon as it would be.
            await anyio.sleep(min(interval, cluster.silence))
        else:
            await anyio.sleep(interval)
        if server.is_draining() or not await anyio.to_thread.run_sync(has_tasks, server.craft_dir):
            continue
        try:
            install()
        except Exception:  # logged; looked at again at the next poll
            log.exception("could not start the automations")
