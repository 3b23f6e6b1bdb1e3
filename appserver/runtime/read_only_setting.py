"""Whether a turn's known read-only shell commands run unasked (``tools.safe_commands``).

On unless the thread's configuration says ``autoApproveReadOnlyCommands:
false``, the workspace's ``.craft/config.json`` says
``Permissions.AutoApproveReadOnlyCommands: false``, or the server's
environment has ``APPSERVER_READ_ONLY_COMMANDS=ask`` (every workspace and
thread of that process; the test suite runs so, its older tests being about
the asking itself). The workspace file is read
on each shell call, so an edit counts at once; it is small and only a
``false`` is taken from it (see ``storage.workspace_config``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from appserver.storage.workspace_config import load_workspace_config, read_only_commands_unasked
from appserver.tools.sandbox import STATE_DIR

THREAD_KEY = "autoApproveReadOnlyCommands"
ENVIRONMENT_VARIABLE = "APPSERVER_READ_ONLY_COMMANDS"


def read_only_unasked(configuration: Mapping[str, Any] | None, workspace: Path) -> bool:
    """Whether known read-only commands run without an approval request."""
    if (configuration or {}).get(THREAD_KEY) is False:
        return False
    if os.environ.get(ENVIRONMENT_VARIABLE) == "ask":
        return False
    return read_only_commands_unasked(load_workspace_config(workspace / STATE_DIR))
