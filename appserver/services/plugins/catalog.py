"""Finding plugins: the workspace's ``.craft/plugins/<dir>/`` and the built-in catalog.

Workspace plugins come first; a later directory repeating an id is skipped
(``DuplicatePluginId``). Built-in catalog entries that are not installed
are listed as installable (``source: builtin``), never enabled. A workspace
directory holding a ``.builtin`` marker was installed from the catalog by
this server and may be removed or refreshed by it; any other directory is
user-owned. Either way a plugin is off until a client enables it
(``plugin/install`` and ``plugin/setEnabled`` store the switch): a marker is a
file in the workspace, and a checkout can carry one, so it never turns a
plugin on (a plugin could run commands through its .mcp.json). In a workspace
that is not trusted (:mod:`appserver.storage.trust`) no workspace plugin is
active, whatever its switch says, and each says why (``WorkspaceNotTrusted``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from appserver.protocol.plugins import PluginDiagnostic
from appserver.services.plugins.manifest import Manifest, load_manifest
from appserver.storage.plugins import plugin_key

MARKER = ".builtin"


def builtin_catalog_dir() -> Path:
    """The catalog shipped in this package: ``appserver/builtin/plugins``."""
    return Path(__file__).resolve().parents[2] / "builtin" / "plugins"


@dataclass
class Plugin:
    """A discovered plugin with its workspace state."""

    manifest: Manifest
    source: Literal["workspace", "builtin"]
    installed: bool
    installable: bool
    removable: bool
    enabled: bool

    @property
    def active(self) -> bool:
        """Installed and enabled: it contributes skills and MCP servers."""
        return self.installed and self.enabled


@dataclass
class Discovery:
    """One scan's plugins (by display name) and diagnostics."""

    plugins: list[Plugin] = field(default_factory=list)
    diagnostics: list[PluginDiagnostic] = field(default_factory=list)
    catalog: dict[str, Manifest] = field(default_factory=dict)  # lower-cased id -> entry

    def find(self, plugin_id: str) -> Plugin | None:
        """The plugin with ``plugin_id`` (case-insensitively)."""
        key = plugin_key(plugin_id)
        return next((p for p in self.plugins if plugin_key(p.manifest.id) == key), None)


def shown_name(manifest: Manifest) -> str:
    """The name users see: the interface's display name, else the manifest's."""
    interface = manifest.interface
    return (interface.display_name if interface else None) or manifest.display_name


def _children(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(
        (
            child
            for child in directory.iterdir()
            if child.is_dir() and not child.name.startswith(".")
        ),
        key=lambda child: child.name.lower(),
    )


def load_catalog(catalog_dir: Path) -> tuple[dict[str, Manifest], list[PluginDiagnostic]]:
    """The built-in entries (directories without a manifest, e.g. caches, are ignored)."""
    entries: dict[str, Manifest] = {}
    diagnostics: list[PluginDiagnostic] = []
    for child in _children(catalog_dir):
        if not (child / ".craft-plugin").is_dir():
            continue
        result = load_manifest(child)
        diagnostics.extend(result.diagnostics)
        if result.manifest is not None:
            entries.setdefault(plugin_key(result.manifest.id), result.manifest)
    return entries, diagnostics


def discover(
    plugins_dir: Path, catalog_dir: Path, switches: dict[str, bool], *, trusted: bool
) -> Discovery:
    """Scan both roots; ``switches`` maps lower-cased ids to explicit enabled states
    (taken only when the workspace is ``trusted``)."""
    found = Discovery()
    found.catalog, catalog_diagnostics = load_catalog(catalog_dir)
    seen: set[str] = set()
    for child in _children(plugins_dir):
        result = load_manifest(child)
        found.diagnostics.extend(result.diagnostics)
        manifest = result.manifest
        if manifest is None:
            continue
        key = plugin_key(manifest.id)
        if key in seen:
            found.diagnostics.append(
                PluginDiagnostic(
                    severity="warning",
                    code="DuplicatePluginId",
                    message=f"Plugin '{manifest.id}' was skipped because another directory "
                    "already provides it.",
                    plugin_id=manifest.id,
                    path=str(child),
                )
            )
            continue
        seen.add(key)
        # Only a switch a client set turns a plugin on (see the module docstring).
        enabled = trusted and switches.get(key, False)
        if not trusted:
            found.diagnostics.append(
                PluginDiagnostic(
                    severity="warning",
                    code="WorkspaceNotTrusted",
                    message=f"Plugin '{manifest.id}' is off because this workspace is not "
                    "trusted; trust it (workspace/trust or --trust-workspace) to use it.",
                    plugin_id=manifest.id,
                    path=str(child),
                )
            )
        elif key not in switches:
            found.diagnostics.append(
                PluginDiagnostic(
                    severity="info",
                    code="PluginNotEnabled",
                    message=f"Plugin '{manifest.id}' was found in the workspace and is off "
                    "until enabled with plugin/setEnabled.",
                    plugin_id=manifest.id,
                    path=str(child),
                )
            )
        elif not enabled:
            found.diagnostics.append(
                PluginDiagnostic(
                    severity="info",
                    code="PluginDisabled",
                    message=f"Plugin '{manifest.id}' is disabled in this workspace.",
                    plugin_id=manifest.id,
                    path=str(child),
                )
            )
        found.plugins.append(
            Plugin(
                manifest=manifest,
                source="workspace",
                installed=True,
                installable=False,
                removable=(child / MARKER).is_file(),
                enabled=enabled,
            )
        )
    found.diagnostics.extend(catalog_diagnostics)
    for key, manifest in found.catalog.items():
        if key not in seen:
            found.plugins.append(
                Plugin(
                    manifest=manifest,
                    source="builtin",
                    installed=False,
                    installable=True,
                    removable=False,
                    enabled=False,
                )
            )
    found.plugins.sort(key=lambda p: (shown_name(p.manifest).lower(), p.manifest.id.lower()))
    return found
