"""Reading one plugin directory: ``.craft-plugin/plugin.json`` and what it points to.

Follows DotCraft's plugin architecture spec: schema version 1; ``id``
(ASCII letters, digits, ``. _ - :``) and ``displayName`` required; optional
``skills`` and ``mcpServers`` paths (``./.mcp.json`` when that file exists)
and an ``interface`` block; at least one of the three. Manifest-relative
paths start with ``./``, contain no ``..`` and stay inside the plugin.
Keys match case-insensitively. Problems become diagnostics, never
exceptions: ``error`` ones mean the plugin is not loaded.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appserver.protocol.plugins import PluginDiagnostic, PluginInterface, Severity

MANIFEST = Path(".craft-plugin") / "plugin.json"
SCHEMA_VERSION = 1
MAX_ICON_BYTES = 512 * 1024
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
_ICON_TYPES = {
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".webp": "image/webp",
}
_INTERFACE_TEXT = (
    "displayName",
    "shortDescription",
    "longDescription",
    "developerName",
    "category",
    "defaultPrompt",
    "brandColor",
    "websiteUrl",
    "privacyPolicyUrl",
    "termsOfServiceUrl",
)


@dataclass
class Manifest:
    """A manifest that loaded (no error diagnostics)."""

    id: str
    display_name: str
    root: Path
    description: str = ""
    version: str | None = None
    capabilities: list[str] = field(default_factory=list)
    interface: PluginInterface | None = None
    skills_path: Path | None = None
    mcp_path: Path | None = None


@dataclass
class LoadResult:
    manifest: Manifest | None
    diagnostics: list[PluginDiagnostic]


def is_valid_id(value: object) -> bool:
    """Whether ``value`` can be a plugin id."""
    return isinstance(value, str) and bool(_ID.match(value))


def field_of(data: dict[str, Any], key: str) -> Any:
    """``data[key]`` matched case-insensitively (DotCraft reads manifests so)."""
    lowered = key.lower()
    return next((value for name, value in data.items() if name.lower() == lowered), None)


def _text(value: Any) -> str | None:
    return value.strip() or None if isinstance(value, str) else None


class _Reader:
    """Collects diagnostics for one manifest."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / MANIFEST
        self.plugin_id: str | None = None
        self.diagnostics: list[PluginDiagnostic] = []

    def note(self, severity: Severity, code: str, message: str) -> None:
        self.diagnostics.append(
            PluginDiagnostic(
                severity=severity,
                code=code,
                message=message,
                plugin_id=self.plugin_id,
                path=str(self.path),
            )
        )

    def relative_path(self, value: Any, name: str) -> Path | None:
        """Resolve a manifest-relative path, or note why it is refused."""
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        problem = None
        if not isinstance(value, str):
            problem = "it must be a string"
        elif not value.startswith("./"):
            problem = "it must start with './'"
        elif ".." in Path(value).parts:
            problem = "it must not contain '..'"
        else:
            resolved = (self.root / value).resolve()
            if resolved != self.root.resolve() and not resolved.is_relative_to(self.root.resolve()):
                problem = "it leaves the plugin directory"
            else:
                return resolved
        self.note(
            "error", "InvalidPluginManifestPath", f"Manifest path '{name}' is invalid: {problem}."
        )
        return None


def load_manifest(root: Path) -> LoadResult:
    """Read and check ``root``'s manifest."""
    reader = _Reader(root)
    if not reader.path.is_file():
        reader.note("warning", "PluginManifestMissing", "Plugin manifest is missing.")
        return LoadResult(None, reader.diagnostics)
    try:
        data = json.loads(reader.path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        reader.note("error", "PluginManifestReadFailed", f"Failed to read plugin manifest: {exc}")
        return LoadResult(None, reader.diagnostics)
    except ValueError as exc:
        reader.note(
            "error", "InvalidPluginManifestJson", f"Failed to parse plugin manifest JSON: {exc}"
        )
        return LoadResult(None, reader.diagnostics)
    if not isinstance(data, dict):
        reader.note("error", "InvalidPluginManifest", "Plugin manifest must be a JSON object.")
        return LoadResult(None, reader.diagnostics)
    return _check(reader, data)


def _check(reader: _Reader, data: dict[str, Any]) -> LoadResult:
    raw_id = field_of(data, "id")
    plugin_id = raw_id.strip() if isinstance(raw_id, str) else ""
    if is_valid_id(plugin_id):
        reader.plugin_id = plugin_id
    version = field_of(data, "schemaVersion")
    if version != SCHEMA_VERSION or isinstance(version, bool):
        reader.note(
            "error",
            "UnsupportedPluginManifestVersion",
            f"Unsupported plugin manifest schemaVersion '{version}'.",
        )
    if not is_valid_id(plugin_id):
        reader.note(
            "error",
            "InvalidPluginId",
            "Plugin id is required and may contain only ASCII letters, digits, '.', '_', "
            "'-' or ':' (starting with a letter or digit, at most 128 characters).",
        )
    display_name = _text(field_of(data, "displayName"))
    if display_name is None:
        reader.note("error", "MissingPluginDisplayName", "Plugin displayName is required.")
    skills_path = reader.relative_path(field_of(data, "skills"), "skills")
    mcp_path = reader.relative_path(field_of(data, "mcpServers"), "mcpServers")
    if mcp_path is None and field_of(data, "mcpServers") is None:
        default = reader.root / ".mcp.json"
        mcp_path = default.resolve() if default.is_file() else None
    interface = _interface(reader, field_of(data, "interface"))
    legacy = [key for key in ("tools", "functions", "processes") if field_of(data, key)]
    if legacy:
        reader.note(
            "warning",
            "UnsupportedPluginNativeTools",
            "Plugin manifest native tool fields are no longer supported and are ignored: "
            f"{', '.join(legacy)}. Bundle an MCP server instead.",
        )
    if skills_path is None and mcp_path is None and interface is None:
        reader.note(
            "error",
            "MissingPluginCapabilities",
            "Plugin manifest must declare skills, mcpServers or interface metadata.",
        )
    if any(d.severity == "error" for d in reader.diagnostics):
        return LoadResult(None, reader.diagnostics)
    assert display_name is not None
    capabilities = field_of(data, "capabilities")
    manifest = Manifest(
        id=plugin_id,
        display_name=display_name,
        root=reader.root.resolve(),
        description=_text(field_of(data, "description")) or "",
        version=_text(field_of(data, "version")),
        capabilities=_strings(capabilities),
        interface=interface,
        skills_path=skills_path,
        mcp_path=mcp_path,
    )
    return LoadResult(manifest, reader.diagnostics)


def _strings(value: Any) -> list[str]:
    if not isinstance(value, list):
        return []
    seen: dict[str, str] = {}
    for item in value:
        if isinstance(item, str) and item.strip():
            seen.setdefault(item.strip().lower(), item.strip())
    return list(seen.values())


def _interface(reader: _Reader, value: Any) -> PluginInterface | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        reader.note("warning", "InvalidPluginInterface", "Plugin interface must be an object.")
        return None
    texts = {key: _text(field_of(value, key)) for key in _INTERFACE_TEXT}
    return PluginInterface.model_validate(
        {
            **texts,
            "capabilities": _strings(field_of(value, "capabilities")),
            "composerIconDataUrl": _icon(reader, field_of(value, "composerIcon"), "composerIcon"),
            "logoDataUrl": _icon(reader, field_of(value, "logo"), "logo"),
        }
    )


def _icon(reader: _Reader, value: Any, name: str) -> str | None:
    """An interface image as a data URL (svg/png/jpg/webp, at most 512 KB)."""
    if value is None:
        return None
    noted = len(reader.diagnostics)
    path = reader.relative_path(value, f"interface.{name}")
    if path is None:
        # A bad icon path must not unload the plugin: demote what was just noted.
        for diagnostic in reader.diagnostics[noted:]:
            diagnostic.severity = "warning"
        return None
    mime = _ICON_TYPES.get(path.suffix.lower())
    problem = None
    if mime is None:
        problem = "it must be an .svg, .png, .jpg or .webp file"
    elif not path.is_file():
        problem = "the file does not exist"
    elif path.stat().st_size > MAX_ICON_BYTES:
        problem = "it is larger than 512 KB"
    if problem is not None:
        reader.note("warning", "InvalidPluginInterfaceAsset", f"Interface {name}: {problem}.")
        return None
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f"data:{mime};base64,{data}"
