"""Finding skills on disk: sources, precedence and availability.

A skill is a directory holding ``SKILL.md``; its name is the directory name.
Roots are searched in precedence order (workspace ``.craft/skills``, enabled
plugins, the built-in skills shipped in this package, the user's
``~/.craft/skills``) and the first skill of a name wins; names match
case-insensitively. DotCraft's spec disagrees with itself here (its §18.1
table ranks built-ins first, its §18.3 text and its code rank the workspace
first); we follow the text and code, so a workspace can always override a
built-in. Everything here is synchronous file work: callers run it in a
worker thread.
"""

from __future__ import annotations

import base64
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appserver.services.skills.frontmatter import FrontMatter, parse_front_matter

log = logging.getLogger("appserver.skills")

SKILL_FILE = "SKILL.md"
MAX_SKILL_BYTES = 1024 * 1024  # larger SKILL.md files are skipped, not truncated
MAX_ICON_BYTES = 512 * 1024
_ICON_TYPES = {
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".webp": "image/webp",
}
BUILTIN_ROOT = Path(__file__).resolve().parents[2] / "builtin" / "skills"


@dataclass(frozen=True)
class SkillRoot:
    """A directory whose subdirectories are skills, and where it comes from."""

    kind: str  # "workspace" | "plugin" | "builtin" | "user"
    path: Path
    plugin_id: str | None = None
    plugin_display_name: str | None = None


@dataclass
class Skill:
    """One skill as found on disk."""

    name: str
    directory: Path
    root: SkillRoot
    content: str  # raw SKILL.md
    front: FrontMatter
    missing: list[str] = field(default_factory=list)  # unmet requirements, readable
    interface: dict[str, str] = field(default_factory=dict)  # from agents/openai.yaml

    @property
    def path(self) -> Path:
        return self.directory / SKILL_FILE

    @property
    def source(self) -> str:
        return self.root.kind

    @property
    def description(self) -> str:
        return self.front.text("description") or self.name

    @property
    def available(self) -> bool:
        return not self.missing

    @property
    def unavailable_reason(self) -> str | None:
        return "Missing requirements: " + ", ".join(self.missing) if self.missing else None


def scan(roots: list[SkillRoot]) -> list[Skill]:
    """Every effective skill (first root wins a name), sorted by name."""
    found: dict[str, Skill] = {}
    for root in roots:
        for directory in _skill_dirs(root.path):
            key = directory.name.lower()
            if key in found:
                continue  # shadowed by a higher-precedence source
            skill = load_skill(directory, root)
            if skill is not None:
                found[key] = skill
    return sorted(found.values(), key=lambda skill: skill.name.lower())


def find(roots: list[SkillRoot], name: str) -> Skill | None:
    """The effective skill called ``name`` (case-insensitive), if any."""
    key = name.lower()
    return next((skill for skill in scan(roots) if skill.name.lower() == key), None)


def _skill_dirs(root: Path) -> list[Path]:
    try:
        children = sorted(root.iterdir())
    except OSError:
        return []  # a missing root is simply empty
    return [
        child
        for child in children
        if not child.name.startswith(".") and child.is_dir() and _skill_file(child) is not None
    ]


def _skill_file(directory: Path) -> Path | None:
    """The skill's SKILL.md, when it is a regular file inside the skill's own
    directory (followed, if a link): a checkout's ``SKILL.md -> ~/.ssh/id_rsa``
    is not read."""
    real = (directory / SKILL_FILE).resolve()
    return real if real.is_relative_to(directory.resolve()) and real.is_file() else None


def load_skill(directory: Path, root: SkillRoot) -> Skill | None:
    """Read one skill directory; ``None`` (logged) if SKILL.md is unusable."""
    path = _skill_file(directory)
    if path is None:
        log.warning("skipping skill %s: no %s of its own", directory, SKILL_FILE)
        return None
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_SKILL_BYTES + 1)
    except OSError as exc:
        log.warning("skipping skill %s: %s", directory, exc)
        return None
    if len(data) > MAX_SKILL_BYTES:
        log.warning(
            "skipping skill %s: SKILL.md is larger than %d bytes", directory, MAX_SKILL_BYTES
        )
        return None
    content = data.decode("utf-8", errors="replace")
    front = parse_front_matter(content)
    return Skill(
        name=directory.name,
        directory=directory,
        root=root,
        content=content,
        front=front,
        missing=missing_requirements(front),
        interface=_interface(directory),
    )


def missing_requirements(front: FrontMatter) -> list[str]:
    """Unmet ``bins`` (executables on PATH) and ``env`` (non-empty variables).

    Both may be a YAML list or a comma-separated string, at the top level or
    under ``requires:``.
    """
    bins = front.names("bins")
    env = front.names("env")
    requires = front.get("requires")
    if isinstance(requires, dict):
        inner = FrontMatter(fields={str(k): v for k, v in requires.items()}, body="")
        bins += inner.names("bins")
        env += inner.names("env")
    missing = [f"Executable: {name}" for name in bins if shutil.which(name) is None]
    missing += [f"Environment variable: {name}" for name in env if not os.environ.get(name)]
    return missing


def _interface(directory: Path) -> dict[str, str]:
    """Codex-style display metadata from ``agents/openai.yaml`` (absent if unusable)."""
    manifest = directory / "agents" / "openai.yaml"
    import yaml  # here: a session without skills never pays for it

    try:
        parsed = yaml.safe_load(manifest.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    section = parsed.get("interface") if isinstance(parsed, dict) else None
    if not isinstance(section, dict):
        return {}
    result: dict[str, str] = {}
    for key in ("display_name", "short_description", "default_prompt"):
        value = section.get(key)
        if isinstance(value, str) and value.strip():
            result[key] = value.strip()
    for key in ("icon_small", "icon_large"):
        icon = _icon_data_url(directory, section.get(key))
        if icon is not None:
            result[key] = icon
    return result


def _icon_data_url(directory: Path, relative: Any) -> str | None:
    """A ``data:`` URL for an icon file inside the skill directory, else ``None``."""
    if not isinstance(relative, str) or not relative.strip() or os.path.isabs(relative):
        return None
    base = directory.resolve()
    path = (base / relative.strip()).resolve()
    mime = _ICON_TYPES.get(path.suffix.lower())
    if mime is None or not path.is_relative_to(base):
        return None  # never read files outside the skill (../../secret.png)
    try:
        size = path.stat().st_size
        if not 0 < size <= MAX_ICON_BYTES:
            return None
        data = path.read_bytes()
    except OSError:
        return None
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"
