"""``apply_patch``: add, delete, update and move files with one patch in Codex's format.

The format and how hunks are matched live in ``tools.patch_format``. The plan
parses the patch, resolves every path through the workspace sandbox, reads
each file it touches once (bounded, no link followed: ``tools.file_snapshot``)
and computes every file's result, so a hunk that does not apply, a file to
update or delete that is missing, a file to add (or a move's destination) that
exists, a binary or oversized file, or a path named twice fails the call
before anyone is asked. The approval is one ``file`` need, operation
``patch``, whose diff is the whole patch as unified diffs with git headers.

The run is all or nothing (``tools.patch_files``): every file must still be
what the plan read, then each is written through the race-safe opening that
``write_file`` uses; if a write fails, the files already changed are put
back.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.to_thread

from appserver.tools.args import check_keys, require_str
from appserver.tools.base import ApprovalNeed, ToolContext, ToolError, ToolOutcome, ToolPlan
from appserver.tools.file_common import FileFailure
from appserver.tools.file_diff import DIFF_MAX_BYTES, path_label, unified_diff
from appserver.tools.file_snapshot import links_note, read_snapshot
from appserver.tools.patch_files import FileChange, apply_changes
from appserver.tools.patch_format import (
    AddFile,
    DeleteFile,
    FileOperation,
    PatchError,
    apply_hunks,
    parse_patch,
)
from appserver.tools.sandbox import ResolvedPath, Sandbox

PATCH_MAX_BYTES = 1024 * 1024
# The approval shows every file's diff (each bounded by file_diff); the whole is cut here.
PATCH_DIFF_MAX_BYTES = 4 * DIFF_MAX_BYTES

DESCRIPTION = """\
Edit files with a patch. `input` is the whole patch:
*** Begin Patch
*** Add File: <path>      (every following line starts with +)
*** Delete File: <path>
*** Update File: <path>
*** Move to: <new path>   (optional, right after Update File)
@@ <a line just above the change, e.g. the class or def; or @@ alone>
 context line (starts with a space)
-removed line
+added line
*** End Patch
Paths are relative to the workspace. Show about 3 lines of context above and below \
each change; when that is not unique, name the enclosing class or function with @@ \
(several @@ lines narrow it step by step). Context and removed lines must match the \
file. End a hunk with "*** End of File" when its lines end the file. The patch applies \
all or nothing."""

_KIND_LETTERS = {"add": "A", "update": "M", "delete": "D", "move": "R"}


@dataclass(frozen=True)
class _Planned:
    """One file of the patch: what the approval shows and what the run writes."""

    change: FileChange
    diff: str
    note: str  # for the approval's reason: "add a.txt", "move a -> b", ...


def _resolve(sandbox: Sandbox, name: str) -> tuple[ResolvedPath, str]:
    target = sandbox.resolve(name)
    return target, sandbox.display(target)


def _refuse_link(sandbox: Sandbox, name: str, action: str) -> None:
    """Deleting or moving a symlink would act on what it points to: refused."""
    if Path(os.path.join(sandbox.root, name)).is_symlink():
        raise ToolError(f"cannot {action} {name}: it is a symbolic link (use shell for links)")


def _read_text(target: ResolvedPath, shown: str, action: str) -> tuple[str, int, int]:
    """The text of an existing file to change, its hard-link count and mode."""
    if os.path.isdir(target.path):
        raise ToolError(f"cannot {action} {shown}: it is a directory")
    snapshot = read_snapshot(target.path)
    if not snapshot.exists:
        raise ToolError(f"cannot {action} {shown}: the file does not exist")
    if snapshot.text is None:
        raise ToolError(f"cannot {action} {shown}: {snapshot.why}")
    try:
        mode = stat.S_IMODE(os.stat(target.path).st_mode)
    except OSError as exc:
        raise ToolError(f"cannot {action} {shown}: {exc.strerror}") from None
    return snapshot.text, snapshot.links, mode


def _refuse_existing(target: ResolvedPath, shown: str, what: str) -> None:
    if os.path.lexists(target.path):
        raise ToolError(
            f"cannot {what} {shown}: it already exists. Update it, or delete it first "
            "in its own patch."
        )


def _git_diff(kind: str, shown: str, before: str | None, after: str | None, **more: Any) -> str:
    """One file's diff with git's headers (``diff --git``, new/deleted file, rename)."""
    new_shown: str = more.get("new_shown", shown)
    mode: int = more.get("mode", 0o644)
    git_mode = "100755" if mode & 0o111 else "100644"
    head = f"diff --git {path_label('a', shown)} {path_label('b', new_shown)}\n"
    if kind == "add":
        head += f"new file mode {git_mode}\n"
    elif kind == "delete":
        head += f"deleted file mode {git_mode}\n"
    elif kind == "move":
        head += f"rename from {shown}\nrename to {new_shown}\n"
        if before == after:
            return head
    body = unified_diff(new_shown if kind == "add" else shown, before, after or "")
    if not body.startswith("--- "):
        return head + body  # not diffable (too large): says why
    _old, _new, rest = body.split("\n", 2)
    old_label = "/dev/null" if before is None else path_label("a", shown)
    new_label = "/dev/null" if after is None else path_label("b", new_shown)
    return f"{head}--- {old_label}\n+++ {new_label}\n{rest}"


def _refuse_repeats(planned: list[_Planned]) -> None:
    """One file in one section: a name given twice, or two hard links of one
    file (each section's result was computed from the same old text, so the
    last write would undo the first), is refused."""
    seen: set[Path] = set()
    files: dict[tuple[int, int], str] = {}  # (device, inode) of an existing file
    for change in (item.change for item in planned):
        for path, shown in ((change.path, change.shown), (change.move_path, change.move_shown)):
            if path is None:
                continue
            if path in seen:
                raise ToolError(
                    f"the patch names {shown} more than once; put every change to one "
                    "file in one section"
                )
            seen.add(path)
            try:
                stat = os.stat(path, follow_symlinks=False)
            except OSError:
                continue  # not there (yet): no other name for it
            name = shown or str(path)
            other = files.setdefault((stat.st_dev, stat.st_ino), name)
            if other != name:
                raise ToolError(
                    f"the patch names {other} and {name}, which are one file (hard links); "
                    "put every change to it in one section"
                )


def _plan_operation(sandbox: Sandbox, operation: FileOperation) -> _Planned:
    if isinstance(operation, AddFile):
        target, shown = _resolve(sandbox, operation.path)
        _refuse_existing(target, shown, "add")
        change = FileChange("add", target.path, shown, target.inside, None, operation.content)
        return _Planned(change, _git_diff("add", shown, None, operation.content), f"add {shown}")
    if isinstance(operation, DeleteFile):
        _refuse_link(sandbox, operation.path, "delete")
        target, shown = _resolve(sandbox, operation.path)
        text, links, mode = _read_text(target, shown, "delete")
        change = FileChange("delete", target.path, shown, target.inside, text, None, links, mode)
        note = f"delete {shown}{links_note(links)}"
        return _Planned(change, _git_diff("delete", shown, text, None, mode=mode), note)
    target, shown = _resolve(sandbox, operation.path)
    if operation.move_to is not None:
        _refuse_link(sandbox, operation.path, "move")
    text, links, mode = _read_text(target, shown, "update")
    try:
        after = apply_hunks(text, operation.hunks, shown)
    except PatchError as exc:
        raise ToolError(f"the patch does not apply: {exc}") from None
    if operation.move_to is None:
        change = FileChange("update", target.path, shown, target.inside, text, after, links, mode)
        note = f"update {shown}{links_note(links)}"
        return _Planned(change, _git_diff("update", shown, text, after), note)
    destination, new_shown = _resolve(sandbox, operation.move_to)
    if destination.path != target.path:
        _refuse_existing(destination, new_shown, f"move {shown} to")
    else:
        raise ToolError(f"cannot move {shown} onto itself; leave out '*** Move to'")
    change = FileChange(
        "move", target.path, shown, target.inside, text, after, links, mode,
        destination.path, new_shown, destination.inside,
    )  # fmt: skip
    diff = _git_diff("move", shown, text, after, new_shown=new_shown, mode=mode)
    return _Planned(change, diff, f"move {shown} -> {new_shown}{links_note(links)}")


def _approval(planned: list[_Planned]) -> ApprovalNeed:
    changes = [item.change for item in planned]
    targets = [str(change.path) for change in changes]
    targets += [str(change.move_path) for change in changes if change.move_path is not None]
    outside = any(
        not change.inside or change.move_inside is False or change.links > 1 for change in changes
    )
    diff = "".join(item.diff for item in planned)
    if len(diff.encode("utf-8", errors="surrogatepass")) > PATCH_DIFF_MAX_BYTES:
        cut = diff.encode("utf-8", errors="surrogatepass")[:PATCH_DIFF_MAX_BYTES]
        kept = cut.decode("utf-8", errors="ignore").rsplit("\n", 1)[0] + "\n"
        diff = kept + f"[... diff truncated at {PATCH_DIFF_MAX_BYTES // 1024} KiB]\n"
    where = "" if not outside else " (outside the workspace, or a file with hard links)"
    reason = f"Apply a patch{where}: " + "; ".join(item.note for item in planned)
    return ApprovalNeed(
        kind="file",
        operation="patch",
        target=", ".join(targets),
        reason=reason,
        outside_workspace=outside,
        diff=diff,
    )


def _summary(changes: list[FileChange]) -> str:
    lines = ["Success. Updated the following files:"]
    for change in changes:
        shown = change.shown
        if change.kind == "move":
            shown = f"{change.shown} -> {change.move_shown}"
        lines.append(f"{_KIND_LETTERS[change.kind]} {shown}")
    return "\n".join(lines)


class ApplyPatchTool:
    """``apply_patch``: one patch in Codex's format, applied all or nothing."""

    name = "apply_patch"
    description = DESCRIPTION
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "input": {
                "type": "string",
                "description": "The entire patch, from '*** Begin Patch' to '*** End Patch'.",
            }
        },
        "required": ["input"],
        "additionalProperties": False,
    }

    def plan(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolPlan:
        """Parse the patch and compute every file's result; one approval for all."""
        check_keys(arguments, ("input",))
        text = require_str(arguments, "input")
        if len(text.encode("utf-8", errors="surrogatepass")) > PATCH_MAX_BYTES:
            raise ToolError(f"the patch is larger than {PATCH_MAX_BYTES // 1024} KiB; split it")
        try:
            operations = parse_patch(text)
        except PatchError as exc:
            raise ToolError(str(exc)) from None
        if not operations:
            raise ToolError("the patch changes no file: add at least one file section")
        sandbox = Sandbox(ctx.workspace)
        planned = [_plan_operation(sandbox, operation) for operation in operations]
        _refuse_repeats(planned)
        details: list[dict[str, Any]] = []
        for item in planned:
            entry = {"path": item.change.shown, "kind": item.change.kind, "diff": item.diff}
            if item.change.move_shown is not None:
                entry["movePath"] = item.change.move_shown
            details.append(entry)
        return ToolPlan(
            tool=self.name,
            arguments=arguments,
            approval=_approval(planned),
            resolved={"changes": [item.change for item in planned], "details": details},
        )

    async def run(self, plan: ToolPlan, ctx: ToolContext) -> ToolOutcome:
        """Check every file is as planned, then write them all (or none)."""
        changes: list[FileChange] = plan.resolved["changes"]
        try:
            await anyio.to_thread.run_sync(apply_changes, changes)
        except FileFailure as exc:
            return ToolOutcome(success=False, output=str(exc))
        return ToolOutcome(
            success=True,
            output=_summary(changes),
            details={"changes": plan.resolved["details"]},
        )
