"""File tools: ``read_file``, ``list_dir``, ``write_file``, ``edit_file``.

Paths go through the workspace :class:`~appserver.tools.sandbox.Sandbox`.
Reading or listing inside the workspace needs no approval; outside it asks
(``outside_workspace=True``). Writing and editing always ask; the approval
policy decides whether that means a client prompt.

Blocking file I/O runs in a worker thread so a slow disk never stalls the
event loop. ``plan()`` only stats and resolves.

When the client bound to the thread serves the file system (``ctx.editor``,
DotCraft's ``acpExtensions``), ``read_file`` reads and ``write_file`` writes
through it, and ``edit_file`` reads and writes through it as far as it can: the
editor's unsaved buffers are what the agent sees and edits. The sandbox and the
approvals (``plan()`` and the engine) come first either way.
"""

from __future__ import annotations

import heapq
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.to_thread

from appserver.tools.args import check_keys, get_bool, get_int, get_str, require_str
from appserver.tools.base import (
    ApprovalNeed,
    EditorFiles,
    ToolContext,
    ToolError,
    ToolOutcome,
    ToolPlan,
)
from appserver.tools.sandbox import ResolvedPath, Sandbox

READ_MAX_BYTES = 256 * 1024
LIST_MAX_ENTRIES = 1000
EDIT_MAX_BYTES = 10 * 1024 * 1024

# A NUL byte in the first few KiB is the usual (git, grep) binary-file test.
_BINARY_SNIFF_BYTES = 8192
# readline() bound, so a file that is one enormous line is never read at once.
_READ_CHUNK = 64 * 1024


class _Failure(Exception):
    """Raised inside a worker thread; becomes ``ToolOutcome(success=False)``."""


_PATH_DESCRIPTION = (
    "Path of the file. Relative paths are relative to the workspace root; '~' is not expanded."
)


def _resolved_plan(
    tool: str,
    arguments: dict[str, Any],
    sandbox: Sandbox,
    target: ResolvedPath,
    approval: ApprovalNeed | None,
    **extra: Any,
) -> ToolPlan:
    resolved: dict[str, Any] = {
        "path": target.path,
        "display": sandbox.display(target),
        "inside": target.inside,
    }
    resolved.update(extra)
    return ToolPlan(tool=tool, arguments=arguments, approval=approval, resolved=resolved)


def _outside_note(target: ResolvedPath) -> str:
    return "" if target.inside else " (outside the workspace)"


def _check_unchanged(path: Path) -> None:
    """Refuse if a symlink appeared in ``path`` since it was resolved and approved.

    ``path`` is already symlink-free, so resolving it again must give the same
    path; otherwise the read, listing or write could reach somewhere other than
    what was approved (a directory swapped for a link while a person decided).
    """
    if os.path.realpath(path) != str(path):
        raise _Failure(f"{path} changed (a symlink appeared) since the call was approved")


def _os_failure(action: str, display: str, exc: OSError) -> ToolOutcome:
    reason = exc.strerror or str(exc)
    return ToolOutcome(success=False, output=f"cannot {action} {display}: {reason}")


# --- read_file ---------------------------------------------------------------


@dataclass
class _ReadResult:
    text: str
    size: int
    lines: int  # lines returned (a final line without newline counts)
    truncated: bool  # stopped at the byte cap
    more: bool  # stopped at ``limit`` with more content after it


def _read_text(
    path: Path, display: str, offset: int, limit: int | None, max_bytes: int
) -> _ReadResult:
    _check_unchanged(path)  # an approval covers the path it showed, not a new link
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if b"\0" in f.read(_BINARY_SNIFF_BYTES):
            raise _Failure(f"{display} looks like a binary file (it contains NUL bytes)")
        f.seek(0)
        line = 1
        partial = False  # the last chunk read was a final line without newline
        while line < offset:
            chunk = f.readline(_READ_CHUNK)
            if not chunk:
                break
            partial = not chunk.endswith(b"\n")
            if not partial:
                line += 1
        at_eof = line < offset or (offset > 1 and not f.read(1))
        if at_eof:
            total = line - 1 + (1 if partial else 0)
            raise _Failure(f"offset {offset} is past the end of {display} ({total} lines)")
        if offset > 1:
            f.seek(-1, os.SEEK_CUR)  # undo the one-byte peek above

        buf = bytearray()
        count = 0
        truncated = more = False
        while True:
            if limit is not None and count >= limit:
                more = f.read(1) != b""
                break
            chunk = f.readline(min(_READ_CHUNK, max_bytes - len(buf) + 1))
            if not chunk:
                break
            if len(buf) + len(chunk) > max_bytes:
                truncated = True
                buf += chunk[: max_bytes - len(buf)]
                break
            buf += chunk
            if chunk.endswith(b"\n"):
                count += 1
        if truncated:
            # Cut back to a whole line so "continue with offset=N" is exact,
            # unless a single line is longer than the cap.
            newline = buf.rfind(b"\n")
            if newline >= 0:
                del buf[newline + 1 :]
        lines = buf.count(b"\n") + (1 if buf and not buf.endswith(b"\n") else 0)
        # Undecodable bytes (Latin-1 files, a cut multibyte sequence) become
        # U+FFFD rather than failing the whole read.
        text = buf.decode("utf-8", errors="replace")
        return _ReadResult(text=text, size=size, lines=lines, truncated=truncated, more=more)


class ReadFileTool:
    """``read_file``: the text of a file, optionally a range of lines."""

    name = "read_file"
    description = (
        "Read a UTF-8 text file. Returns the file's text exactly as stored (no line numbers). "
        f"At most {READ_MAX_BYTES // 1024} KiB are returned per call; use offset and limit "
        "to page through larger files. Binary files are refused."
    )
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": _PATH_DESCRIPTION},
            "offset": {
                "type": "integer",
                "minimum": 1,
                "description": "1-based line number to start reading at (default 1).",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "description": "Maximum number of lines to return (default: up to the size cap).",
            },
        },
        "required": ["path"],
        "additionalProperties": False,
    }

    def __init__(self, *, max_bytes: int = READ_MAX_BYTES) -> None:
        self.max_bytes = max_bytes

    def plan(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolPlan:
        """Resolve the path; reading outside the workspace needs approval."""
        check_keys(arguments, ("path", "offset", "limit"))
        path = require_str(arguments, "path")
        offset = get_int(arguments, "offset", minimum=1) or 1
        limit = get_int(arguments, "limit", minimum=1)
        sandbox = Sandbox(ctx.workspace)
        target = sandbox.resolve(path, must_exist=True)
        if target.path.is_dir():
            raise ToolError(f"{path} is a directory; use list_dir to see its entries")
        approval = None
        if not target.inside:
            approval = ApprovalNeed(
                kind="file",
                operation="read",
                target=str(target.path),
                reason=f"Read {target.path}, which is outside the workspace",
                outside_workspace=True,
            )
        return _resolved_plan(
            self.name, arguments, sandbox, target, approval, offset=offset, limit=limit
        )

    async def run(self, plan: ToolPlan, ctx: ToolContext) -> ToolOutcome:
        """Read the file; binary files and I/O errors are failures."""
        path: Path = plan.resolved["path"]
        display: str = plan.resolved["display"]
        offset: int = plan.resolved["offset"]
        if ctx.editor is not None and ctx.editor.can_read:
            return await self._read_in_editor(plan, ctx.editor)
        try:
            result = await anyio.to_thread.run_sync(
                _read_text, path, display, offset, plan.resolved["limit"], self.max_bytes
            )
        except _Failure as exc:
            return ToolOutcome(success=False, output=str(exc))
        except OSError as exc:
            return _os_failure("read", display, exc)

        next_offset = offset + result.text.count("\n")
        note = ""
        if result.truncated and next_offset == offset:
            note = f"[line {offset} is longer than {self.max_bytes} bytes; only its start is shown]"
        elif result.truncated:
            note = (
                f"[output truncated at {self.max_bytes} bytes; the file has {result.size} bytes; "
                f"continue with offset={next_offset}]"
            )
        elif result.more:
            note = f"[more lines follow; continue with offset={next_offset}]"
        output = result.text
        if note:
            output += ("\n" if output and not output.endswith("\n") else "") + note
        elif not output:
            output = "(the file is empty)"
        return ToolOutcome(
            success=True,
            output=output,
            details={
                "path": display,
                "size_bytes": result.size,
                "start_line": offset,
                "lines": result.lines,
                "truncated": result.truncated,
            },
        )

    async def _read_in_editor(self, plan: ToolPlan, editor: EditorFiles) -> ToolOutcome:
        """Read through the client's editor (``ext/acp/fs/readTextFile``)."""
        display: str = plan.resolved["display"]
        offset: int = plan.resolved["offset"]
        limit: int | None = plan.resolved["limit"]
        text = await editor.read_text_file(
            str(plan.resolved["path"]), offset if offset > 1 else None, limit
        )
        data = text.encode("utf-8")
        truncated = len(data) > self.max_bytes
        if truncated:
            cut = data[: self.max_bytes]
            newline = cut.rfind(b"\n")
            text = (cut[: newline + 1] if newline >= 0 else cut).decode("utf-8", errors="ignore")
        output = text
        if truncated:
            next_offset = offset + text.count("\n")
            note = (
                f"[output truncated at {self.max_bytes} bytes; continue with offset={next_offset}]"
            )
            output += ("\n" if output and not output.endswith("\n") else "") + note
        elif not output:
            output = "(the file is empty)"
        lines = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
        return ToolOutcome(
            success=True,
            output=output,
            details={
                "path": display,
                "size_bytes": len(data),
                "start_line": offset,
                "lines": lines,
                "truncated": truncated,
                "source": "editor",
            },
        )


# --- list_dir ----------------------------------------------------------------


def _list_dir(path: Path, max_entries: int) -> tuple[list[str], int]:
    _check_unchanged(path)
    with os.scandir(path) as it:
        entries = list(it)
    # nsmallest keeps this O(n log cap) for huge directories.
    kept = heapq.nsmallest(max_entries, entries, key=lambda entry: entry.name)
    names = []
    for entry in kept:
        try:
            is_dir = entry.is_dir()  # follows symlinks: a link to a dir lists as a dir
        except OSError:
            is_dir = False
        names.append(entry.name + "/" if is_dir else entry.name)
    return names, len(entries)


class ListDirTool:
    """``list_dir``: the entries of a directory, sorted, directories marked."""

    name = "list_dir"
    description = (
        "List a directory's entries, sorted by name, one per line. Directories end with '/'. "
        f"At most {LIST_MAX_ENTRIES} entries are shown."
    )
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "description": "Directory to list (default: the workspace root). Relative paths "
                "are relative to the workspace root; '~' is not expanded.",
            },
        },
        "additionalProperties": False,
    }

    def __init__(self, *, max_entries: int = LIST_MAX_ENTRIES) -> None:
        self.max_entries = max_entries

    def plan(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolPlan:
        """Resolve the directory; listing outside the workspace needs approval."""
        check_keys(arguments, ("path",))
        path = get_str(arguments, "path", required=False) or "."
        sandbox = Sandbox(ctx.workspace)
        target = sandbox.resolve(path, must_exist=True)
        if not target.path.is_dir():
            raise ToolError(f"{path} is not a directory; use read_file to read a file")
        approval = None
        if not target.inside:
            approval = ApprovalNeed(
                kind="file",
                operation="list",
                target=str(target.path),
                reason=f"List {target.path}, which is outside the workspace",
                outside_workspace=True,
            )
        return _resolved_plan(self.name, arguments, sandbox, target, approval)

    async def run(self, plan: ToolPlan, ctx: ToolContext) -> ToolOutcome:
        """List the directory."""
        path: Path = plan.resolved["path"]
        display: str = plan.resolved["display"]
        try:
            names, total = await anyio.to_thread.run_sync(_list_dir, path, self.max_entries)
        except _Failure as exc:
            return ToolOutcome(success=False, output=str(exc))
        except OSError as exc:
            return _os_failure("list", display, exc)
        lines = names or ["(empty directory)"]
        if total > len(names):
            lines.append(f"[... {total - len(names)} more entries not shown]")
        return ToolOutcome(
            success=True,
            output="\n".join(lines),
            details={"path": display, "entries": total, "truncated": total > len(names)},
        )


# --- write_file --------------------------------------------------------------


def _write(path: Path, data: bytes) -> bool:
    _check_unchanged(path)
    created = not path.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    # In place rather than write-and-rename: keeps the file's mode, owner and
    # hard links, which is what a user editing the file would expect.
    with open(path, "wb") as f:
        f.write(data)
    return created


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
            "path": {"type": "string", "description": _PATH_DESCRIPTION},
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
        approval = ApprovalNeed(
            kind="file",
            operation="write",
            target=str(target.path),
            reason=f"Write {len(data)} bytes to {display}{_outside_note(target)}",
            outside_workspace=not target.inside,
        )
        return _resolved_plan(self.name, arguments, sandbox, target, approval, data=data)

    async def run(self, plan: ToolPlan, ctx: ToolContext) -> ToolOutcome:
        """Write the file, creating parent directories."""
        path: Path = plan.resolved["path"]
        display: str = plan.resolved["display"]
        data: bytes = plan.resolved["data"]
        if ctx.editor is not None and ctx.editor.can_write:
            await ctx.editor.write_text_file(str(path), data.decode("utf-8"))
            return ToolOutcome(
                success=True,
                output=f"Wrote {len(data)} bytes to {display} (in the editor)",
                details={"path": display, "bytes_written": len(data), "source": "editor"},
            )
        try:
            created = await anyio.to_thread.run_sync(_write, path, data)
        except _Failure as exc:
            return ToolOutcome(success=False, output=str(exc))
        except OSError as exc:
            return _os_failure("write", display, exc)
        return ToolOutcome(
            success=True,
            output=f"Wrote {len(data)} bytes to {display}",
            details={"path": display, "bytes_written": len(data), "created": created},
        )


# --- edit_file ---------------------------------------------------------------


def _read_for_edit(path: Path, display: str, max_bytes: int) -> str:
    _check_unchanged(path)
    with open(path, "rb") as f:
        raw = f.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise _Failure(f"{display} is larger than {max_bytes} bytes; edit_file refuses it")
    if b"\0" in raw[:_BINARY_SNIFF_BYTES]:
        raise _Failure(f"{display} looks like a binary file (it contains NUL bytes)")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        # Decoding with replacement and writing back would corrupt the file.
        raise _Failure(f"{display} is not valid UTF-8 text; edit_file refuses it") from None


def _edit(path: Path, display: str, old: str, new: str, replace_all: bool, max_bytes: int) -> int:
    text = _read_for_edit(path, display, max_bytes)
    updated, count = _replace(text, display, old, new, replace_all)
    with open(path, "wb") as f:
        f.write(updated.encode("utf-8"))
    return count


def _replace(text: str, display: str, old: str, new: str, replace_all: bool) -> tuple[str, int]:
    count = text.count(old)
    if count == 0:
        raise _Failure(
            f"old_string was not found in {display}. It must match the file exactly, "
            "including whitespace and indentation; read the file to check."
        )
    if count > 1 and not replace_all:
        raise _Failure(
            f"old_string occurs {count} times in {display}. Include more surrounding text "
            "to make it unique, or set replace_all to replace every occurrence."
        )
    updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
    return updated, count


def _write_edited(path: Path, text: str) -> None:
    _check_unchanged(path)
    with open(path, "wb") as f:
        f.write(text.encode("utf-8"))


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
            "path": {"type": "string", "description": _PATH_DESCRIPTION},
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
        what = "every occurrence of a string" if replace_all else "one string"
        approval = ApprovalNeed(
            kind="file",
            operation="edit",
            target=str(target.path),
            reason=f"Edit {display}{_outside_note(target)}: replace {what}",
            outside_workspace=not target.inside,
        )
        strings = {"old": old, "new": new, "replace_all": replace_all}
        return _resolved_plan(self.name, arguments, sandbox, target, approval, **strings)

    async def run(self, plan: ToolPlan, ctx: ToolContext) -> ToolOutcome:
        """Apply the replacement; no match or an ambiguous match is a failure."""
        path: Path = plan.resolved["path"]
        display: str = plan.resolved["display"]
        if ctx.editor is not None and (ctx.editor.can_read or ctx.editor.can_write):
            return await self._edit_in_editor(plan, ctx.editor)
        try:
            count = await anyio.to_thread.run_sync(
                _edit,
                path,
                display,
                plan.resolved["old"],
                plan.resolved["new"],
                plan.resolved["replace_all"],
                self.max_bytes,
            )
        except _Failure as exc:
            return ToolOutcome(success=False, output=str(exc))
        except OSError as exc:
            return _os_failure("edit", display, exc)
        noun = "occurrence" if count == 1 else "occurrences"
        return ToolOutcome(
            success=True,
            output=f"Edited {display}: replaced {count} {noun}",
            details={"path": display, "replacements": count},
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
                    raise _Failure(
                        f"{display} is larger than {self.max_bytes} bytes; edit_file refuses it"
                    )
            else:
                text = await anyio.to_thread.run_sync(_read_for_edit, path, display, self.max_bytes)
            updated, count = _replace(
                text,
                display,
                plan.resolved["old"],
                plan.resolved["new"],
                plan.resolved["replace_all"],
            )
            if editor.can_write:
                await editor.write_text_file(str(path), updated)
            else:
                await anyio.to_thread.run_sync(_write_edited, path, updated)
        except _Failure as exc:
            return ToolOutcome(success=False, output=str(exc))
        except OSError as exc:
            return _os_failure("edit", display, exc)
        noun = "occurrence" if count == 1 else "occurrences"
        return ToolOutcome(
            success=True,
            output=f"Edited {display}: replaced {count} {noun} (in the editor)",
            details={"path": display, "replacements": count, "source": "editor"},
        )
