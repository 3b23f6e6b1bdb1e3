"""``<workspace>/.craft/.gitignore``: the server's machine state stays out of git.

The server keeps its database, locks, terminal output and downloaded images
under ``.craft/``, inside the user's repository. Without an ignore file
``git status`` lists ``.craft/`` as untracked after the first run. What a user
writes there on purpose (``skills/``, ``commands/``, ``plugins/``,
``HEARTBEAT.md``, ``config.json``) is not listed, so it can be committed.

The file ignores itself too, as ``.pytest_cache/`` and Python's venvs do: a
``.craft/`` holding only machine state then leaves ``git status`` clean
(``git add -f .craft/.gitignore`` commits it anyway). An existing file is
never replaced: the user's own rules win.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

log = logging.getLogger("appserver.storage")

IGNORE_FILE = ".gitignore"

CRAFT_GITIGNORE = """\
# Written by appserver (once; edit freely, it is never overwritten): the
# server's machine state in this folder, kept out of git. What you write here
# yourself (skills/, commands/, plugins/, HEARTBEAT.md, config.json) is not
# listed: commit it if you like. This file ignores itself; commit it with
# `git add -f .craft/.gitignore`.
/.gitignore
# The database (SQLite, its write-ahead log and shared memory) and locks.
/appserver.db
/appserver.db-*
/appserver.lock
/nodes/
/locks/
/cluster-workspace
# Terminal output and images fetched for the model.
/terminals/
/attachments/
# Half-written files of an atomic replace (config.json).
/.*.tmp
"""


def write_craft_gitignore(craft_dir: Path) -> bool:
    """Create ``craft_dir`` (if needed) and its ``.gitignore`` unless one exists;
    ``True`` if it was written. Never fails the caller: a read-only or full
    disk only costs the ignore file (the lock and database report their own
    errors). A ``.craft`` that is a symbolic link is left alone (the lock
    refuses it)."""
    try:
        if craft_dir.is_symlink():
            return False
        craft_dir.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(craft_dir / IGNORE_FILE, flags, 0o644)
    except FileExistsError:
        return False  # the user's (or an earlier run's): never replaced
    except OSError as exc:
        log.debug("could not write %s/%s: %s", craft_dir, IGNORE_FILE, exc)
        return False
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(CRAFT_GITIGNORE)
    except OSError as exc:
        log.debug("could not write %s/%s: %s", craft_dir, IGNORE_FILE, exc)
        with contextlib.suppress(OSError):
            os.unlink(craft_dir / IGNORE_FILE)  # no half file that would stop the next try
        return False
    return True
