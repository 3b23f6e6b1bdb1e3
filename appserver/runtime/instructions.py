"""What the model is told besides the conversation: the system prompt, the
environment it works in, and the project's instructions (``AGENTS.md``).

Every model request's system text is composed here, in this order:

1. the base prompt (:data:`~appserver.runtime.system_prompt.DEFAULT_SYSTEM_PROMPT`
   unless a face's ``--system-prompt`` replaced it);
2. the environment block: working directory, operating system, shell, date,
   the thread's approval policy and what the workspace boundary means;
3. the project instructions: the user's own ``AGENTS.md`` (in the user's
   appserver directory, outside any repository) first, then every
   ``AGENTS.md`` from the workspace root down to the turn's working
   directory, each headed by its path, so the deeper (more specific) file
   comes later and wins where they disagree. Together they are capped at
   :data:`INSTRUCTIONS_MAX_BYTES`; what does not fit is cut with a note;
4. the thread's ``agentInstructions`` and the turn's own instructions (a
   channel's or a face's), as before.

Files are re-read when they change (their size, mtime or inode), so an edit of
``AGENTS.md`` applies from the next model call. A project file is read only
when it is a regular file whose real path lies inside the workspace and not
in its ``.craft`` (``tools.sandbox.in_workspace``, the tools' own rule): a
checkout cannot make the server send, say, ``~/.ssh/id_rsa`` or the
workspace's ``.craft/config.json`` to the model provider by linking
``AGENTS.md`` to it.
"""

from __future__ import annotations

import datetime
import platform
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from appserver.startup import FileStamp, file_stamp

INSTRUCTIONS_FILE = "AGENTS.md"
INSTRUCTIONS_MAX_BYTES = 32 * 1024


@dataclass(frozen=True)
class InstructionFile:
    """One ``AGENTS.md`` as the model sees it."""

    path: Path
    scope: str  # "user" or "project"
    text: str  # possibly cut (see ``truncated``)
    truncated: bool = False


@dataclass(frozen=True)
class PromptSection:
    """One part of the system text, for ``prompt/read``."""

    # base, environment, projectInstructions, agentInstructions, turnInstructions
    kind: str
    text: str
    source: str | None = None  # the file a projectInstructions section came from
    truncated: bool = False  # a projectInstructions section cut to fit the cap


@dataclass(frozen=True)
class Environment:
    """The facts of the environment block."""

    cwd: Path
    workspace: Path
    approval_policy: str
    ask_outside_workspace: bool = True
    shell: str = "bash"
    today: datetime.date | None = None  # None: today, local time
    # The SubAgent profiles SpawnAgent may name (runtime/subagent_prompt.py), if any.
    subagent_profiles: str | None = None

    def render(self) -> str:
        """The block, as plain lines the model reads at the top of its context."""
        today = self.today or datetime.date.today()
        where = "the workspace root" if self.cwd == self.workspace else f"inside {self.workspace}"
        policy = _POLICIES.get(self.approval_policy, self.approval_policy)
        outside = (
            "files and directories outside it need the user's approval"
            if self.ask_outside_workspace
            else "files and directories outside it are refused"
        )
        lines = [
            "# Environment",
            f"- Working directory: {self.cwd} ({where})",
            f"- Workspace: {self.workspace}; {outside}.",
            f"- Operating system: {platform.system()} {platform.release()} ({platform.machine()})",
            f"- Shell: `{self.shell}` (the `shell` tool runs `{self.shell} -c <command>` "
            "in the working directory)",
            f"- Date: {today.isoformat()}",
            f"- Approval policy: {self.approval_policy}: {policy}",
        ]
        if self.subagent_profiles:
            lines.append(f"- {self.subagent_profiles}")
        return "\n".join(lines)


_POLICIES = {
    "default": "commands that change things, file writes and network access wait for the "
    "user's approval; read-only commands and searches run at once",
    "autoApprove": "tool calls inside the workspace run without asking",
    "interrupt": "a tool call that needs approval ends the turn instead of asking",
}


@dataclass(frozen=True)
class _Cached:
    key: FileStamp  # the file as read (modification time, size, inode)
    text: str
    truncated: bool


class ProjectInstructions:
    """The ``AGENTS.md`` files for a working directory, cached until they change.

    ``user_file``: where the user's own file is, asked on each call (the
    user's appserver directory may change, e.g. per test); ``None`` for none.
    ``project``: read the workspace's files (zot's ``--no-context-files`` turns
    both off).
    """

    def __init__(
        self,
        workspace: Path,
        user_file: Callable[[], Path | None],
        max_bytes: int = INSTRUCTIONS_MAX_BYTES,
        project: bool = True,
    ) -> None:
        self.workspace = workspace.resolve()
        self.user_file = user_file
        self.project = project  # False: the workspace's own files are not read
        self.max_bytes = max_bytes
        self._cache: dict[Path, _Cached] = {}

    def files(self, cwd: Path | None = None) -> list[InstructionFile]:
        """The files that apply in ``cwd`` (default: the workspace root), in
        order, cut to fit :attr:`max_bytes` together."""
        found: list[tuple[Path, str]] = []
        user = self.user_file()
        if user is not None:
            found.append((user, "user"))
        if self.project:
            found.extend((path, "project") for path in self._project_paths(cwd))
        budget = self.max_bytes
        result: list[InstructionFile] = []
        for path, scope in found:
            cached = self._read(path, inside=self.workspace if scope == "project" else None)
            if cached is None or not cached.text.strip():
                continue
            text, cut = _fit(cached.text, budget)
            budget -= len(text.encode())
            truncated = cut > 0 or cached.truncated
            if truncated:
                text = (text + "\n" if text else "") + _left_out(
                    path, self.max_bytes, whole=not text
                )
            result.append(InstructionFile(path, scope, text, truncated))
        return result

    def _project_paths(self, cwd: Path | None) -> Iterable[Path]:
        """``AGENTS.md`` in the workspace root and each directory down to ``cwd``."""
        directory = self.workspace
        yield directory / INSTRUCTIONS_FILE
        if cwd is None or cwd == directory:
            return  # the root itself (already resolved): no lstat of each part
        try:
            relative = cwd.resolve().relative_to(self.workspace)
        except ValueError:
            return  # a working directory outside the workspace adds nothing
        for part in relative.parts:
            directory = directory / part
            yield directory / INSTRUCTIONS_FILE

    def _read(self, path: Path, inside: Path | None) -> _Cached | None:
        key = file_stamp(str(path))  # follows a link: checked against ``inside`` below
        if key is None:
            self._cache.pop(path, None)
            return None
        cached = self._cache.get(path)
        if cached is not None and cached.key == key:
            return cached
        if inside is not None and not _within(path, inside):
            return None
        try:
            with open(path, "rb") as handle:
                data = handle.read(self.max_bytes + 1)
        except OSError:
            return None
        if not data or b"\x00" in data[:8192]:
            return None
        truncated = len(data) > self.max_bytes
        text = data[: self.max_bytes].decode("utf-8", errors="ignore").replace("\r\n", "\n")
        cached = _Cached(key, text, truncated)
        self._cache[path] = cached
        return cached


def _within(path: Path, root: Path) -> bool:
    """``path`` is a regular file whose real path is in the workspace ``root``
    (not in its ``.craft``)."""
    from appserver.tools.sandbox import in_workspace

    try:
        real = path.resolve(strict=True)
    except OSError:
        return False
    return real.is_file() and in_workspace(root, real)


def _fit(text: str, budget: int) -> tuple[str, int]:
    """``text`` cut to ``budget`` UTF-8 bytes (at a line end where one is
    near), and how many bytes were cut."""
    data = text.encode()
    if len(data) <= budget:
        return text, 0
    if budget <= 0:
        return "", len(data)
    kept = data[:budget].decode("utf-8", errors="ignore")
    newline = kept.rfind("\n")
    if newline > len(kept) // 2:
        kept = kept[: newline + 1]
    return kept, len(data) - len(kept.encode())


def _left_out(path: Path, limit: int, whole: bool) -> str:
    what = f"{path}" if whole else f"the rest of {path}"
    return f"[... {what} left out: project instructions are capped at {limit // 1024} KiB in all]"


def render_instructions(files: Iterable[InstructionFile]) -> list[PromptSection]:
    """Each file as a section headed by its path."""
    sections = []
    for file in files:
        if file.scope == "user":
            heading = f"# The user's instructions ({file.path})"
        else:
            heading = f"# Project instructions from {file.path}"
        text = f"{heading}\n\n{file.text.strip()}"
        sections.append(
            PromptSection("projectInstructions", text, str(file.path), truncated=file.truncated)
        )
    return sections


def compose(
    base: str,
    environment: Environment,
    files: Iterable[InstructionFile],
    agent_instructions: str | None = None,
    turn_instructions: Iterable[str] = (),
    role_instructions: str | None = None,
) -> list[PromptSection]:
    """The system text's sections, in the order the model reads them
    (``role_instructions``: a SubAgent child's role)."""
    sections = [PromptSection("base", base), PromptSection("environment", environment.render())]
    sections.extend(render_instructions(files))
    if agent_instructions:
        sections.append(PromptSection("agentInstructions", agent_instructions))
    if role_instructions:
        sections.append(PromptSection("roleInstructions", role_instructions))
    sections.extend(PromptSection("turnInstructions", extra) for extra in turn_instructions)
    return sections


def system_text(sections: Iterable[PromptSection]) -> str:
    """The sections joined as one system prompt."""
    return "\n\n".join(section.text for section in sections if section.text)
