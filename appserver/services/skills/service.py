"""The ``skills/*`` handlers, the ``skillRef`` input resolver and the hook
through which plugins contribute skill roots."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
from pydantic import BaseModel

from appserver.protocol import errors as rpc_errors
from appserver.protocol import skills as skill_wire
from appserver.protocol.errors import RpcError
from appserver.protocol.turns import SkillRefPart
from appserver.rpc.connection import RequestContext
from appserver.runtime.inputs import Resolved
from appserver.services.router import Router
from appserver.services.skills import catalog
from appserver.services.skills.catalog import Skill, SkillRoot
from appserver.storage.skills import SkillStateRepository, skill_key

if TYPE_CHECKING:
    from appserver.services.context import FamilyContext

CONFIG_REGIONS = ["skills"]
UNINSTALLABLE = ("workspace", "user")


def skill_not_found(name: str) -> RpcError:
    """``-32040 Skill not found: <name>``."""
    return RpcError(rpc_errors.SKILL_NOT_FOUND, f"Skill not found: {name}")


def skill_instructions(skill: Skill) -> str:
    """The system-prompt text a ``skillRef`` adds for its turn."""
    return (
        f'The user invoked the skill "{skill.name}" ({skill.description}). '
        "Follow its instructions for this request. Paths in it are relative to "
        f"{skill.directory}.\n\n"
        f'<skill name="{skill.name}">\n{skill.front.body}\n</skill>'
    )


class SkillsService:
    """Skill discovery, the workspace's on/off switches, and uninstalling.

    Plugins contribute skills through :meth:`add_source` / :meth:`remove_source`;
    the service is reachable as ``server.skills`` (see :func:`skills_of`).
    """

    def __init__(self, server: FamilyContext, user_root: Path | None) -> None:
        self.server = server
        self.repo = SkillStateRepository(server.db)
        self.workspace_root = server.craft_dir / "skills"
        self.builtin_root = catalog.BUILTIN_ROOT
        self.user_root = user_root  # None: no user skills (no home directory)
        self._plugins: dict[str, SkillRoot] = {}

    def register(self, router: Router) -> None:
        """Serve every ``skills/*`` method on ``router``."""
        router.register("skills/list", self.list_skills)
        router.register("skills/read", self.read)
        router.register("skills/view", self.view)
        router.register("skills/restoreOriginal", self.restore_original)
        router.register("skills/setEnabled", self.set_enabled)
        router.register("skills/uninstall", self.uninstall)

    # --- plugin hook ----------------------------------------------------------

    def add_source(
        self,
        *,
        root: Path,
        plugin_id: str,
        plugin_display_name: str | None = None,
        kind: str = "plugin",
    ) -> None:
        """Make the skills under ``root`` (``root/<name>/SKILL.md``) available
        as source ``plugin``. Calling it again for ``plugin_id`` replaces the root."""
        if kind != "plugin":
            raise ValueError(f"only plugin skill sources can be added, not {kind!r}")
        self._plugins[plugin_id] = SkillRoot(
            kind="plugin",
            path=Path(root).absolute(),
            plugin_id=plugin_id,
            plugin_display_name=plugin_display_name or plugin_id,
        )

    def remove_source(self, plugin_id: str) -> None:
        """Forget a plugin's skills (the plugin was disabled or removed)."""
        self._plugins.pop(plugin_id, None)

    async def skills_under(
        self, root: Path, plugin_id: str, plugin_display_name: str | None = None
    ) -> list[skill_wire.SkillInfo]:
        """The skills in one plugin root, as wire objects (for ``PluginInfo.skills``),
        whether or not the plugin is currently a source."""
        source = SkillRoot("plugin", Path(root).absolute(), plugin_id, plugin_display_name)
        found = await anyio.to_thread.run_sync(catalog.scan, [source])
        disabled = await self.repo.disabled_keys()
        return [self.to_wire(skill, disabled) for skill in found]

    # --- discovery --------------------------------------------------------------

    def roots(self) -> list[SkillRoot]:
        """Skill roots, highest precedence first."""
        roots = [SkillRoot("workspace", self.workspace_root)]
        roots += [self._plugins[key] for key in sorted(self._plugins)]
        roots.append(SkillRoot("builtin", self.builtin_root))
        if self.user_root is not None:
            roots.append(SkillRoot("user", self.user_root))
        return roots

    async def catalog(self) -> list[Skill]:
        """Every effective skill, read fresh from disk."""
        return await anyio.to_thread.run_sync(catalog.scan, self.roots())

    async def find(self, name: str) -> Skill:
        """The effective skill called ``name`` or ``-32040``."""
        skill = await anyio.to_thread.run_sync(catalog.find, self.roots(), name)
        if skill is None:
            raise skill_not_found(name)
        return skill

    def to_wire(self, skill: Skill, disabled: set[str]) -> skill_wire.SkillInfo:
        """The wire ``SkillInfo`` of ``skill`` given the disabled names."""
        return skill_wire.SkillInfo(
            name=skill.name,
            description=skill.description,
            display_name=skill.interface.get("display_name"),
            short_description=skill.interface.get("short_description"),
            source=skill.source,
            plugin_id=skill.root.plugin_id,
            plugin_display_name=skill.root.plugin_display_name,
            available=skill.available,
            unavailable_reason=skill.unavailable_reason,
            enabled=skill_key(skill.name) not in disabled,
            path=str(skill.path),
            icon_small_data_url=skill.interface.get("icon_small"),
            icon_large_data_url=skill.interface.get("icon_large"),
            default_prompt=skill.interface.get("default_prompt"),
            metadata=skill.front.flat,
        )

    # --- handlers -----------------------------------------------------------------

    async def list_skills(
        self, ctx: RequestContext, params: skill_wire.SkillsListParams
    ) -> BaseModel:
        skills = await self.catalog()
        disabled = await self.repo.disabled_keys()
        if not params.include_unavailable:
            skills = [skill for skill in skills if skill.available]
        return skill_wire.SkillsListResult(
            skills=[self.to_wire(skill, disabled) for skill in skills]
        )

    async def read(self, ctx: RequestContext, params: skill_wire.SkillNameParams) -> BaseModel:
        skill = await self.find(params.name)
        metadata = skill.front.flat if skill.front.fields is not None else None
        return skill_wire.SkillsReadResult(
            name=skill.name, content=skill.content, metadata=metadata
        )

    async def view(self, ctx: RequestContext, params: skill_wire.SkillNameParams) -> BaseModel:
        skill = await self.find(params.name)
        return skill_wire.SkillsViewResult(name=skill.name, content=skill.front.body)

    async def restore_original(
        self, ctx: RequestContext, params: skill_wire.SkillNameParams
    ) -> BaseModel:
        # Skill variants are not implemented (skillVariants is never advertised),
        # so there is never a variant to restore.
        skill = await self.find(params.name)
        return skill_wire.SkillsRestoreOriginalResult(name=skill.name, restored=False)

    async def set_enabled(
        self, ctx: RequestContext, params: skill_wire.SkillsSetEnabledParams
    ) -> BaseModel:
        skill = await self.find(params.name)
        if await self.repo.set_enabled(skill.name, params.enabled):
            self._announce(ctx, "skills/setEnabled")
        disabled = await self.repo.disabled_keys()
        return skill_wire.SkillsSetEnabledResult(skill=self.to_wire(skill, disabled))

    async def uninstall(self, ctx: RequestContext, params: skill_wire.SkillNameParams) -> BaseModel:
        skill = await self.find(params.name)
        if skill.source not in UNINSTALLABLE:
            raise rpc_errors.invalid_params(
                f"Skill '{skill.name}' is {skill.source} and cannot be uninstalled directly."
            )
        await anyio.to_thread.run_sync(_remove_skill_dir, skill)
        await self.repo.forget(skill.name)
        self._announce(ctx, "skills/uninstall")
        return skill_wire.SkillsUninstallResult(
            name=skill.name,
            uninstalled=True,
            source=skill.source,
            removed_source_path=str(skill.directory),
            removed_variant_count=0,
        )

    def _announce(self, ctx: RequestContext, source: str) -> None:
        # After the response, so the caller sees its result first.
        ctx.after_response(lambda: self.server.announce_config_change(source, CONFIG_REGIONS))

    # --- skillRef -----------------------------------------------------------------

    async def resolve_skill_ref(self, part: SkillRefPart) -> Resolved:
        """``skillRef`` -> a ``[skill: name]`` marker in the message and the
        skill's body in the turn's system prompt."""
        name = part.name.strip().lstrip("$").strip()
        if not name:
            raise rpc_errors.invalid_params("skillRef: 'name' must not be empty")
        skill = await self.find(name)
        if skill_key(skill.name) in await self.repo.disabled_keys():
            raise rpc_errors.invalid_params(f"Skill '{skill.name}' is disabled in this workspace.")
        if not skill.available:
            raise rpc_errors.invalid_params(
                f"Skill '{skill.name}' is unavailable: {skill.unavailable_reason}"
            )
        return Resolved(
            parts=[{"type": "text", "text": f"[skill: {skill.name}]"}],
            instructions=[skill_instructions(skill)],
        )


def _remove_skill_dir(skill: Skill) -> None:
    """Delete a skill directory, never anything outside its root.

    A symlinked skill (``.craft/skills/x -> ~/src/x``) loses only its link.
    """
    root = skill.root.path
    entry = skill.directory
    if entry.parent != root or entry.name in ("", ".", ".."):
        raise _outside(skill)
    if entry.is_symlink():
        entry.unlink()
        return
    real = entry.resolve()
    if real.parent != root.resolve():
        raise _outside(skill)
    # rmtree refuses a path that became a symlink meanwhile and never follows
    # symlinks inside the tree.
    shutil.rmtree(real)


def _outside(skill: Skill) -> RpcError:
    return rpc_errors.invalid_params(
        f"Skill '{skill.name}' is outside the allowed {skill.source} skill root."
    )
