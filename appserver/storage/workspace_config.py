"""``<workspace>/.craft/config.json``: DotCraft's workspace settings file."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger("appserver.config")


def load_workspace_config(craft_dir: Path) -> dict[str, Any]:
    """The parsed config (``{}`` if absent; a broken file is logged and ignored)."""
    path = craft_dir / "config.json"
    try:
        value = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable %s: %s", path, exc)
        return {}
    return value if isinstance(value, dict) else {}


def default_approval_policy(config: dict[str, Any]) -> str:
    """``Permissions.DefaultApprovalPolicy`` if it is one we know, else ``default``."""
    policy = lookup(config, "Permissions", "DefaultApprovalPolicy")
    return policy if policy in ("default", "autoApprove") else "default"


def lookup(config: dict[str, Any], *path: str) -> Any:
    """Case-insensitive nested lookup (DotCraft matches keys case-insensitively)."""
    node: Any = config
    for key in path:
        if not isinstance(node, dict):
            return None
        node = next((v for k, v in node.items() if k.lower() == key.lower()), None)
    return node
