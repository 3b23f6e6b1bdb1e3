"""MCP servers a plugin bundles in its ``.mcp.json``.

The file is ``{"mcpServers": {...}}`` or the server map itself; a map is
keyed by server name (a list of objects with ``name`` works too). Fields are
the ``McpServerConfig`` ones, matched case-insensitively, with DotCraft's
aliases ``arguments`` (args), ``environmentVariables`` (env) and ``headers``
(httpHeaders). In ``command``, ``args``, ``cwd``, ``env`` values, ``url`` and
header values these placeholders are replaced (our extension, so a bundled
server can be a script shipped inside the plugin):

* ``${PLUGIN_ROOT}``: the plugin directory;
* ``${WORKSPACE}``: the workspace root;
* ``${PYTHON}``: the Python interpreter running this server.

A relative ``cwd`` is under the plugin directory (DotCraft's rule). Each
declaration is validated like ``mcp/upsert``; a bad one is skipped with an
``InvalidPluginMcpServer`` diagnostic.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from appserver.protocol.errors import RpcError
from appserver.protocol.mcp import McpServerConfig
from appserver.protocol.plugins import PluginDiagnostic
from appserver.services.mcp.config import normalise
from appserver.services.mcp.effective import PluginServerDeclaration
from appserver.services.plugins.manifest import Manifest, field_of

_ALIASES = {"arguments": "args", "environmentvariables": "env", "headers": "httpHeaders"}


@functools.cache
def _fields() -> dict[str, str]:
    """Lower-cased wire name -> wire name of every server config field (built
    on first use: the schema costs milliseconds every start-up otherwise)."""
    schema = McpServerConfig.model_json_schema(by_alias=True)
    return {name.lower(): name for name in schema["properties"]}


_OUTPUT_ONLY = ("origin", "readOnly", "name")


def load_declarations(
    manifest: Manifest, workspace: Path
) -> tuple[list[PluginServerDeclaration], list[PluginDiagnostic]]:
    """The valid declarations of an (enabled) plugin, and what was wrong with the rest."""
    diagnostics: list[PluginDiagnostic] = []
    path = manifest.mcp_path
    if path is None:
        return [], diagnostics

    def note(severity: str, code: str, message: str) -> None:
        diagnostics.append(
            PluginDiagnostic.model_validate(
                {
                    "severity": severity,
                    "code": code,
                    "message": message,
                    "pluginId": manifest.id,
                    "path": str(path),
                }
            )
        )

    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        note("error", "InvalidPluginMcpConfig", f"Failed to read plugin MCP config: {exc}")
        return [], diagnostics
    servers = field_of(data, "mcpServers") if isinstance(data, dict) else None
    servers = data if servers is None else servers
    entries: list[tuple[Any, Any]]
    if isinstance(servers, dict):
        entries = list(servers.items())
    elif isinstance(servers, list):
        entries = [(field_of(s, "name") if isinstance(s, dict) else None, s) for s in servers]
    else:
        note("error", "InvalidPluginMcpConfig", "Plugin MCP config must be an object or a list.")
        return [], diagnostics
    substitutions = {
        "${PLUGIN_ROOT}": str(manifest.root),
        "${WORKSPACE}": str(workspace),
        "${PYTHON}": sys.executable,
    }
    found: list[PluginServerDeclaration] = []
    for name, body in entries:
        declared = name.strip() if isinstance(name, str) else ""
        if not declared or not isinstance(body, dict):
            note(
                "warning",
                "InvalidPluginMcpServer",
                "Plugin MCP server declaration needs a name and an object body.",
            )
            continue
        try:
            config = _config(manifest, declared, body, substitutions)
        except RpcError as exc:
            detail = (exc.data or {}).get("detail", exc.message)
            note("warning", "InvalidPluginMcpServer", f"MCP server '{declared}': {detail}")
            continue
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            where = ".".join(str(part) for part in first["loc"])
            note(
                "warning",
                "InvalidPluginMcpServer",
                f"MCP server '{declared}': '{where}': {first['msg']}",
            )
            continue
        found.append(PluginServerDeclaration(manifest.id, manifest.display_name, declared, config))
    return found, diagnostics


def _config(
    manifest: Manifest, declared: str, body: dict[str, Any], substitutions: dict[str, str]
) -> McpServerConfig:
    fields: dict[str, Any] = {}
    for key, value in body.items():
        lowered = key.lower()
        canonical = _ALIASES.get(lowered) or _fields().get(lowered)
        if canonical is not None and canonical not in _OUTPUT_ONLY:
            fields[canonical] = _substitute(value, substitutions)
    config = normalise(
        McpServerConfig.model_validate({**fields, "name": f"{manifest.id}:{declared}"})
    )
    if config.cwd is not None and not Path(config.cwd).is_absolute():
        config = config.model_copy(update={"cwd": str(manifest.root / config.cwd)})
    return config


def _substitute(value: Any, substitutions: dict[str, str]) -> Any:
    if isinstance(value, str):
        for placeholder, replacement in substitutions.items():
            value = value.replace(placeholder, replacement)
        return value
    if isinstance(value, list):
        return [_substitute(item, substitutions) for item in value]
    if isinstance(value, dict):
        return {key: _substitute(item, substitutions) for key, item in value.items()}
    return value
