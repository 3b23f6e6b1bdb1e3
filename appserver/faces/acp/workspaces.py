"""The workspaces one ACP process serves: the one it started in, and any other
directory a session's ``cwd`` names (editors with several roots, ``acpx --cwd``).

A ``cwd`` inside a workspace already open belongs to it (the innermost one);
any other absolute directory becomes a workspace of its own, opened the way
the process opened its first (``hosting.open_host``: its own lock, database,
trust and runtime), lazily, once, and kept until the process ends. Each
runtime lives in a task of this object's task group, because a runtime's
context (its task group) must be left by the task that entered it, and a
request handler's task ends with its answer.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskGroup, TaskStatus

if TYPE_CHECKING:
    from appserver.runtime.host import Runtime

# Opens the runtime of another directory (the process's host options, that workspace).
WorkspaceOpener = Callable[[Path], AbstractAsyncContextManager["Runtime"]]


class CwdError(Exception):
    """A session's ``cwd`` names no directory a workspace could be opened in."""


class WorkspaceUnavailable(Exception):
    """Opening the ``cwd``'s workspace failed (another process holds it
    exclusively, its database is unreadable, ...); the message says why."""


@dataclass(frozen=True)
class Place:
    """One open workspace: its root and its runtime."""

    root: Path
    runtime: Runtime


class Workspaces:
    """The open workspaces of this process, by root; opens more on demand."""

    def __init__(self, first: Place, opener: WorkspaceOpener, tasks: TaskGroup) -> None:
        self.first = first
        self._opener = opener
        self._tasks = tasks
        self._places: dict[Path, Place] = {first.root: first}
        self._opening = anyio.Lock()  # one opening at a time: each directory opens once
        self._closing = anyio.Event()

    def opened(self) -> list[Place]:
        """Every open workspace, the first one first."""
        return list(self._places.values())

    def find(self, cwd: str) -> tuple[Path, Place | None]:
        """``cwd`` resolved, and the open workspace it lies in (``None``: none).

        Raises :class:`CwdError` for a relative or unusable path."""
        if not os.path.isabs(cwd):
            raise CwdError(f"cwd must be an absolute path: {cwd!r}")
        try:
            resolved = Path(cwd).resolve()
        except (OSError, ValueError) as exc:
            raise CwdError(f"cwd {cwd!r} cannot be used: {exc}") from None
        inside = [root for root in self._places if resolved.is_relative_to(root)]
        if not inside:
            return resolved, None
        return resolved, self._places[max(inside, key=lambda root: len(root.parts))]

    async def place(self, cwd: str, *, create: bool = True) -> Place | None:
        """The workspace a session in ``cwd`` runs in, opened if need be.

        Without ``create`` (listing, loading), a directory that holds no
        workspace database yet is not opened: ``None``. Raises
        :class:`CwdError` or :class:`WorkspaceUnavailable`."""
        resolved, found = self.find(cwd)
        if not resolved.is_dir():  # inside a workspace or not (docs: an existing directory)
            raise CwdError(f"cwd {cwd} is not a directory")
        if found is not None:
            return found
        if not create and not (resolved / ".craft" / "appserver.db").is_file():
            return None
        async with self._opening:
            found = self._places.get(resolved)
            if found is None:
                try:
                    runtime = await self._tasks.start(self._keep, resolved)
                except Exception as exc:  # told to the client; a later session may retry
                    raise WorkspaceUnavailable(
                        f"cannot open workspace {resolved}: {_reason(exc)}"
                    ) from exc
                found = self._places[resolved] = Place(resolved, runtime)
            return found

    async def _keep(self, root: Path, *, task_status: TaskStatus[Runtime]) -> None:
        """Hold ``root``'s runtime open until :meth:`close`."""
        async with self._opener(root) as runtime:
            task_status.started(runtime)
            await self._closing.wait()

    def close(self) -> None:
        """Let the workspaces opened on demand shut down (the process is ending)."""
        self._closing.set()


def _reason(exc: BaseException) -> str:
    from appserver.storage.failures import disk_failure

    return disk_failure(exc) or str(exc) or type(exc).__name__
