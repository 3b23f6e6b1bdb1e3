"""What the file tools (``tools.files``, ``tools.file_writes``) share: the
plan they build, their failures, and opening a planned path.

A plan holds the path as resolved once (``Sandbox.resolve``), which is what
the approval showed; the run opens exactly that path, never following a
symlink (``tools.nofollow``), so a link swapped in meanwhile fails the call.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, BinaryIO

from appserver.tools.base import ApprovalNeed, ToolOutcome, ToolPlan
from appserver.tools.nofollow import PathChanged, open_regular
from appserver.tools.sandbox import ResolvedPath, Sandbox

# A NUL byte in the first few KiB is the usual (git, grep) binary-file test.
BINARY_SNIFF_BYTES = 8192

PATH_DESCRIPTION = (
    "Path of the file. Relative paths are relative to the workspace root; '~' is not expanded."
)


class FileFailure(Exception):
    """Raised inside a worker thread; becomes ``ToolOutcome(success=False)``."""


def resolved_plan(
    tool: str,
    arguments: dict[str, Any],
    sandbox: Sandbox,
    target: ResolvedPath,
    approval: ApprovalNeed | None,
    **extra: Any,
) -> ToolPlan:
    """The plan of a file tool: the resolved path, how it is shown, and ``extra``."""
    resolved: dict[str, Any] = {
        "path": target.path,
        "display": sandbox.display(target),
        "inside": target.inside,
    }
    resolved.update(extra)
    return ToolPlan(tool=tool, arguments=arguments, approval=approval, resolved=resolved)


def outside_note(target: ResolvedPath) -> str:
    return "" if target.inside else " (outside the workspace)"


def os_failure(action: str, display: str, exc: OSError) -> ToolOutcome:
    reason = exc.strerror or str(exc)
    return ToolOutcome(success=False, output=f"cannot {action} {display}: {reason}")


def open_planned(path: Path, flags: int = os.O_RDONLY) -> BinaryIO:
    """The regular file at ``path`` (as planned) opened without following
    links; a link on the way is a :class:`FileFailure`."""
    try:
        fd = open_regular(path, flags)
    except PathChanged as exc:
        raise FileFailure(str(exc)) from None
    access = flags & os.O_ACCMODE
    if access == os.O_RDONLY:
        return open(fd, "rb")
    if access == os.O_WRONLY:
        return open(fd, "wb")  # on a descriptor: truncates nothing by itself
    return open(fd, "r+b")
