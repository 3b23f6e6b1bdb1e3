"""The ``skills`` family: discovery, ``skills/*`` and ``skillRef`` input parts.

``install`` attaches the :class:`SkillsService` as ``server.skills``. Other
families reach it with :func:`skills_of` (typed, ``None`` when skills are
off). Plugins contribute their skills with::

    skills = skills_of(server)
    if skills is not None:
        skills.add_source(root=plugin_dir / "skills", plugin_id="review-tools",
                          plugin_display_name="Review Tools")
        ...
        skills.remove_source("review-tools")   # plugin disabled or removed

The user skills root is ``$APPSERVER_USER_SKILLS_DIR`` when set, else
``~/.craft/skills`` (read once at install; tests point it at a tmp dir).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from appserver.services.skills.service import SkillsService

if TYPE_CHECKING:
    from appserver.services.context import FamilyContext

USER_SKILLS_ENV = "APPSERVER_USER_SKILLS_DIR"

__all__ = ["USER_SKILLS_ENV", "SkillsService", "install", "skills_of", "user_skills_root"]


def user_skills_root() -> Path | None:
    """``$APPSERVER_USER_SKILLS_DIR`` or ``~/.craft/skills`` (``None`` without a home)."""
    configured = os.environ.get(USER_SKILLS_ENV)
    if configured:
        return Path(configured).expanduser().absolute()
    try:
        return Path.home() / ".craft" / "skills"
    except RuntimeError:
        return None


def skills_of(server: FamilyContext) -> SkillsService | None:
    """The server's skills service, if the family is installed."""
    service = getattr(server, "skills", None)
    return service if isinstance(service, SkillsService) else None


def install(server: FamilyContext) -> None:
    """Serve ``skills/*``, resolve ``skillRef`` parts, expose ``server.skills``."""
    service = SkillsService(server, user_skills_root())
    service.register(server.router)
    server.runtime.materializer.resolvers["skillRef"] = service.resolve_skill_ref
    server.skills = service
