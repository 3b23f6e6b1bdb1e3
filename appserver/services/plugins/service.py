"""The ``plugin/*`` handlers and what an enabled plugin contributes.

State: plugin files on disk (``.craft/plugins/<dir>/``), enable switches in
SQLite. Every read scans the disk afresh, so a plugin copied in by hand shows
up without a restart. An installed, enabled plugin contributes its skills
(through the skills family's ``add_source``/``remove_source`` hook) and its
bundled MCP servers (through the MCP family, which asks
:meth:`PluginService.mcp_declarations`); both are resynchronised after every
change and once at start-up.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread
from pydantic import BaseModel

from appserver import __version__
from appserver.protocol import errors as rpc_errors
from appserver.protocol import plugins as plugin_wire
from appserver.protocol.mcp import McpServerConfig
from appserver.rpc.connection import RequestContext
from appserver.services.mcp.effective import Effective, PluginServerDeclaration, merge
from appserver.services.plugins.bundled_mcp import load_declarations
from appserver.services.plugins.catalog import (
    MARKER,
    Discovery,
    Plugin,
    builtin_catalog_dir,
    discover,
    shown_name,
)
from appserver.services.plugins.manifest import Manifest
from appserver.services.router import Router
from appserver.services.skills import skills_of
from appserver.storage.plugins import PluginStateRepository, plugin_key

if TYPE_CHECKING:
    from appserver.services.context import FamilyContext

log = logging.getLogger("appserver.plugins")

CONFIG_REGIONS = ["plugins", "skills", "mcp"]
_COPY_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", MARKER)


def plugin_not_found(plugin_id: str) -> rpc_errors.RpcError:
    return rpc_errors.invalid_params(f"Plugin '{plugin_id}' was not found.")


class PluginService:
    """Discovery, the workspace's switches, install/remove of catalog plugins."""

    def __init__(self, server: FamilyContext) -> None:
        self.server = server
        self.repo = PluginStateRepository(server.db)
        self.workspace = server.workspace
        self.plugins_dir = server.craft_dir / "plugins"
        self.catalog_dir = builtin_catalog_dir()
        # Set by the MCP family: its workspace servers (for shadowing) and a
        # way to make the runtime pick up changed plugin servers.
        self.mcp_workspace_servers: Callable[[], Awaitable[list[McpServerConfig]]] | None = None
        self.mcp_refresh: Callable[[], Awaitable[object]] | None = None
        self._skill_sources: set[str] = set()
        self._write_lock = anyio.Lock()
        self._synced = anyio.Event()

    def register(self, router: Router) -> None:
        """Serve every ``plugin/*`` method on ``router``."""
        router.register("plugin/list", self.list_plugins)
        router.register("plugin/view", self.view)
        router.register("plugin/install", self.install_plugin)
        router.register("plugin/remove", self.remove)
        router.register("plugin/setEnabled", self.set_enabled)

    async def run(self) -> None:
        """Background: hand enabled plugins' skills to the skills family once."""

        async def on_trusted() -> None:
            await self._sync_skills(await self.discover())

        self.server.trust.on_trusted.append(on_trusted)
        try:
            await self._sync_skills(await self.discover())
        finally:
            self._synced.set()

    # --- discovery ----------------------------------------------------------------

    async def discover(self) -> Discovery:
        """A fresh scan with the stored switches applied."""
        switches = await self.repo.switches()
        trusted = self.server.trust.trusted
        return await anyio.to_thread.run_sync(
            lambda: discover(self.plugins_dir, self.catalog_dir, switches, trusted=trusted)
        )

    async def mcp_declarations(self) -> list[PluginServerDeclaration]:
        """Bundled MCP servers of every installed, enabled plugin (by plugin id)."""
        found = await self.discover()
        return (await self._declarations(found))[0]

    async def _declarations(
        self, found: Discovery
    ) -> tuple[list[PluginServerDeclaration], list[plugin_wire.PluginDiagnostic]]:
        declarations: list[PluginServerDeclaration] = []
        diagnostics: list[plugin_wire.PluginDiagnostic] = []
        for plugin in sorted(found.plugins, key=lambda p: plugin_key(p.manifest.id)):
            if plugin.active:
                found_here, noted = load_declarations(plugin.manifest, self.workspace)
                declarations.extend(found_here)
                diagnostics.extend(noted)
        return declarations, diagnostics

    async def _effective(self, declarations: list[PluginServerDeclaration]) -> Effective | None:
        if self.mcp_workspace_servers is None:
            return None
        return merge(await self.mcp_workspace_servers(), declarations)

    # --- wire objects ------------------------------------------------------------

    async def _infos(
        self, found: Discovery
    ) -> tuple[list[plugin_wire.PluginInfo], list[plugin_wire.PluginDiagnostic]]:
        declarations, mcp_diagnostics = await self._declarations(found)
        effective = await self._effective(declarations)
        diagnostics = [*found.diagnostics, *mcp_diagnostics]
        infos = [await self._info(plugin, effective, diagnostics) for plugin in found.plugins]
        return infos, diagnostics

    async def _info(
        self,
        plugin: Plugin,
        effective: Effective | None,
        diagnostics: list[plugin_wire.PluginDiagnostic],
    ) -> plugin_wire.PluginInfo:
        manifest = plugin.manifest
        key = plugin_key(manifest.id)
        own = [d for d in diagnostics if d.plugin_id and plugin_key(d.plugin_id) == key]
        servers: list[plugin_wire.PluginMcpServer] = []
        if manifest.mcp_path is not None:
            declared, noted = load_declarations(manifest, self.workspace)
            if not plugin.active:  # an active plugin's were collected already
                own.extend(noted)
            for declaration in declared:
                shadowed = (
                    effective.shadowed_by(manifest.id, declaration.config.name)
                    if effective is not None and plugin.active
                    else None
                )
                servers.append(
                    plugin_wire.PluginMcpServer(
                        name=declaration.declared_name,
                        runtime_name=declaration.config.name,
                        transport=declaration.config.transport,
                        enabled=declaration.config.enabled,
                        active=plugin.active and shadowed is None,
                        shadowed_by=shadowed,
                    )
                )
        interface = manifest.interface
        return plugin_wire.PluginInfo(
            id=manifest.id,
            # As DotCraft: the interface's names, when given, are what users see.
            display_name=shown_name(manifest),
            description=(interface and interface.short_description) or manifest.description,
            version=manifest.version,
            enabled=plugin.enabled,
            installed=plugin.installed,
            installable=plugin.installable,
            removable=plugin.removable,
            source=plugin.source,
            root_path=str(manifest.root),
            interface=interface,
            skills=await self._skills(plugin),
            mcp_servers=servers,
            diagnostics=own,
        )

    async def _skills(self, plugin: Plugin) -> list[plugin_wire.PluginSkill]:
        manifest = plugin.manifest
        if manifest.skills_path is None:
            return []
        skills = skills_of(self.server)
        if skills is None:
            return await anyio.to_thread.run_sync(
                _read_skills, manifest.skills_path, plugin.enabled
            )
        infos = await skills.skills_under(manifest.skills_path, manifest.id, manifest.display_name)
        return [
            plugin_wire.PluginSkill(
                name=info.name,
                description=info.description,
                display_name=info.display_name,
                short_description=info.short_description,
                enabled=plugin.enabled and info.enabled,
            )
            for info in infos
        ]

    async def info_of(self, plugin_id: str) -> plugin_wire.PluginInfo | None:
        """The current wire object of one plugin (``None`` if it is unknown)."""
        found = await self.discover()
        plugin = found.find(plugin_id)
        if plugin is None:
            return None
        declarations, mcp_diagnostics = await self._declarations(found)
        effective = await self._effective(declarations)
        return await self._info(plugin, effective, [*found.diagnostics, *mcp_diagnostics])

    async def _require(self, plugin_id: str) -> plugin_wire.PluginInfo:
        info = await self.info_of(plugin_id)
        if info is None:
            raise plugin_not_found(plugin_id)
        return info

    # --- handlers ----------------------------------------------------------------

    async def list_plugins(
        self, ctx: RequestContext, params: plugin_wire.PluginListParams
    ) -> BaseModel:
        await self._synced.wait()
        infos, diagnostics = await self._infos(await self.discover())
        if not params.include_disabled:
            infos = [info for info in infos if info.enabled]
        return plugin_wire.PluginListResult(plugins=infos, diagnostics=diagnostics)

    async def view(self, ctx: RequestContext, params: plugin_wire.PluginIdParams) -> BaseModel:
        await self._synced.wait()
        return plugin_wire.PluginResult(plugin=await self._require(params.id))

    async def install_plugin(
        self, ctx: RequestContext, params: plugin_wire.PluginIdParams
    ) -> BaseModel:
        await self._synced.wait()
        async with self._write_lock:
            found = await self.discover()
            entry = found.catalog.get(plugin_key(params.id))
            if entry is None:
                if found.find(params.id) is None:
                    raise plugin_not_found(params.id)
                raise rpc_errors.invalid_params(
                    f"Plugin '{params.id}' is not in the built-in catalog."
                )
            target = self.plugins_dir / entry.id
            current = found.find(entry.id)
            if current is not None and current.installed and not current.removable:
                # A user-owned copy counts as installed; the server never overwrites it.
                return plugin_wire.PluginResult(plugin=await self._require(entry.id))
            if not await anyio.to_thread.run_sync(_needs_copy, target, entry):
                return plugin_wire.PluginResult(plugin=await self._require(entry.id))
            await anyio.to_thread.run_sync(_copy_entry, entry, target)
            await self.repo.set_enabled(entry.id, True)
            self._after_change(ctx, "plugin/install")
            return plugin_wire.PluginResult(plugin=await self._require(entry.id))

    async def remove(self, ctx: RequestContext, params: plugin_wire.PluginIdParams) -> BaseModel:
        await self._synced.wait()
        async with self._write_lock:
            found = await self.discover()
            plugin = found.find(params.id)
            if plugin is None:
                raise plugin_not_found(params.id)
            if not plugin.installed:
                return plugin_wire.PluginRemoveResult(
                    plugin=await self._require(plugin.manifest.id)
                )
            if not plugin.removable:
                raise rpc_errors.invalid_params(
                    f"Plugin '{plugin.manifest.id}' is user-owned and cannot be removed by the "
                    "server; delete its directory yourself."
                )
            await anyio.to_thread.run_sync(_remove_dir, plugin.manifest.root, self.plugins_dir)
            await self.repo.forget(plugin.manifest.id)
            self._after_change(ctx, "plugin/remove")
            return plugin_wire.PluginRemoveResult(plugin=await self.info_of(plugin.manifest.id))

    async def set_enabled(
        self, ctx: RequestContext, params: plugin_wire.PluginSetEnabledParams
    ) -> BaseModel:
        await self._synced.wait()
        async with self._write_lock:
            found = await self.discover()
            plugin = found.find(params.id)
            if plugin is None:
                raise plugin_not_found(params.id)
            if not plugin.installed:
                raise rpc_errors.invalid_params(f"Plugin '{plugin.manifest.id}' is not installed.")
            if plugin.enabled != params.enabled:
                await self.repo.set_enabled(plugin.manifest.id, params.enabled)
                self._after_change(ctx, "plugin/setEnabled")
            return plugin_wire.PluginResult(plugin=await self._require(plugin.manifest.id))

    def _after_change(self, ctx: RequestContext, source: str) -> None:
        async def apply() -> None:
            await self._sync_skills(await self.discover())
            if self.mcp_refresh is not None:
                await self.mcp_refresh()
            self.server.announce_config_change(source, CONFIG_REGIONS)

        # After the response: the caller sees its result before the notifications.
        ctx.after_response(apply)

    async def _sync_skills(self, found: Discovery) -> None:
        skills = skills_of(self.server)
        if skills is None:
            return
        wanted = {
            plugin.manifest.id: plugin.manifest
            for plugin in found.plugins
            if plugin.active and plugin.manifest.skills_path is not None
        }
        for plugin_id in self._skill_sources - set(wanted):
            skills.remove_source(plugin_id)
        for plugin_id, manifest in wanted.items():
            assert manifest.skills_path is not None
            skills.add_source(
                root=manifest.skills_path,
                plugin_id=plugin_id,
                plugin_display_name=manifest.display_name,
            )
        self._skill_sources = set(wanted)


# --- disk work (run in a worker thread) ----------------------------------------------


def _needs_copy(target: Path, entry: Manifest) -> bool:
    """``False`` when the catalog entry is installed already (and current).

    A ``.builtin`` directory from another server version is refreshed; a
    user-owned directory is never touched.
    """
    if not target.exists():
        return True
    marker = target / MARKER
    if not marker.is_file():
        raise rpc_errors.invalid_params(
            f"Plugin '{entry.id}' cannot be installed: {target} exists and is user-owned."
        )
    return marker.read_text("utf-8").strip() != __version__


def _copy_entry(entry: Manifest, target: Path) -> None:
    """Copy next to the target, then swap it in, so a half copy is never visible."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{target.name}.installing-{secrets.token_hex(4)}"
    shutil.copytree(entry.root, staging, ignore=_COPY_IGNORE)
    (staging / MARKER).write_text(__version__ + "\n", "utf-8")
    if target.exists():
        retired = target.parent / f".{target.name}.retired-{secrets.token_hex(4)}"
        os.replace(target, retired)
        os.replace(staging, target)
        shutil.rmtree(retired, ignore_errors=True)
    else:
        os.replace(staging, target)


def _remove_dir(root: Path, plugins_dir: Path) -> None:
    """Delete an installed plugin directory, never anything outside ``plugins_dir``."""
    if root.parent != plugins_dir.resolve() or root.is_symlink():
        raise rpc_errors.invalid_params(f"{root} is not a plugin directory managed by the server.")
    shutil.rmtree(root)


def _read_skills(skills_dir: Path, enabled: bool) -> list[plugin_wire.PluginSkill]:
    """Minimal SKILL.md reading, used only when the skills family is off."""
    skills: list[plugin_wire.PluginSkill] = []
    if not skills_dir.is_dir():
        return skills
    for child in sorted(skills_dir.iterdir(), key=lambda path: path.name.lower()):
        skill_file = child / "SKILL.md"
        if not skill_file.is_file():
            continue
        description = child.name
        text = skill_file.read_text("utf-8", errors="replace")
        if text.startswith("---"):
            block = text[3:].split("\n---", 1)[0]
            import yaml  # here: most sessions never read a plugin's skills

            try:
                front = yaml.safe_load(block)
            except yaml.YAMLError:
                front = None
            if isinstance(front, dict) and isinstance(front.get("description"), str):
                description = front["description"].strip() or child.name
        skills.append(
            plugin_wire.PluginSkill(name=child.name, description=description, enabled=enabled)
        )
    return skills
