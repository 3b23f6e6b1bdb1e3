"""The storage failing under the server (a full disk, an I/O error, a read-only
file system, a damaged database file), told apart from bugs so that start-up
reports it in one line (:func:`disk_failure`) instead of a traceback."""

from __future__ import annotations

import errno
import sqlite3

# SQLite primary result codes (the low byte of an extended code) of a disk that
# cannot take a write: IOERR, FULL, CANTOPEN, READONLY.
_SQLITE_DISK_CODES = frozenset({10, 13, 14, 8})
# ... and of a file that is not (or no longer) a database: CORRUPT, NOTADB.
_SQLITE_DAMAGED_CODES = frozenset({11, 26})
_DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG, errno.EROFS})


class StorageFailed(Exception):
    """The server could not start because its storage failed (the message is
    one line, e.g. ``database or disk is full``); raised once its clients have
    been answered."""


def disk_failure(error: BaseException) -> str | None:
    """A one-line description when ``error`` (or what it was raised from) is
    the disk refusing a read or write, or the database file damaged, else ``None``."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, StorageFailed):
            return str(current)
        if isinstance(current, BaseExceptionGroup):  # a task group's failure
            for inner in current.exceptions:
                if (found := disk_failure(inner)) is not None:
                    return found
        if isinstance(current, sqlite3.Error):
            code = getattr(current, "sqlite_errorcode", None)
            if isinstance(code, int) and code & 0xFF in _SQLITE_DISK_CODES:
                return str(current) or "database error"
            if isinstance(code, int) and code & 0xFF in _SQLITE_DAMAGED_CODES:
                return f"the database is damaged: {current}"
        if isinstance(current, OSError) and current.errno in _DISK_ERRNOS:
            return current.strerror or str(current)
        current = current.__cause__ or current.__context__
    return None
