"""Writing skills and custom commands on disk for the skills/commands tests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from appserver.services.commands import USER_COMMANDS_ENV
from appserver.services.skills import USER_SKILLS_ENV


@dataclass
class UserRoots:
    """The per-test stand-ins for ``~/.craft/skills`` and ``~/.craft/commands``."""

    skills: Path
    commands: Path


def isolate_user_roots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> UserRoots:
    """Point the user skill/command roots at empty tmp dirs (inherited by stdio
    subprocesses through the environment), never at the real home directory."""
    roots = UserRoots(skills=tmp_path / "home-skills", commands=tmp_path / "home-commands")
    monkeypatch.setenv(USER_SKILLS_ENV, str(roots.skills))
    monkeypatch.setenv(USER_COMMANDS_ENV, str(roots.commands))
    return roots


def workspace_skills(workspace: Path) -> Path:
    return workspace / ".craft" / "skills"


def write_skill(root: Path, name: str, front: str | None = "", body: str = "Do it well.") -> Path:
    """``root/name/SKILL.md``; ``front`` is the YAML between the fences
    (``None``: no front matter at all). Returns the skill directory."""
    directory = root / name
    directory.mkdir(parents=True, exist_ok=True)
    if front is None:
        text = body + "\n"
    else:
        header = front if "description" in front else f"description: The {name} skill\n{front}"
        text = f"---\nname: {name}\n{header.rstrip()}\n---\n\n{body}\n"
    (directory / "SKILL.md").write_text(text, "utf-8")
    return directory


def write_command(root: Path, relative: str, text: str) -> Path:
    """``root/<relative>`` (e.g. ``review.md``, ``frontend/component.md``)."""
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, "utf-8")
    return path
