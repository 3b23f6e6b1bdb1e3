"""The search tools' Python engine: used when no ``rg`` binary is found.

It walks the tree as ripgrep does by default, so both engines give the same
answers: ``.gitignore`` and ``.ignore`` files (gitignore syntax, matched with
``pathspec``) from the workspace root down to each directory, hidden entries
skipped unless asked, ``.git`` and ``.craft`` never entered, symlinks never
followed (a linked file or directory is skipped), binary files (a NUL byte
in the first 8 KiB) skipped. Patterns are Python regular expressions here
(ripgrep's Rust syntax is close: the common subset behaves alike).

Blocking: run it in a worker thread.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # loaded at the first search, not at start (~25 ms)
    import pathspec

from appserver.tools.sandbox import STATE_DIR

IGNORE_FILES = (".gitignore", ".ignore")
NEVER_ENTERED = frozenset((".git", STATE_DIR))
BINARY_SNIFF = 8192


@dataclass(frozen=True)
class _Ignores:
    """The ignore specs in force in one directory: (its path from the root, spec)."""

    specs: tuple[tuple[str, pathspec.GitIgnoreSpec], ...] = ()

    def under(self, directory: Path, relative: str) -> _Ignores:
        """The specs in force in ``directory`` (``relative`` from the root)."""
        lines: list[str] = []
        for name in IGNORE_FILES:
            try:
                with open(directory / name, encoding="utf-8", errors="replace") as handle:
                    lines += handle.read(1 << 20).splitlines()
            except OSError:
                continue
        if not lines:
            return self
        import pathspec

        return _Ignores((*self.specs, (relative, pathspec.GitIgnoreSpec.from_lines(lines))))

    def ignored(self, relative: str, is_dir: bool) -> bool:
        """The deepest file with a pattern matching ``relative`` decides."""
        for base, spec in reversed(self.specs):
            inner = relative[len(base) + 1 :] if base else relative
            result = spec.check_file(inner + "/" if is_dir else inner)
            if result.include is not None:
                return bool(result.include)
        return False


def _ignores_down_to(root: Path, relative: str) -> _Ignores:
    """The specs of ``root`` and every directory from it down to ``relative``."""
    ignores = _Ignores().under(root, "")
    parts = [part for part in relative.split("/") if part not in ("", ".")]
    for depth in range(1, len(parts) + 1):
        prefix = "/".join(parts[:depth])
        ignores = ignores.under(root / prefix, prefix)
    return ignores


def walk_files(root: Path, start: str, *, hidden: bool) -> Iterator[tuple[str, os.stat_result]]:
    """Regular files under ``start`` (root-relative, ``.`` for the root), as
    root-relative POSIX paths with their ``lstat``, in path order."""
    start = "" if start == "." else start
    top = root / start if start else root
    info = os.lstat(top)
    if stat.S_ISREG(info.st_mode):
        yield start, info  # an explicit file is searched whatever ignores it
        return
    ignores = _ignores_down_to(root, start)
    yield from _walk(top, start, ignores, hidden)


def _walk(
    directory: Path, relative: str, ignores: _Ignores, hidden: bool
) -> Iterator[tuple[str, os.stat_result]]:
    try:
        with os.scandir(directory) as listing:
            entries = sorted(listing, key=lambda entry: entry.name)
    except OSError:
        return
    for entry in entries:
        name = entry.name
        if name in NEVER_ENTERED or (not hidden and name.startswith(".")):
            continue
        path = f"{relative}/{name}" if relative else name
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode):
            if not ignores.ignored(path, True):
                yield from _walk(
                    Path(entry.path), path, ignores.under(Path(entry.path), path), hidden
                )
        elif stat.S_ISREG(info.st_mode) and not ignores.ignored(path, False):
            yield path, info


def glob_spec(glob: str | None) -> pathspec.GitIgnoreSpec | None:
    """``glob`` as ripgrep reads ``--glob`` (gitignore syntax), or ``None``."""
    if not glob:
        return None
    import pathspec

    return pathspec.GitIgnoreSpec.from_lines([glob])


@dataclass(frozen=True)
class LineHit:
    """One line printed for a match: its number, text, and whether it matched
    (``False``: a context line)."""

    number: int
    text: str
    matched: bool


def grep_file(
    path: Path, pattern: re.Pattern[str], before: int, after: int
) -> Iterator[LineHit] | None:
    """The matching lines of one file with their context, or ``None`` for a
    binary or unreadable file."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    if b"\0" in data[:BINARY_SNIFF]:
        return None
    # Lines end at \n only, as ripgrep counts them (str.splitlines also breaks
    # at form feeds, lone CRs and U+2028: line numbers ran ahead of rg's); a
    # CRLF file's \r is not part of its lines.
    text = data.decode("utf-8", errors="replace")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the last line's newline
    return _hits([line.removesuffix("\r") for line in lines], pattern, before, after)


def _hits(lines: list[str], pattern: re.Pattern[str], before: int, after: int) -> Iterator[LineHit]:
    printed = 0  # lines[:printed] are already out
    pending_after = 0
    for index, line in enumerate(lines):
        if pattern.search(line):
            for context in range(max(printed, index - before), index):
                yield LineHit(context + 1, lines[context], False)
            yield LineHit(index + 1, line, True)
            printed = index + 1
            pending_after = after
        elif pending_after > 0:
            yield LineHit(index + 1, line, False)
            printed = index + 1
            pending_after -= 1
