"""Helpers for the plugin tests: writing plugin directories by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.client import RpcClient
from tests.support.mcp_helpers import echo_config

BUILTIN_ID = "workspace-tools"
BUILTIN_SERVER = "workspace-tools:files"


def plugins_dir(workspace: Path) -> Path:
    return workspace / ".craft" / "plugins"


def manifest(plugin_id: str, **fields: Any) -> dict[str, Any]:
    """A valid manifest that declares skills (``./skills/``)."""
    return {
        "schemaVersion": 1,
        "id": plugin_id,
        "displayName": plugin_id.replace("-", " ").title(),
        "description": f"The {plugin_id} plugin.",
        "skills": "./skills/",
        **fields,
    }


def write_plugin(
    workspace: Path,
    directory: str,
    content: dict[str, Any] | str | None,
    files: dict[str, str] | None = None,
) -> Path:
    """``.craft/plugins/<directory>`` with ``content`` as its manifest (raw text if a
    string, no manifest if ``None``) and ``files`` (relative path -> text)."""
    root = plugins_dir(workspace) / directory
    root.mkdir(parents=True, exist_ok=True)
    if content is not None:
        path = root / ".craft-plugin" / "plugin.json"
        path.parent.mkdir(exist_ok=True)
        path.write_text(content if isinstance(content, str) else json.dumps(content), "utf-8")
    for relative, text in (files or {}).items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, "utf-8")
    return root


def skill_file(name: str, description: str) -> dict[str, str]:
    return {
        f"skills/{name}/SKILL.md": f"---\nname: {name}\ndescription: {description}\n---\n\nBody.\n"
    }


def echo_mcp_file(name: str = "echo", **fields: Any) -> dict[str, str]:
    """A ``.mcp.json`` bundling the test echo server under ``name``."""
    config = echo_config(name, **fields)
    config.pop("name")
    return {".mcp.json": json.dumps({"mcpServers": {name: config}})}


async def plugin_list(client: RpcClient, **params: Any) -> dict[str, Any]:
    result: dict[str, Any] = await client.request("plugin/list", params)
    return result


async def view(client: RpcClient, plugin_id: str) -> dict[str, Any]:
    plugin: dict[str, Any] = (await client.request("plugin/view", {"id": plugin_id}))["plugin"]
    return plugin


def codes(diagnostics: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(d["code"], d["severity"]) for d in diagnostics}
