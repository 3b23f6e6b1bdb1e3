"""File tools that change files: ``write_file`` and ``edit_file``.

Both always ask (the approval policy decides whether that means a prompt).
When planned they read the file once, bounded, so the approval can show a
unified diff of the file as it is against what the call would write
(``ApprovalNeed.diff``, see ``tools.file_diff``). When run they diff what
they applied against the file as it was just before, in the outcome's
``details["changes"]`` (:func:`file_change`; ``apply_patch`` gives the same).

At run time the planned path is opened without following any symlink
(``tools.nofollow``): a directory or the file swapped for a link fails the
call. ``edit_file`` reads and writes through the one descriptor it opened,
so what it writes is the file it read. A new file is created in the
directory reached (``O_CREAT | O_EXCL``, never through a link); an existing
one is overwritten in place, keeping its mode, owner and hard links.

Hard links: a file with more than one link is the same file under other
names, which may lie outside the workspace (the sandbox cannot tell where).
The rule: the approval of a write or edit covers the link count it showed.
A file that has more than one link when planned is asked about as if it lay
outside the workspace (``autoApprove`` and workspace-wide grants do not
cover it; ``requireApprovalOutsideWorkspace: false`` refuses it) and the
prompt says "N hard links". At run time the opened file's link count must
not exceed what the plan showed (1 when it showed nothing): otherwise the
call fails and the file is not touched.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio.to_thread

from appserver.tools.args import check_keys, get_bool, require_str
from appserver.tools.base import (
    EditorFiles,
    ToolContext,
    ToolError,
    ToolOutcome,
    ToolPlan,
)
from appserver.tools.file_common import (
    BINARY_SNIFF_BYTES,
    PATH_DESCRIPTION,
    FileFailure,
    open_planned,
    os_failure,
    outside_note,
    resolved_plan,
)
from appserver.tools.file_diff import DIFF_INPUT_MAX_BYTES, not_diffable, unified_diff
from appserver.tools.file_snapshot import (
    Snapshot,
    check_links,
    diffable_text,
    file_change,
    file_need,
    overwrite,
    read_snapshot,
)
from appserver.tools.nofollow import PathChanged, open_file, open_regular
from appserver.tools.sandbox import Sandbox

EDIT_MAX_BYTES = 10 * 1024 * 1024


# --- write_file --------------------------------------------------------------


def _open_for_write(path: Path) -> tuple[int, bool, bool]:
    """The file at ``path`` opened for writing, whether it was created, and
    whether it can be read (for the diff of what the write replaced)."""
    try:
        return open_regular(path, os.O_RDWR), False, True
    except (PermissionError, FileNotFoundError):
        pass  # write-only (written all the same, without a diff), or missing
    try:
        return open_regular(path, os.O_WRONLY), False, False
    except FileNotFoundError:
        pass
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    return open_file(path, flags, create_parents=True), True, False


def _write(path: Path, display: str, content: str, links_shown: int) -> tuple[bool, str]:
    """Write ``content``; whether the file was created, and the diff applied."""
    try:
        fd, created, readable = _open_for_write(path)
    except PathChanged as exc:
        raise FileFailure(str(exc)) from None
    # On a descriptor: "r+b"/"wb" truncate nothing by themselves.
    with open(fd, "r+b" if readable else "wb") as handle:
        check_links(fd, display, links_shown)
        before, why = (None, "")
        if readable:
            before, why = diffable_text(handle.read(DIFF_INPUT_MAX_BYTES + 1))
        elif not created:
            why = "it is not readable"
        overwrite(handle, content.encode("utf-8"))
    if why:
        return created, not_diffable(display, why)
    return created, unified_diff(display, before, content)


class WriteFileTool:
    """``write_file``: create or overwrite a file with the given text."""

    name = "write_file"
    description = (
        "Create a file or overwrite it entirely with the given content (UTF-8). Missing parent "
        "directories are created. To change part of an existing file, prefer edit_file."
    )
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": PATH_DESCRIPTION},
            "content": {"type": "string", "description": "The complete new content of the file."},
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    }

    def plan(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolPlan:
        """Resolve the path; writing always needs approval (the policy may auto-approve)."""
        check_keys(arguments, ("path", "content"))
        path = require_str(arguments, "path")
        content = require_str(arguments, "content")
        sandbox = Sandbox(ctx.workspace)
        target = sandbox.resolve(path)
        if target.path.is_dir():
            raise ToolError(f"{path} is a directory")
        data = content.encode("utf-8")
        display = sandbox.display(target)
        snapshot = read_snapshot(target.path)
        if snapshot.exists and snapshot.text is None:
            diff = not_diffable(display, snapshot.why)
        else:
            diff = unified_diff(display, snapshot.text, content)
        reason = f"Write {len(data)} bytes to {display}{outside_note(target)}"
        approval = file_need("write", target, reason, snapshot, diff)
        return resolved_plan(
            self.name, arguments, sandbox, target, approval, data=data, links=snapshot.links
        )

    async def run(self, plan: ToolPlan, ctx: ToolContext) -> ToolOutcome:
        """Write the file, creating parent directories."""
        path: Path = plan.resolved["path"]
        display: str = plan.resolved["display"]
        data: bytes = plan.resolved["data"]
        content = data.decode("utf-8")
        if ctx.editor is not None and ctx.editor.can_write:
            # The editor's buffer is not read back: the diff is against the disk.
            snapshot = await anyio.to_thread.run_sync(read_snapshot, path)
            await ctx.editor.write_text_file(str(path), content)
            kind = "update" if snapshot.exists else "add"
            if snapshot.exists and snapshot.text is None:
                diff = not_diffable(display, snapshot.why)
            else:
                diff = unified_diff(display, snapshot.text, content)
            return ToolOutcome(
                success=True,
                output=f"Wrote {len(data)} bytes to {display} (in the editor)",
                details={
                    "path": display,
                    "bytes_written": len(data),
                    "source": "editor",
                    "changes": [file_change(display, kind, diff)],
                },
            )
        try:
            created, diff = await anyio.to_thread.run_sync(
                _write, path, display, content, plan.resolved["links"]
            )
        except FileFailure as exc:
            return ToolOutcome(success=False, output=str(exc))
        except OSError as exc:
            return os_failure("write", display, exc)
        return ToolOutcome(
            success=True,
            output=f"Wrote {len(data)} bytes to {display}",
            details={
                "path": display,
                "bytes_written": len(data),
                "created": created,
                "changes": [file_change(display, "add" if created else "update", diff)],
            },
        )


# --- edit_file ---------------------------------------------------------------


def _decode_for_edit(raw: bytes, display: str, max_bytes: int) -> str:
    if len(raw) > max_bytes:
        raise FileFailure(f"{display} is larger than {max_bytes} bytes; edit_file refuses it")
    if b"\0" in raw[:BINARY_SNIFF_BYTES]:
        raise FileFailure(f"{display} looks like a binary file (it contains NUL bytes)")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        # Decoding with replacement and writing back would corrupt the file.
        raise FileFailure(f"{display} is not valid UTF-8 text; edit_file refuses it") from None


def _read_for_edit(path: Path, display: str, max_bytes: int) -> str:
    with open_planned(path) as handle:
        return _decode_for_edit(handle.read(max_bytes + 1), display, max_bytes)


def _edit(
    path: Path,
    display: str,
    strings: tuple[str, str, bool],
    max_bytes: int,
    links_shown: int,
) -> tuple[int, str]:
    """Apply the replacement; how many were replaced, and the diff applied."""
    # One descriptor for the read and the write: what is written is the file read.
    with open_planned(path, os.O_RDWR) as handle:
        check_links(handle.fileno(), display, links_shown)
        text = _decode_for_edit(handle.read(max_bytes + 1), display, max_bytes)
        updated, count = _replace(text, display, *strings)
        overwrite(handle, updated.encode("utf-8"))
    return count, unified_diff(display, text, updated)


def _replace(text: str, display: str, old: str, new: str, replace_all: bool) -> tuple[str, int]:
    count = text.count(old)
    if count == 0:
        raise FileFailure(
            f"old_string was not found in {display}. It must match the file exactly, "
            "including whitespace and indentation; read the file to check."
        )
    if count > 1 and not replace_all:
        raise FileFailure(
            f"old_string occurs {count} times in {display}. Include more surrounding text "
            "to make it unique, or set replace_all to replace every occurrence."
        )
    updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
    return updated, count


def _write_edited(path: Path, display: str, text: str, links_shown: int) -> None:
    with open_planned(path, os.O_WRONLY) as handle:
        check_links(handle.fileno(), display, links_shown)
        overwrite(handle, text.encode("utf-8"))


def _edit_diff(display: str, snapshot: Snapshot, old: str, new: str, replace_all: bool) -> str:
    """The approval's diff of an edit; a line saying why when there is none."""
    if snapshot.text is None:
        return not_diffable(display, snapshot.why)
    count = snapshot.text.count(old)
    if count == 0:
        return not_diffable(display, "old_string does not occur in the file now")
    if count > 1 and not replace_all:
        return not_diffable(display, f"old_string occurs {count} times and replace_all is false")
    updated = snapshot.text.replace(old, new, -1 if replace_all else 1)
    return unified_diff(display, snapshot.text, updated)


class EditFileTool:
    """``edit_file``: replace an exact string in a file."""

    name = "edit_file"
    description = (
        "Replace an exact string in a UTF-8 text file. old_string must match the file "
        "exactly (including whitespace and indentation) and, unless replace_all is true, "
        "occur exactly once. Read the file first to copy the text precisely."
    )
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": PATH_DESCRIPTION},
            "old_string": {
                "type": "string",
                "description": "The exact text to replace (must not be empty).",
            },
            "new_string": {
                "type": "string",
                "description": "The text to put in its place (may be empty to delete).",
            },
            "replace_all": {
                "type": "boolean",
                "description": "Replace every occurrence instead of requiring exactly one "
                "(default false).",
            },
        },
        "required": ["path", "old_string", "new_string"],
        "additionalProperties": False,
    }

    def __init__(self, *, max_bytes: int = EDIT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes

    def plan(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolPlan:
        """Check the strings and resolve the file; editing always needs approval."""
        check_keys(arguments, ("path", "old_string", "new_string", "replace_all"))
        path = require_str(arguments, "path")
        old = require_str(arguments, "old_string")
        new = require_str(arguments, "new_string")
        replace_all = get_bool(arguments, "replace_all")
        if not old:
            raise ToolError("old_string must not be empty; use write_file to create a file")
        if old == new:
            raise ToolError("old_string and new_string are identical; nothing would change")
        sandbox = Sandbox(ctx.workspace)
        target = sandbox.resolve(path, must_exist=True)
        if target.path.is_dir():
            raise ToolError(f"{path} is a directory")
        display = sandbox.display(target)
        snapshot = read_snapshot(target.path)
        what = "every occurrence of a string" if replace_all else "one string"
        reason = f"Edit {display}{outside_note(target)}: replace {what}"
        diff = _edit_diff(display, snapshot, old, new, replace_all)
        approval = file_need("edit", target, reason, snapshot, diff)
        strings = {"old": old, "new": new, "replace_all": replace_all}
        return resolved_plan(
            self.name, arguments, sandbox, target, approval, links=snapshot.links, **strings
        )

    def _strings(self, plan: ToolPlan) -> tuple[str, str, bool]:
        return plan.resolved["old"], plan.resolved["new"], plan.resolved["replace_all"]

    async def run(self, plan: ToolPlan, ctx: ToolContext) -> ToolOutcome:
        """Apply the replacement; no match or an ambiguous match is a failure."""
        path: Path = plan.resolved["path"]
        display: str = plan.resolved["display"]
        if ctx.editor is not None and (ctx.editor.can_read or ctx.editor.can_write):
            return await self._edit_in_editor(plan, ctx.editor)
        try:
            count, diff = await anyio.to_thread.run_sync(
                _edit, path, display, self._strings(plan), self.max_bytes, plan.resolved["links"]
            )
        except FileFailure as exc:
            return ToolOutcome(success=False, output=str(exc))
        except OSError as exc:
            return os_failure("edit", display, exc)
        noun = "occurrence" if count == 1 else "occurrences"
        return ToolOutcome(
            success=True,
            output=f"Edited {display}: replaced {count} {noun}",
            details={
                "path": display,
                "replacements": count,
                "changes": [file_change(display, "update", diff)],
            },
        )

    async def _edit_in_editor(self, plan: ToolPlan, editor: EditorFiles) -> ToolOutcome:
        """Edit the editor's text: read and write through it as far as it serves
        (``ext/acp/fs/*``), the disk for the rest."""
        path: Path = plan.resolved["path"]
        display: str = plan.resolved["display"]
        try:
            if editor.can_read:
                text = await editor.read_text_file(str(path), None, None)
                if len(text.encode("utf-8")) > self.max_bytes:
                    raise FileFailure(
                        f"{display} is larger than {self.max_bytes} bytes; edit_file refuses it"
                    )
            else:
                text = await anyio.to_thread.run_sync(_read_for_edit, path, display, self.max_bytes)
            updated, count = _replace(text, display, *self._strings(plan))
            if editor.can_write:
                await editor.write_text_file(str(path), updated)
            else:
                await anyio.to_thread.run_sync(
                    _write_edited, path, display, updated, plan.resolved["links"]
                )
        except FileFailure as exc:
            return ToolOutcome(success=False, output=str(exc))
        except OSError as exc:
            return os_failure("edit", display, exc)
        noun = "occurrence" if count == 1 else "occurrences"
        diff = await anyio.to_thread.run_sync(unified_diff, display, text, updated)
        return ToolOutcome(
            success=True,
            output=f"Edited {display}: replaced {count} {noun} (in the editor)",
            details={
                "path": display,
                "replacements": count,
                "source": "editor",
                "changes": [file_change(display, "update", diff)],
            },
        )
