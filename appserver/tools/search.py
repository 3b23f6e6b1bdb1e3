"""Search tools: ``grep`` (a regex over files) and ``find_files`` (paths by glob).

Both read inside the workspace only and never ask: a path outside it (or in
``.craft``) is refused, not asked. Both honour ``.gitignore`` and ``.ignore``,
skip hidden entries unless asked and never follow symlinks. They run
ripgrep when an ``rg`` binary is found (``tools.search_rg``) and otherwise walk
the tree in Python (``tools.search_walk``) with the same output. Results are
capped; a cut result ends with a ``[truncated: ...]`` line saying what was cut.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio.to_thread

from appserver.tools.args import check_keys, get_bool, get_int, get_str, require_str
from appserver.tools.base import ToolContext, ToolError, ToolOutcome, ToolPlan
from appserver.tools.sandbox import Sandbox
from appserver.tools.search_rg import BASE_ARGS, RgFailed, event, find_rg, run_rg, text_of
from appserver.tools.search_walk import BINARY_SNIFF, LineHit, glob_spec, grep_file, walk_files

MAX_MATCHES = 200
MAX_FILES = 500
MAX_OUTPUT_BYTES = 64 * 1024
MAX_CONTEXT = 20
LINE_CHARS = 400  # a longer line (minified code) is cut

_PATH = {
    "type": "string",
    "description": "File or directory to search, relative to the workspace root (default: the "
    "root). Paths outside the workspace are refused.",
}
_HIDDEN = {
    "type": "boolean",
    "description": "Include hidden files and directories (names starting with '.'; default "
    "false). .git is never searched.",
}


def _plan_path(arguments: dict[str, Any], ctx: ToolContext) -> tuple[Path, str]:
    """The workspace root and the root-relative path to search (refused outside)."""
    path = get_str(arguments, "path", required=False) or "."
    sandbox = Sandbox(ctx.workspace)
    target = sandbox.resolve(path, must_exist=True)
    if not target.inside:
        raise ToolError(f"{path} is outside the workspace; search only inside it")
    if not (target.path.is_dir() or target.path.is_file()):
        # A FIFO or a device: reading it may never end (ripgrep waited out its timeout).
        raise ToolError(f"{path} is neither a regular file nor a directory")
    return sandbox.root, sandbox.display(target)


@dataclass
class _Found:
    """What a search collected, within the caps."""

    max_items: int
    max_bytes: int
    groups: list[tuple[str, list[LineHit]]] = field(default_factory=list)
    items: int = 0
    size: int = 0
    cut: str = ""  # why it stopped early

    def add(self, path: str, hit: LineHit) -> bool:
        """Keep one line of ``path``; ``False`` once a cap is reached."""
        text = hit.text if len(hit.text) <= LINE_CHARS else hit.text[:LINE_CHARS] + "…"
        cost = len(text.encode()) + len(str(hit.number)) + 2
        if not self.groups or self.groups[-1][0] != path:
            cost += len(path.encode()) + 2
        if hit.matched and self.items >= self.max_items:
            self.cut = f"showing the first {self.max_items} matches; more were not shown"
            return False
        if self.size + cost > self.max_bytes:
            self.cut = f"output cut at {self.max_bytes // 1024} KiB; more matches were not shown"
            return False
        if not self.groups or self.groups[-1][0] != path:
            self.groups.append((path, []))
        self.groups[-1][1].append(LineHit(hit.number, text, hit.matched))
        self.size += cost
        self.items += hit.matched
        return True

    def render(self) -> str:
        blocks = []
        for path, hits in self.groups:
            lines = [path]
            for previous, hit in zip([None, *hits], hits, strict=False):
                if previous is not None and hit.number > previous.number + 1:
                    lines.append("--")
                lines.append(f"{hit.number}{':' if hit.matched else '-'}{hit.text}")
            blocks.append("\n".join(lines))
        return "\n\n".join(blocks)


class GrepTool:
    """``grep``: lines matching a regular expression, grouped by file."""

    name = "grep"
    description = (
        "Search file contents for a regular expression (ripgrep syntax) under a path in the "
        "workspace. Honours .gitignore/.ignore, skips hidden and binary files, never asks for "
        "approval. Output: each file's path, then its lines as 'N:text' (matches) or 'N-text' "
        "(context), '--' between separate runs of lines. At most "
        f"{MAX_MATCHES} matches and {MAX_OUTPUT_BYTES // 1024} KiB; a cut result ends with "
        "'[truncated: ...]'. Use glob to filter files (e.g. '*.py')."
    )
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "The regular expression."},
            "path": _PATH,
            "glob": {
                "type": "string",
                "description": "Only files matching this glob (gitignore syntax, relative to the "
                "workspace root: '*.py', 'src/**/*.ts').",
            },
            "ignore_case": {"type": "boolean", "description": "Match case-insensitively."},
            "context": {
                "type": "integer",
                "minimum": 0,
                "description": f"Lines of context before and after each match (at most "
                f"{MAX_CONTEXT}).",
            },
            "before": {"type": "integer", "minimum": 0, "description": "Lines before a match."},
            "after": {"type": "integer", "minimum": 0, "description": "Lines after a match."},
            "hidden": _HIDDEN,
            "max_matches": {
                "type": "integer",
                "minimum": 1,
                "description": f"Stop after this many matches (default and most {MAX_MATCHES}).",
            },
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }

    def __init__(self, *, engine: str | None = None, max_bytes: int = MAX_OUTPUT_BYTES) -> None:
        self.engine = engine  # "rg", "python" or None (see tools.search_rg.find_rg)
        self.max_bytes = max_bytes

    def plan(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolPlan:
        """Check the arguments and the path; never asks."""
        check_keys(arguments, self.input_schema["properties"])
        pattern = require_str(arguments, "pattern", allow_empty=False)
        context = get_int(arguments, "context", minimum=0) or 0
        before = get_int(arguments, "before", minimum=0)
        after = get_int(arguments, "after", minimum=0)
        root, display = _plan_path(arguments, ctx)
        return ToolPlan(
            tool=self.name,
            arguments=arguments,
            resolved={
                "root": root,
                "path": display,
                "pattern": pattern,
                "glob": get_str(arguments, "glob", required=False) or None,
                "ignore_case": get_bool(arguments, "ignore_case"),
                "before": min(MAX_CONTEXT, context if before is None else before),
                "after": min(MAX_CONTEXT, context if after is None else after),
                "hidden": get_bool(arguments, "hidden"),
                "max_matches": min(
                    MAX_MATCHES, get_int(arguments, "max_matches", minimum=1) or MAX_MATCHES
                ),
            },
        )

    async def run(self, plan: ToolPlan, ctx: ToolContext) -> ToolOutcome:
        """Search with rg or the Python walk; a bad pattern is a failed outcome."""
        spec = plan.resolved
        found = _Found(spec["max_matches"], self.max_bytes)
        binary = find_rg(self.engine)
        try:
            if binary is not None:
                await _grep_rg(binary, spec, found)
            else:
                await anyio.to_thread.run_sync(_grep_walk, spec, found)
        except (RgFailed, re.error) as exc:
            return ToolOutcome(False, f"Error: {exc}", {"engine": "rg" if binary else "python"})
        output = found.render() or "No matches."
        if found.cut:
            output += f"\n[truncated: {found.cut}]"
        return ToolOutcome(
            True,
            output,
            {
                "engine": "rg" if binary else "python",
                "matches": found.items,
                "files": len(found.groups),
                "truncated": bool(found.cut),
            },
        )


async def _grep_rg(binary: str, spec: dict[str, Any], found: _Found) -> None:
    args = [*BASE_ARGS, "--json", "--sort=path"]
    if spec["ignore_case"]:
        args.append("--ignore-case")
    if spec["hidden"]:
        args.append("--hidden")
    args += [f"--before-context={spec['before']}", f"--after-context={spec['after']}"]
    args += ["-e", spec["pattern"], "--"]

    def take(line: str) -> bool:
        parsed = event(line)
        if parsed is None or parsed[0] not in ("match", "context"):
            return True
        data = parsed[1]
        path, text, number = text_of(data, "path"), text_of(data, "lines"), data.get("line_number")
        if path is None or text is None or not isinstance(number, int):
            return True
        return found.add(path, LineHit(number, text.rstrip("\r\n"), parsed[0] == "match"))

    if not spec["glob"]:
        await run_rg(binary, [*args, *_start(spec)], spec["root"], take)
        return
    # The files the glob selects, ignore files honoured, searched in batches.
    listed = await _files_rg(binary, spec)
    selected = await anyio.to_thread.run_sync(
        _text_files, spec["root"], _select(listed, spec["glob"])
    )
    for first in range(0, len(selected), _BATCH):
        await run_rg(binary, [*args, *selected[first : first + _BATCH]], spec["root"], take)
        if found.cut:
            return


_BATCH = 256  # explicit paths per rg run


def _start(spec: dict[str, Any]) -> list[str]:
    """The path argument for rg: none for the root (so paths print as ``a/b``)."""
    return [] if spec["path"] == "." else [spec["path"]]


def _select(paths: list[str], glob: str) -> list[str]:
    only = glob_spec(glob)
    return sorted(path for path in paths if only is None or only.match_file(path))


def _text_files(root: Path, paths: list[str]) -> list[str]:
    """``paths`` without binary files (a NUL byte in the first 8 KiB), as the walk skips them."""
    kept = []
    for path in paths:
        try:
            with open(root / path, "rb") as handle:
                if b"\0" not in handle.read(BINARY_SNIFF):
                    kept.append(path)
        except OSError:
            continue
    return kept


def _grep_walk(spec: dict[str, Any], found: _Found) -> None:
    flags = re.IGNORECASE if spec["ignore_case"] else 0
    pattern = re.compile(spec["pattern"], flags)
    only = glob_spec(spec["glob"])  # matched against the root-relative path, as rg does
    root: Path = spec["root"]
    for path, _info in walk_files(root, spec["path"], hidden=spec["hidden"]):
        if only is not None and not only.match_file(path):
            continue
        hits = grep_file(root / path, pattern, spec["before"], spec["after"])
        for hit in hits or ():
            if not found.add(path, hit):
                return


class FindFilesTool:
    """``find_files``: paths matching a glob, newest first."""

    name = "find_files"
    description = (
        "Find files by glob pattern (e.g. '*.py', 'src/**/*.ts', 'README*') under a path in the "
        "workspace, newest first (by modification time). Honours .gitignore/.ignore, skips "
        f"hidden files unless asked, never asks for approval. At most {MAX_FILES} paths; a cut "
        "result ends with '[truncated: ...]'."
    )
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "pattern": {
                "type": "string",
                "description": "Glob in gitignore syntax: without '/' it matches a name at any "
                "depth; with '/' it is relative to the workspace root; '**' spans directories.",
            },
            "path": _PATH,
            "hidden": _HIDDEN,
            "max_results": {
                "type": "integer",
                "minimum": 1,
                "description": f"At most this many paths (default and most {MAX_FILES}).",
            },
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }

    def __init__(self, *, engine: str | None = None) -> None:
        self.engine = engine

    def plan(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolPlan:
        """Check the arguments and the path; never asks."""
        check_keys(arguments, self.input_schema["properties"])
        pattern = require_str(arguments, "pattern", allow_empty=False)
        root, display = _plan_path(arguments, ctx)
        limit = get_int(arguments, "max_results", minimum=1) or MAX_FILES
        return ToolPlan(
            tool=self.name,
            arguments=arguments,
            resolved={
                "root": root,
                "path": display,
                "pattern": pattern,
                "hidden": get_bool(arguments, "hidden"),
                "max_results": min(MAX_FILES, limit),
            },
        )

    async def run(self, plan: ToolPlan, ctx: ToolContext) -> ToolOutcome:
        """List matching files, newest first."""
        spec = plan.resolved
        binary = find_rg(self.engine)
        try:
            if binary is not None:
                listed = await _files_rg(binary, spec)
            else:
                listed = await anyio.to_thread.run_sync(_files_walk, spec)
            paths = _select(listed, spec["pattern"])
        except (RgFailed, ValueError) as exc:
            return ToolOutcome(False, f"Error: {exc}", {"engine": "rg" if binary else "python"})
        dated = await anyio.to_thread.run_sync(_newest_first, spec["root"], paths)
        limit = spec["max_results"]
        output = "\n".join(dated[:limit]) or "No files found."
        if len(dated) > limit:
            output += f"\n[truncated: showing the newest {limit} of {len(dated)} paths]"
        return ToolOutcome(
            True,
            output,
            {
                "engine": "rg" if binary else "python",
                "files": min(limit, len(dated)),
                "truncated": len(dated) > limit,
            },
        )


async def _files_rg(binary: str, spec: dict[str, Any]) -> list[str]:
    """Every file rg would search under the path (no glob: see ``search_rg``)."""
    args = [*BASE_ARGS, "--files", *(["--hidden"] if spec["hidden"] else []), "--"]
    paths: list[str] = []

    def take(line: str) -> bool:
        if line:
            paths.append(line)
        return len(paths) < _LISTED_FILES

    await run_rg(binary, [*args, *_start(spec)], spec["root"], take)
    return paths


_LISTED_FILES = 200_000  # beyond that the tree is too big to sort; the rest is not looked at


def _files_walk(spec: dict[str, Any]) -> list[str]:
    walk = walk_files(spec["root"], spec["path"], hidden=spec["hidden"])
    return [path for path, _info in itertools.islice(walk, _LISTED_FILES)]


def _newest_first(root: Path, paths: list[str]) -> list[str]:
    def modified(path: str) -> float:
        try:
            return (root / path).lstat().st_mtime
        except OSError:
            return 0.0

    return sorted(sorted(paths), key=modified, reverse=True)
