"""Which read-only commands read more than the files they name, and when that
must be asked (``tools.safe_commands``).

A command that walks a directory reads what it finds there, not only the
words checked against the workspace: ``grep -r`` from the workspace root
reads ``.craft/`` (the server's config, with API keys, and its database),
which every tool treats as outside the workspace; ``rg`` does too once hidden
files are searched, or a glob or an ignore file lets ``.craft`` in; ``diff``
of two directories reads each file of both, following links out of the
workspace. Such a command runs unasked only when its walk cannot get there:

* ``grep`` with ``-r`` (``--recursive``, ``-d`` with anything but ``read`` or
  ``skip``: grep takes ``-d rec``): no directory it walks is the workspace
  root, unless ``--exclude-dir=.craft`` leaves it out;
* ``rg``: from the workspace root, only with hidden files skipped (no
  ``--hidden``, ``-.``, ``-u``, ``--unrestricted``), no ``--ignore-file``, every
  whitelist glob of a shape that surely cannot match ``.craft`` (``*.py``, a
  plain name, a path under a plain name), a ``.git`` directory (not a
  worktree's file), and no ``!`` (a re-inclusion) in the ignore files of the
  root or of any directory above it (rg reads those too), which could bring a
  hidden directory back;
* ``diff``: every file a directory argument holds (``diff`` compares them one
  level deep, following links) lies inside the workspace.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

from appserver.tools.sandbox import STATE_DIR, in_workspace

_STATE = f"reads the workspace's {STATE_DIR}/ (the server's config and database)"
# Ignore files rg reads in the directory it searches and those above it (a "!" line
# re-includes).
_IGNORE_FILES = (".ignore", ".rgignore", ".gitignore", ".git/info/exclude")
# A directory argument of diff with more entries than this is asked, not listed.
_DIFF_MAX_ENTRIES = 1000


@dataclass(frozen=True)
class Call:
    """One command line being judged: where it runs and the workspace root."""

    cwd: Path
    root: Path

    def real(self, word: str) -> Path:
        """``word`` as a path from the working directory, symlinks followed."""
        return Path(os.path.realpath(os.path.join(self.cwd, word)))

    def outside(self, word: str) -> str | None:
        """Why ``word``, taken as a path, asks (``None`` when it is inside)."""
        return (
            None
            if in_workspace(self.root, self.real(word))
            else f"reads outside the workspace: {word}"
        )


@dataclass
class Parsed:
    """A command line's words, sorted by ``safe_commands``: its flags in order
    (each with its value, ``None`` for one without) and its positional words."""

    flags: list[tuple[str, str | None]] = field(default_factory=list)
    positional: list[str] = field(default_factory=list)

    def given(self, *names: str) -> list[str | None]:
        """The values of each use of the flags ``names`` (``None``: no value)."""
        return [value for flag, value in self.flags if flag in names]


def _operands(parsed: Parsed, pattern_flags: tuple[str, ...]) -> list[str]:
    """The paths of a grep-like command: the positional words after the
    pattern (the first, unless a pattern flag gave it), else ``.``."""
    paths = parsed.positional if parsed.given(*pattern_flags) else parsed.positional[1:]
    return paths or ["."]


def _grep(parsed: Parsed, call: Call) -> str | None:
    # grep takes any abbreviation of -d's value ("-d rec"): only read and skip do not walk.
    walks = any(value not in ("read", "skip") for value in parsed.given("-d", "--directories"))
    if not (walks or parsed.given("-r", "--recursive")):
        return None
    if STATE_DIR in parsed.given("--exclude-dir"):  # the name itself: no glob to interpret
        return None
    roots = _operands(parsed, ("-e", "--regexp", "-f", "--file"))
    return _STATE if any(call.real(root) == call.root for root in roots) else None


def _rg(parsed: Parsed, call: Call) -> str | None:
    if parsed.given("--files", "--type-list"):  # no pattern: every word is a path
        roots = parsed.positional or ["."]
    else:
        roots = _operands(parsed, ("-e", "--regexp", "-f", "--file"))
    if not any(call.real(root) == call.root for root in roots):
        return None
    if parsed.given("--hidden", "-.", "-u", "--unrestricted", "--ignore-file"):
        return _STATE
    for glob in parsed.given("-g", "--glob", "--iglob"):
        pattern = str(glob)
        if not pattern.startswith("!") and not _cannot_match_state(pattern):
            return _STATE
    # rg reads the ignore files of every directory above the one it searches too.
    for directory in (call.root, *call.root.parents):
        if (directory / ".git").is_file():  # a worktree's: its exclude file is elsewhere
            return f"{_STATE}: {directory / '.git'} is a file (its ignore files may re-include)"
        for name in _IGNORE_FILES:
            if _reincludes(directory / name):
                return f"{_STATE}: {directory / name} re-includes files (a `!` line)"
    return None


# rg's glob syntax: anything with one of these is not judged, but asked.
_GLOB_SPECIALS = frozenset("*?[]{}\\!")


def _cannot_match_state(glob: str) -> bool:
    """Whether an rg whitelist glob surely cannot bring ``.craft`` in (it would
    have to match that directory's own name or path; rg's globs have braces,
    classes, escapes and case-insensitive forms, so only simple shapes are
    judged, any case): ``*.py``-like suffixes, plain names, and paths whose
    first part is a plain name."""
    state = STATE_DIR.casefold()
    if "/" in glob.strip("/"):
        first = glob.lstrip("/").split("/", 1)[0]
        return _plain(first) and first.casefold() != state
    name = glob.strip("/")
    if name.startswith("*") and _plain(name[1:]):
        return bool(name[1:]) and not state.endswith(name[1:].casefold())
    return _plain(name) and name.casefold() != state


def _plain(text: str) -> bool:
    """No glob syntax in ``text`` (and not empty)."""
    return bool(text) and not (_GLOB_SPECIALS & set(text))


def _reincludes(path: Path) -> bool:
    """Whether an ignore file has a ``!`` line (or cannot be read: assume so)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as lines:
            # A byte-order mark is stripped too: newer rg ignores one.
            return any(line.lstrip("\ufeff \t").startswith("!") for line in lines)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:
        return True


def _diff(parsed: Parsed, call: Call) -> str | None:
    operands = [word for word in parsed.positional if word != "-"]
    for word in operands:
        directory = call.real(word)
        if not directory.is_dir():
            continue
        try:
            with os.scandir(directory) as entries:
                names = [entry.name for entry in islice(entries, _DIFF_MAX_ENTRIES + 1)]
        except OSError:
            return f"cannot list {word}"
        if len(names) > _DIFF_MAX_ENTRIES:
            return f"compares more than {_DIFF_MAX_ENTRIES} files of {word}"
        # A file operand beside it is compared with the file of its name in here.
        names += [os.path.basename(other) for other in operands if other != word]
        for name in names:
            real = Path(os.path.realpath(directory / name))
            if not real.is_dir() and not in_workspace(call.root, real):
                return f"reads outside the workspace: {os.path.join(word, name)}"
    return None


#: The commands whose walk is checked, by name.
WALKS: dict[str, Callable[[Parsed, Call], str | None]] = {
    "grep": _grep,
    "rg": _rg,
    "diff": _diff,
}
