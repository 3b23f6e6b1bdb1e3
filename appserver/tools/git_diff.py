"""The diff of some workspace files, from git: what a commit of them would record.

:func:`changes_diff` runs ``git diff HEAD`` for the given paths, then adds each
untracked file among them as a new-file diff (``git diff --no-index /dev/null
FILE``, under a ``--- untracked: FILE ---`` line, as DotCraft's desktop shows
it), and cuts the whole to a number of characters. A repository without a
commit yet has no ``HEAD``: its files are all untracked, so they all come as
new files.

Git runs as the tools run commands: started whole in a process group of its
own (:func:`~appserver.tools.groups.open_group_process`), with the tools'
environment (no secrets), no pager, no external diff or text conversion
programs, no prompt for credentials and no optional locks; its stderr is read
beside its stdout (a chatty git cannot stall on a full pipe); each call has
:data:`GIT_SECONDS`, reads at most a byte budget, and its whole group is killed
on every way out that leaves it running (a cut, a timeout, the caller's
cancellation). Paths are passed as literal pathspecs, never as options or
patterns, and the server's state directory ``.craft`` is always excluded.
Git may still run programs a repository's own config names (``core.fsmonitor``):
callers run this only in a trusted workspace (docs/security.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from subprocess import DEVNULL, PIPE

import anyio

from appserver.tools.environment import tool_environment
from appserver.tools.groups import kill_process_group, open_group_process
from appserver.tools.sandbox import STATE_DIR

GIT_SECONDS = 30.0
GIT = ("git", "--no-pager", "-c", "core.quotePath=false")
DIFF_FLAGS = ("--no-color", "--no-ext-diff", "--no-textconv")
GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0", "GIT_PAGER": "cat"}
TRUNCATED = "\n\n[diff truncated]"
LIST_BUDGET = 1024 * 1024  # bytes of `git ls-files` output read
ERROR_BYTES = 2000  # of git's stderr kept for a message


class GitFailure(Exception):
    """Git could not be run, took too long, or refused (the message says which)."""


class NotARepository(GitFailure):
    """The workspace is not inside a git work tree."""


@dataclass(frozen=True)
class GitRun:
    """What one git command printed and how it ended."""

    output: str
    code: int
    cut: bool  # the output passed the budget and was not read further
    errors: str


async def run_git(workspace: Path, *args: str, budget: int) -> GitRun:
    """``git args`` in ``workspace``: at most ``budget`` bytes of its output.

    :class:`GitFailure` if git cannot start or runs past :data:`GIT_SECONDS`.
    """
    env = {**tool_environment(), **GIT_ENV}
    output = bytearray()
    errors = bytearray()
    code = -1
    with anyio.move_on_after(GIT_SECONDS) as timer:
        try:
            process = await open_group_process(
                [*GIT, *args], cwd=workspace, env=env, stdin=DEVNULL, stdout=PIPE, stderr=PIPE
            )
        except OSError as exc:
            raise GitFailure(f"git could not be started ({exc.strerror or exc})") from None
        stdout, stderr = process.stdout, process.stderr
        assert stdout is not None and stderr is not None

        async def read_errors() -> None:
            async for chunk in stderr:
                errors.extend(chunk[: max(0, ERROR_BYTES - len(errors))])

        try:
            async with anyio.create_task_group() as readers:
                readers.start_soon(read_errors)
                async for chunk in stdout:
                    output += chunk
                    if len(output) > budget:
                        # Enough: read no further (the group is killed below).
                        readers.cancel_scope.cancel()
                        break
            if len(output) <= budget:
                code = await process.wait()
        finally:
            with anyio.CancelScope(shield=True):
                if process.returncode is None:
                    await kill_process_group(process.pid, grace=0.5)
                await process.aclose()
    if timer.cancelled_caught:
        raise GitFailure(f"git {args[0]} took longer than {GIT_SECONDS:g} s")
    said = errors.decode(errors="replace").strip()
    cut = len(output) > budget
    return GitRun(bytes(output[:budget]).decode(errors="replace"), code, cut, said)


async def ensure_repository(workspace: Path) -> None:
    """:class:`NotARepository` unless ``workspace`` is in a git work tree."""
    found = await run_git(workspace, "rev-parse", "--is-inside-work-tree", budget=64)
    if found.code != 0 or found.output.strip() != "true":
        raise NotARepository(f"{workspace} is not in a git repository")


def _pathspecs(paths: Sequence[str]) -> list[str]:
    # Literal (no globs, no magic), and never the server's own state.
    return [f":(literal){path}" for path in paths] + [f":(exclude,literal){STATE_DIR}"]


async def changes_diff(workspace: Path, paths: Sequence[str], max_chars: int) -> str:
    """The diff of ``paths`` (workspace-relative) against ``HEAD``, untracked files
    as new files, cut to ``max_chars`` characters (plus a note); ``""`` when
    nothing changed. :class:`NotARepository` outside a git work tree."""
    await ensure_repository(workspace)
    budget = max_chars * 4 + 4  # UTF-8 bytes enough for max_chars characters, and a cut
    specs = _pathspecs(paths)
    tracked = await run_git(workspace, "diff", *DIFF_FLAGS, "HEAD", "--", *specs, budget=budget)
    # No HEAD yet (a repository without commits) fails with no output: nothing tracked.
    text = tracked.output
    listed = await run_git(
        workspace,
        "ls-files",
        "--others",
        "--exclude-standard",
        "-z",
        "--",
        *specs,
        budget=LIST_BUDGET,
    )
    names = listed.output.split("\0")
    if listed.cut:
        names = names[:-1]  # the last one may be cut short
    untracked = [name for name in names if name]
    for name in untracked:
        if len(text) > max_chars:
            break
        new_file = await run_git(
            workspace, "diff", *DIFF_FLAGS, "--no-index", "--", "/dev/null", name, budget=budget
        )
        text += f"--- untracked: {name} ---\n{new_file.output}"
        if not new_file.output.endswith("\n"):
            text += "\n"
    if len(text) > max_chars:
        text = text[:max_chars] + TRUNCATED
    return text
