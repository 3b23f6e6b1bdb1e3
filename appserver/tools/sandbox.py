"""Workspace sandbox: where a path argument really points.

Every path a tool touches goes through :meth:`Sandbox.resolve`. Resolution
follows symlinks (``os.path.realpath``), so a link inside the workspace that
points outside is reported as outside, and a path that does not exist yet is
judged by where its existing parent really is. The server's own state,
``<workspace>/.craft``, counts as outside. The sandbox never refuses a path
for being outside: it reports ``inside`` and the approval flow decides.

:func:`in_workspace` is the one rule of "inside": the tools use it through
:meth:`Sandbox.resolve`, and so do the turn's input parts (``fileRef``,
``localImage`` in ``runtime.inputs``). Resolving is not opening: the tools
open what they resolved without following links (``tools.nofollow``), so a
link swapped in after the check fails the call.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from appserver.tools.base import ToolError


@dataclass(frozen=True)
class ResolvedPath:
    """An absolute, symlink-free path and whether it lies in the workspace."""

    path: Path
    inside: bool


# The server's own state inside the workspace (database, config with API keys,
# plugins, skills): for the tools it lies outside, so the model reaches it only
# through an approval that names the path.
STATE_DIR = ".craft"


def in_workspace(root: Path, resolved: Path) -> bool:
    """Whether ``resolved`` lies in the workspace ``root`` (both absolute and
    symlink-free) and not in its state directory ``.craft`` (database, config
    with API keys, plugins): the one rule for tools and input parts alike."""
    return resolved.is_relative_to(root) and not resolved.is_relative_to(root / STATE_DIR)


class Sandbox:
    """Resolves tool path arguments against one workspace directory."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace

    @property
    def root(self) -> Path:
        """The workspace with symlinks resolved (what ``inside`` compares against)."""
        # Resolved on every use rather than once: the workspace may be created
        # or re-pointed after the sandbox was built.
        return Path(os.path.realpath(self.workspace))

    def resolve(self, path: str, *, must_exist: bool = False) -> ResolvedPath:
        """Resolve ``path`` (relative paths are relative to the workspace).

        ``~`` is not expanded: a model writing ``~/x`` gets ``<workspace>/~/x``
        instead of silently reaching into the server user's home directory.
        Raises :class:`ToolError` for an empty path, a NUL byte, or (with
        ``must_exist``) a path that does not exist.
        """
        if not path:
            raise ToolError("path must not be empty")
        if "\0" in path:
            raise ToolError("path must not contain NUL bytes")
        root = self.root
        # os.path.join keeps an absolute ``path`` as is. realpath resolves the
        # existing prefix and appends the missing tail, so a new file under a
        # symlinked directory lands where the link really points.
        resolved = Path(os.path.realpath(os.path.join(root, path)))
        if must_exist and not os.path.exists(resolved):
            raise ToolError(f"{path}: no such file or directory")
        return ResolvedPath(path=resolved, inside=in_workspace(root, resolved))

    def display(self, resolved: ResolvedPath) -> str:
        """How a path is shown to the model: workspace-relative when inside."""
        if resolved.inside:
            relative = resolved.path.relative_to(self.root)
            return relative.as_posix() if relative.parts else "."
        return str(resolved.path)
