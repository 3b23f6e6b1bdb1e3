"""What every SQLite connection to a workspace database is set to, and the migrations' own
table: plain constants, so creating a database ahead of time (storage.preparation) needs
no more than the standard library."""

from __future__ import annotations

# Every connection's settings. synchronous first: a new database then switches
# to WAL without the default (FULL) fsyncs of the rollback journal.
PRAGMAS = (
    "PRAGMA synchronous = NORMAL",
    "PRAGMA journal_mode = WAL",
    "PRAGMA foreign_keys = ON",
    "PRAGMA busy_timeout = 5000",
)
MIGRATIONS_TABLE = (
    "CREATE TABLE IF NOT EXISTS schema_migrations ("
    " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
)
