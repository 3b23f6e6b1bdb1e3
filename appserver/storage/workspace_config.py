"""Reading DotCraft's ``config.json`` settings files.

``<workspace>/.craft/config.json`` can arrive with a checkout, so only what
is harmless is taken from it (see :mod:`appserver.providers` and
:mod:`appserver.storage.user_settings`); the approval policy default is read
from the user's settings, never from here.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger("appserver.config")


def load_workspace_config(craft_dir: Path) -> dict[str, Any]:
    """The parsed ``craft_dir/config.json`` (``{}`` if absent; a broken file is
    logged and ignored)."""
    path = craft_dir / "config.json"
    try:
        value = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        _warned.pop(path, None)  # gone: a later breakage is said again
        return {}
    except (OSError, ValueError) as exc:
        _warn_once(path, f"ignoring unreadable {path}: {exc}")
        return {}
    if not isinstance(value, dict):
        _warn_once(path, f"ignoring {path}: it holds no JSON object")
        return {}
    _warned.pop(path, None)  # good again: a later breakage is said again
    return value


_warned: dict[Path, str] = {}  # the last warning about each file


def _warn_once(path: Path, message: str) -> None:
    """A broken file is read several times at start (the early answer, the
    server): one warning while it stays broken the same way, not one per read."""
    if _warned.get(path) != message:
        _warned[path] = message
        log.warning("%s", message)


def default_approval_policy(user_settings: dict[str, Any]) -> str:
    """``Permissions.DefaultApprovalPolicy`` of the user's settings if it is one
    we know, else ``default``."""
    policy = lookup(user_settings, "Permissions", "DefaultApprovalPolicy")
    return policy if policy in ("default", "autoApprove") else "default"


def read_only_commands_unasked(workspace_config: dict[str, Any]) -> bool:
    """``Permissions.AutoApproveReadOnlyCommands``: ``false`` makes known
    read-only shell commands ask like any other. Only turning it off is taken
    from the workspace file (it may arrive with a checkout, and asking more is
    always safe), so anything but ``false`` leaves it on."""
    return lookup(workspace_config, "Permissions", "AutoApproveReadOnlyCommands") is not False


def warn_ignored(workspace_config: dict[str, Any]) -> None:
    """Say once at start what the workspace file sets that is no longer taken from it."""
    policy = lookup(workspace_config, "Permissions", "DefaultApprovalPolicy")
    if policy not in (None, "", "default", "Default"):
        log.warning(
            "ignoring Permissions.DefaultApprovalPolicy %r in .craft/config.json: the approval "
            "default is yours to set (workspace/config/update, or your own config.json)",
            policy,
        )


def lookup(config: dict[str, Any], *path: str) -> Any:
    """Case-insensitive nested lookup (DotCraft matches keys case-insensitively)."""
    node: Any = config
    for key in path:
        if not isinstance(node, dict):
            return None
        node = next((v for k, v in node.items() if k.lower() == key.lower()), None)
    return node
