"""The slash commands a workspace knows: fixed built-ins and custom Markdown
commands, and how a custom command's body becomes a prompt.

Custom commands are ``*.md`` files under the workspace's ``.craft/commands``
and the user's ``~/.craft/commands`` (the workspace wins a name). A file in a
subdirectory gets a namespaced name: ``frontend/component.md`` is
``/frontend:component``. Optional front matter: ``description``,
``argument-hint``, ``requiresAdmin``. The body may use ``$ARGUMENTS`` (the
whole argument text) and ``$1``, ``$2``, ... (whitespace-separated words).
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from appserver.services.skills.frontmatter import FrontMatter, parse_front_matter

log = logging.getLogger("appserver.commands")

MAX_COMMAND_BYTES = 256 * 1024
_PLACEHOLDER = re.compile(r"\$ARGUMENTS|\$(\d+)")
_NAME = re.compile(r"^[^\s/]+$")  # one word: "/name args" must be parseable


@dataclass(frozen=True)
class BuiltinCommand:
    """A command the server itself implements."""

    name: str  # "/new"
    descriptions: dict[str, str]  # language -> description
    aliases: tuple[str, ...] = ()
    requires_admin: bool = False
    # The capability flag of the service the command drives; the command is
    # hidden (and answers -32062) while that service is off.
    capability: str | None = None

    def description(self, language: str | None) -> str:
        return self.descriptions.get((language or "en").lower(), self.descriptions["en"])


BUILTINS: tuple[BuiltinCommand, ...] = (
    BuiltinCommand(
        "/new",
        {
            "en": "Start a new conversation (a fresh thread with the same identity)",
            "zh": "开始新会话(以相同身份创建新线程)",
        },
    ),
    BuiltinCommand(
        "/stop",
        {"en": "Stop the turn that is running on this thread", "zh": "停止当前线程正在运行的回合"},
    ),
    BuiltinCommand(
        "/help",
        {"en": "List the available commands", "zh": "列出可用命令"},
    ),
    BuiltinCommand(
        "/cron",
        {"en": "List scheduled cron jobs", "zh": "查看定时任务列表"},
        capability="cronManagement",
    ),
    BuiltinCommand(
        "/heartbeat",
        {"en": "Run the heartbeat check now", "zh": "立即触发心跳检查"},
        capability="heartbeatManagement",
    ),
)


def builtin(name: str) -> BuiltinCommand | None:
    """The built-in called ``name`` (``/new`` or ``new``; aliases count)."""
    wanted = command_name(name)
    for command in BUILTINS:
        if wanted == command.name or wanted in command.aliases:
            return command
    return None


def command_name(token: str) -> str:
    """``"New"``, ``"/new"`` -> ``"/new"`` (commands match case-insensitively)."""
    return "/" + token.strip().lstrip("/").lower()


@dataclass(frozen=True)
class CustomCommand:
    """A Markdown command file."""

    name: str  # "/review", "/frontend:component"
    path: Path
    source: str  # "workspace" | "user"
    front: FrontMatter

    @property
    def description(self) -> str:
        """Front matter ``description``, else the body's first line, else a placeholder."""
        described = self.front.text("description")
        if described:
            return described
        for line in self.front.body.splitlines():
            text = line.strip().lstrip("#").strip()
            if text:
                return text if len(text) <= 100 else text[:99] + "…"
        return "(no description)"

    @property
    def argument_hint(self) -> str | None:
        return (
            self.front.text("argument-hint")
            or self.front.text("argumentHint")
            or self.front.text("argument_hint")
        )

    @property
    def requires_admin(self) -> bool:
        return self.front.flag("requiresAdmin") or self.front.flag("requires-admin")

    def expand(self, args_text: str) -> str:
        """The prompt this command stands for, given its argument text."""
        return expand(self.front.body, args_text)


def expand(body: str, args_text: str) -> str:
    """Substitute ``$ARGUMENTS`` and ``$N`` in one pass (so arguments that
    themselves contain ``$1`` are left alone). Unmatched ``$N`` become empty.
    A body without any placeholder gets the arguments appended, so they are
    never silently dropped."""
    args_text = args_text.strip()
    words = args_text.split()

    def substitute(match: re.Match[str]) -> str:
        if match.group(1) is None:
            return args_text
        index = int(match.group(1))
        return words[index - 1] if 1 <= index <= len(words) else ""

    if args_text and _PLACEHOLDER.search(body) is None:
        return f"{body.strip()}\n\n{args_text}".strip()
    return _PLACEHOLDER.sub(substitute, body).strip()


def scan_custom(roots: list[tuple[str, Path]]) -> dict[str, CustomCommand]:
    """Custom commands by name; later roots override earlier ones."""
    found: dict[str, CustomCommand] = {}
    for source, root in roots:
        for name, path in _command_files(root):
            command = _load(name, path, source)
            if command is not None:
                found[command.name] = command
    return found


def _command_files(root: Path) -> list[tuple[str, Path]]:
    files: list[tuple[str, Path]] = []
    inside = root.resolve()
    # os.walk does not follow symlinked directories: no loops, no escaping the root.
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
        base = Path(directory)
        prefix = base.relative_to(root).parts
        for filename in sorted(names):
            stem, dot, ext = filename.rpartition(".")
            if not dot or ext.lower() != "md" or not stem or stem.startswith("."):
                continue
            name = ":".join((*prefix, stem)).lower()
            # Nor does a file: a link must stay in the root and name a regular file
            # (a checkout's .craft/commands/x.md -> ~/.ssh/id_rsa is not read).
            real = (base / filename).resolve()
            if _NAME.match(name) and real.is_relative_to(inside) and real.is_file():
                files.append((name, real))
    return files


def _load(name: str, path: Path, source: str) -> CustomCommand | None:
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_COMMAND_BYTES + 1)
    except OSError as exc:
        log.warning("skipping command %s: %s", path, exc)
        return None
    if len(data) > MAX_COMMAND_BYTES:
        log.warning("skipping command %s: larger than %d bytes", path, MAX_COMMAND_BYTES)
        return None
    front = parse_front_matter(data.decode("utf-8", errors="replace"))
    return CustomCommand(name="/" + name, path=path, source=source, front=front)
