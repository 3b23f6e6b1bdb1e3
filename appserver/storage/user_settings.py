"""The user's own settings: outside every workspace, so no checkout can set them.

``<home>`` is ``$APPSERVER_HOME``, else ``$XDG_CONFIG_HOME/appserver``, else
``~/.config/appserver``. It holds:

- ``config.json``: settings for every workspace (DotCraft's key names:
  ``ApiKey``, ``EndPoint``, ``Model``, ``Provider``,
  ``Permissions.DefaultApprovalPolicy``, ...);
- ``workspaces/<digest of the path>/config.json``: one workspace's settings,
  written by ``workspace/config/update`` (mode 0600), over the file above;
- ``workspaces/<digest>/trusted.json``: the workspace's trust
  (:mod:`appserver.storage.trust`).

The approval policy default and API keys are read from here, never from the
workspace's ``.craft/config.json``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from appserver.storage.workspace_config import load_workspace_config


def user_home(environ: Mapping[str, str] | None = None) -> Path:
    """The user's appserver directory (see the module docstring)."""
    env = os.environ if environ is None else environ
    explicit = env.get("APPSERVER_HOME")
    if explicit:
        return Path(explicit).expanduser()
    xdg = env.get("XDG_CONFIG_HOME")
    if xdg:
        return Path(xdg) / "appserver"
    return Path.home() / ".config" / "appserver"


def workspace_home(workspace: Path, home: Path | None = None) -> Path:
    """The user's directory for one workspace (its settings and its trust)."""
    digest = hashlib.sha256(str(workspace.resolve()).encode()).hexdigest()[:32]
    return (home or user_home()) / "workspaces" / digest


def load_user_settings(workspace: Path, home: Path | None = None) -> dict[str, Any]:
    """The user's settings for ``workspace``: its own file over the user-wide one."""
    root = home or user_home()
    return merged(
        load_workspace_config(root), load_workspace_config(workspace_home(workspace, root))
    )


def merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``, sections merged key by key (case-insensitively)."""
    result = dict(base)
    for key, value in over.items():
        found = next((name for name in result if name.lower() == key.lower()), None)
        if found is not None:
            del result[found]
        previous = base.get(found) if found is not None else None
        if isinstance(value, Mapping) and isinstance(previous, Mapping):
            result[key] = merged(previous, value)
        else:
            result[key] = value
    return result
