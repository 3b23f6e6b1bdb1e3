"""Workspace trust: what a workspace's own files may start before the user trusts it.

A workspace is data until its user says otherwise, as in editors' "workspace
trust": a checkout can carry a ``.craft/`` directory with a database (MCP
servers, cron jobs, thread policies, remembered grants), plugins, a
``config.json`` and a ``HEARTBEAT.md``, and none of that may run code because
the server was started there. The decision is the user's and lives outside
the workspace, under the user's configuration directory
(:func:`~appserver.storage.user_settings.user_home`)::

    <home>/workspaces/<digest of the workspace path>/trusted.json
        {"workspace": "/abs/path", "database": "<id>", "trustedAt": "..."}

Trust names the database it was given for: the random id a database gets
when it is created (``workspace_identity``), drawn anew whenever trust is
given, so a database that a later ``git pull`` swaps in, even one copied from
the trusted one, does not match. The server trusts a workspace by itself only
when it made everything in ``.craft/``: it created the database (the file held
no schema) and found nothing else there. Otherwise the user trusts it with
``--trust-workspace`` or a client's ``workspace/trust``. A shared PostgreSQL
store never arrives with a checkout: it is always trusted.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from appserver.storage.db import Database
from appserver.storage.user_settings import workspace_home
from appserver.storage.workspace import write_private

log = logging.getLogger("appserver.trust")

TRUST_FILE = "trusted.json"

# What the server itself makes in .craft/ before it decides on trust. The
# .gitignore (storage/craft_ignore.py) is inert: whoever wrote it, it starts nothing.
_SERVER_FILES = frozenset(
    (
        ".gitignore",
        "appserver.lock",
        "appserver.db",
        "appserver.db-wal",
        "appserver.db-shm",
        "appserver.db-journal",
        # Lock files of the processes serving the workspace (storage/cluster_sqlite.py):
        # another process may have made them a moment ago; nothing in them runs.
        "nodes",
        "locks",
    )
)


async def database_identity(db: Database) -> str:
    """The id the database was given when it was created."""
    rows = await db.fetch("SELECT id FROM workspace_identity")
    return str(rows[0]["id"]) if rows else ""


@dataclass
class WorkspaceTrust:
    """Whether this workspace's own files may run code, and why (for clients)."""

    workspace: Path
    database: str
    db: Database | None = None  # where the id is drawn anew when trust is given
    trusted: bool = False
    reason: str = ""
    home: Path | None = None
    #: Run by whoever trusted the workspace at run time (start what waited for it).
    on_trusted: list[Callable[[], Awaitable[object]]] = field(default_factory=list)

    @property
    def record_path(self) -> Path:
        return workspace_home(self.workspace, self.home) / TRUST_FILE

    def read_record(self) -> dict[str, object] | None:
        try:
            value = json.loads(self.record_path.read_text("utf-8"))
        except (OSError, ValueError):
            return None
        return value if isinstance(value, dict) else None

    async def trust(self, reason: str) -> bool:
        """Trust the workspace and its database, recorded for later starts;
        ``True`` when it was not trusted before (then run :attr:`on_trusted`)."""
        if self.db is not None:
            # A fresh id: a copy of this database that someone else holds (or a
            # file a pull swaps in) no longer matches what the record names.
            self.database = secrets.token_hex(16)
            await self.db.write([("UPDATE workspace_identity SET id = ?", (self.database,))])
        record = {
            "workspace": str(self.workspace),
            "database": self.database,
            "trustedAt": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        try:
            write_private(self.record_path, json.dumps(record, indent=2) + "\n")
        except OSError as exc:
            # Trusted for this run all the same: the user asked for it now.
            log.warning("could not record trust in %s: %s", self.record_path, exc.strerror)
        was = self.trusted
        self.trusted, self.reason = True, reason
        return not was

    def revoke(self) -> None:
        """Forget the trust (from the next start on; what runs keeps running)."""
        with suppress(FileNotFoundError):
            self.record_path.unlink()
        self.trusted = False
        self.reason = "trust was withdrawn"


async def settle_trust(
    db: Database, workspace: Path, *, flag: bool = False, home: Path | None = None
) -> WorkspaceTrust:
    """Decide at start whether ``workspace`` (with the open ``db``) is trusted."""
    workspace = workspace.resolve()
    if db.dialect != "sqlite":
        return WorkspaceTrust(workspace, "", trusted=True, reason="the store is shared")
    trust = WorkspaceTrust(workspace, await database_identity(db), db=db, home=home)
    foreign = _foreign_state(workspace / ".craft")
    if flag:
        await trust.trust("--trust-workspace")
    elif db.created and not foreign:
        await trust.trust("the server made everything in this workspace's .craft/")
    else:
        record = trust.read_record()
        if record and trust.database and record.get("database") == trust.database:
            trust.trusted, trust.reason = True, "trusted by the user"
        elif record:
            trust.reason = "its database is not the one the user trusted"
        else:
            what = ", ".join(foreign) if foreign and db.created else "its database"
            trust.reason = (
                f".craft/ came with the workspace ({what}) and the user has not trusted it"
            )
    if not trust.trusted:
        log.warning(
            "workspace %s is not trusted (%s): its MCP servers, plugins, cron jobs, periodic "
            "heartbeat and auto-approval stay off until it is (--trust-workspace or "
            "workspace/trust)",
            workspace,
            trust.reason,
        )
    return trust


def _foreign_state(craft_dir: Path) -> list[str]:
    """What ``.craft/`` holds that the server did not just make (sorted names)."""
    try:
        names = [entry.name for entry in craft_dir.iterdir()]
    except OSError:
        return []
    return sorted(name for name in names if name not in _SERVER_FILES)
