"""File tools: ``read_file``, ``list_dir``, ``write_file``, ``edit_file``.

Paths go through the workspace :class:`~appserver.tools.sandbox.Sandbox`.
Reading or listing inside the workspace needs no approval; outside it asks
(``outside_workspace=True``). Writing and editing always ask; the approval
policy decides whether that means a client prompt. The path is resolved
once, when the call is planned (that is what an approval shows), and opened
at run time without following any symlink (``tools.nofollow``): a link
swapped in meanwhile fails the call instead of reaching somewhere else.

Blocking file I/O runs in a worker thread so a slow disk never stalls the
event loop. ``plan()`` only stats and resolves (and, for writes and edits,
reads the file once, bounded, for the approval's diff).

When the client bound to the thread serves the file system (``ctx.editor``,
DotCraft's ``acpExtensions``), ``read_file`` reads and ``write_file`` writes
through it, and ``edit_file`` reads and writes through it as far as it can: the
editor's unsaved buffers are what the agent sees and edits. The sandbox and the
approvals (``plan()`` and the engine) come first either way.

``write_file`` and ``edit_file`` live in ``tools.file_writes``; they are
exported here too, with the reading tools.
"""

from __future__ import annotations

import heapq
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.to_thread

from appserver.tools.args import check_keys, get_int, get_str, require_str
from appserver.tools.base import (
    ApprovalNeed,
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
    resolved_plan,
)
from appserver.tools.file_writes import EDIT_MAX_BYTES, EditFileTool, WriteFileTool
from appserver.tools.nofollow import PathChanged, open_directory
from appserver.tools.sandbox import Sandbox

__all__ = [
    "EDIT_MAX_BYTES",
    "LIST_MAX_ENTRIES",
    "READ_MAX_BYTES",
    "EditFileTool",
    "ListDirTool",
    "ReadFileTool",
    "WriteFileTool",
]

READ_MAX_BYTES = 256 * 1024
LIST_MAX_ENTRIES = 1000

# readline() bound, so a file that is one enormous line is never read at once.
_READ_CHUNK = 64 * 1024

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
    # Opened as planned, no link followed: an approval covers the path it showed.
    with open_planned(path) as f:
        size = os.fstat(f.fileno()).st_size
        if b"\0" in f.read(BINARY_SNIFF_BYTES):
            raise FileFailure(f"{display} looks like a binary file (it contains NUL bytes)")
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
            raise FileFailure(f"offset {offset} is past the end of {display} ({total} lines)")
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
            "path": {"type": "string", "description": PATH_DESCRIPTION},
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
        return resolved_plan(
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
        except FileFailure as exc:
            return ToolOutcome(success=False, output=str(exc))
        except OSError as exc:
            return os_failure("read", display, exc)

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
    try:
        fd = open_directory(path, listable=True)
    except PathChanged as exc:
        raise FileFailure(str(exc)) from None
    try:
        # Entries are stat'ed relative to the descriptor (while it is open),
        # never by a path that could have changed since.
        with os.scandir(fd) as it:
            entries = list(it)
            # nsmallest keeps this O(n log cap) for huge directories.
            kept = heapq.nsmallest(max_entries, entries, key=lambda entry: entry.name)
            return [_entry_name(entry) for entry in kept], len(entries)
    finally:
        os.close(fd)


def _entry_name(entry: os.DirEntry[str]) -> str:
    try:
        is_dir = entry.is_dir()  # follows symlinks: a link to a dir lists as a dir
    except OSError:
        is_dir = False
    return entry.name + "/" if is_dir else entry.name


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
        return resolved_plan(self.name, arguments, sandbox, target, approval)

    async def run(self, plan: ToolPlan, ctx: ToolContext) -> ToolOutcome:
        """List the directory."""
        path: Path = plan.resolved["path"]
        display: str = plan.resolved["display"]
        try:
            names, total = await anyio.to_thread.run_sync(_list_dir, path, self.max_entries)
        except FileFailure as exc:
            return ToolOutcome(success=False, output=str(exc))
        except OSError as exc:
            return os_failure("list", display, exc)
        lines = names or ["(empty directory)"]
        if total > len(names):
            lines.append(f"[... {total - len(names)} more entries not shown]")
        return ToolOutcome(
            success=True,
            output="\n".join(lines),
            details={"path": display, "entries": total, "truncated": total > len(names)},
        )
