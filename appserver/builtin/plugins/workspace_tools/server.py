"""Workspace Tools: a stdio MCP server with read-only search tools.

Shipped inside the built-in ``workspace-tools`` plugin and started by the
app server as ``<python> <plugin>/server.py --root <workspace>`` (see the
plugin's ``.mcp.json``). It needs only the ``mcp`` SDK, so the copy
installed under ``.craft/plugins/workspace-tools`` runs on its own.

Every tool stays inside ``--root`` and skips version-control, dependency and
cache folders, files larger than 1 MB and binary files.
"""

from __future__ import annotations

import argparse
import fnmatch
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

SKIPPED_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".craft",
        ".venv",
        "venv",
        "node_modules",
        "__pycache__",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".tox",
        "dist",
        "build",
    }
)
MAX_FILE_BYTES = 1024 * 1024
MAX_RESULTS = 1000
READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)


def walk(directory: Path) -> Iterator[Path]:
    """Every regular file under ``directory`` outside the skipped folders, in path order."""
    try:
        entries = sorted(directory.iterdir(), key=lambda path: path.name)
    except OSError:
        return
    for entry in entries:
        if entry.is_symlink():
            continue  # never leave the root through a link
        if entry.is_dir():
            if entry.name not in SKIPPED_DIRS:
                yield from walk(entry)
        elif entry.is_file():
            yield entry


def relative(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix()


def matches(path: str, pattern: str) -> bool:
    """Glob match on a relative path; ``**/`` also matches no directory at all."""
    if fnmatch.fnmatchcase(path, pattern):
        return True
    return pattern.startswith("**/") and fnmatch.fnmatchcase(path, pattern[3:])


def text_of(path: Path) -> str | None:
    """The file's text, or ``None`` for large or binary files."""
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return None
        data = path.read_bytes()
    except OSError:
        return None
    if b"\0" in data[:8192]:
        return None
    return data.decode("utf-8", errors="replace")


def limit(value: int) -> int:
    if value < 1:
        raise ToolError("max_results must be at least 1")
    return min(value, MAX_RESULTS)


def build(root: Path) -> MCPServer:
    """The server, with its tools bound to ``root``."""
    server = MCPServer(
        "workspace-tools",
        instructions="Read-only file search over the workspace.",
        log_level="WARNING",
    )

    @server.tool(annotations=READ_ONLY, structured_output=False)
    def find_files(pattern: str, max_results: int = 200) -> str:
        """List workspace files whose relative path matches a glob (e.g. '**/*.py')."""
        cap = limit(max_results)
        found = []
        for path in walk(root):
            name = relative(root, path)
            if matches(name, pattern):
                found.append(name)
                if len(found) >= cap:
                    found.append(f"... (stopped after {cap} files)")
                    break
        return "\n".join(found) if found else f"No files match {pattern!r}."

    @server.tool(annotations=READ_ONLY, structured_output=False)
    def search_text(
        query: str,
        glob: str = "**/*",
        regex: bool = False,
        case_sensitive: bool = False,
        max_results: int = 100,
    ) -> str:
        """Find lines containing a text (or a regular expression) in workspace files.

        Results are 'path:line: text', in path order; glob limits the files searched.
        """
        if not query:
            raise ToolError("query must not be empty")
        cap = limit(max_results)
        flags = 0 if case_sensitive else re.IGNORECASE
        try:
            needle = re.compile(query if regex else re.escape(query), flags)
        except re.error as exc:
            raise ToolError(f"invalid regular expression: {exc}") from None
        hits: list[str] = []
        for path in walk(root):
            name = relative(root, path)
            if not matches(name, glob):
                continue
            text = text_of(path)
            if text is None:
                continue
            for number, line in enumerate(text.splitlines(), start=1):
                if needle.search(line):
                    hits.append(f"{name}:{number}: {line.strip()[:300]}")
                    if len(hits) >= cap:
                        hits.append(f"... (stopped after {cap} matches)")
                        return "\n".join(hits)
        return "\n".join(hits) if hits else f"No lines match {query!r}."

    @server.tool(annotations=READ_ONLY, structured_output=False)
    def workspace_summary() -> str:
        """Top-level entries and the number of files per extension."""
        top = sorted(
            entry.name + ("/" if entry.is_dir() else "")
            for entry in root.iterdir()
            if entry.name not in SKIPPED_DIRS
        )
        counts = Counter(path.suffix.lower() or "(none)" for path in walk(root))
        lines = [f"Workspace: {root}", "Top level: " + (", ".join(top) or "(empty)")]
        lines.append(f"Files: {sum(counts.values())}")
        lines.extend(f"  {suffix}: {count}" for suffix, count in counts.most_common(15))
        return "\n".join(lines)

    return server


def main(argv: list[str] | None = None) -> None:
    """Serve over stdio until the client closes stdin."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--root", default=".", help="the workspace to search (default: cwd)")
    args = parser.parse_args(argv)
    root = Path(args.root).resolve()
    if not root.is_dir():
        parser.error(f"--root {root} is not a directory")
    build(root).run()


if __name__ == "__main__":
    main()
