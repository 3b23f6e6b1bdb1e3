"""Workspace trust: what a workspace's own files may start before the user trusts it.

A workspace is data until its user says otherwise, as in editors' "workspace
trust": a checkout can carry a ``.craft/`` directory with a database (MCP
servers, cron jobs, thread policies) and plugins, and none of that may run
code because the server was started there. The decision is the user's and
lives outside the workspace, under the user's configuration directory
(:func:`~appserver.storage.user_settings.user_home`)::

    <home>/workspaces/<digest of the workspace path>/trusted.json
        {"workspace": "/abs/path", "database": "<id>", "trustedAt": "..."}

Trust names the database it was given for (the random id a database gets when
it is created, ``workspace_identity``), so a database swapped in later by a
``git pull`` is not covered. The server records trust itself when it created
the database (everything in it came from this user's clients), when started
with ``--trust-workspace``, and when a client calls ``workspace/trust``.
A shared PostgreSQL store never arrives with a checkout: it is always trusted.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from appserver.storage.db import Database
from appserver.storage.user_settings import workspace_home

log = logging.getLogger("appserver.trust")

TRUST_FILE = "trusted.json"


async def database_identity(db: Database) -> str:
    """The id the database was given when it was created."""
    rows = await db.fetch("SELECT id FROM workspace_identity")
    return str(rows[0]["id"]) if rows else ""


@dataclass
class WorkspaceTrust:
    """Whether this workspace's own files may run code, and why (for clients)."""

    workspace: Path
    database: str
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

    def trust(self, reason: str) -> bool:
        """Trust the workspace and its database, recorded for later starts;
        ``True`` when it was not trusted before (then run :attr:`on_trusted`)."""
        record = {
            "workspace": str(self.workspace),
            "database": self.database,
            "trustedAt": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        try:
            _write_private(self.record_path, json.dumps(record, indent=2) + "\n")
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
        return WorkspaceTrust(workspace, "", True, "the store is shared, not the workspace's")
    trust = WorkspaceTrust(workspace, await database_identity(db), home=home)
    if flag:
        trust.trust("--trust-workspace")
    elif db.created:
        trust.trust("the server created this workspace's database")
    else:
        record = trust.read_record()
        if record and record.get("database") == trust.database:
            trust.trusted, trust.reason = True, "trusted by the user"
        elif record:
            trust.reason = "its database is not the one the user trusted"
        else:
            trust.reason = "its .craft/ came with the workspace and the user has not trusted it"
    if not trust.trusted:
        log.warning(
            "workspace %s is not trusted (%s): its MCP servers, plugins, cron jobs and "
            "auto-approval stay off until it is (--trust-workspace or workspace/trust)",
            workspace,
            trust.reason,
        )
    return trust


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically, readable by the user only."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, temp = tempfile.mkstemp(prefix=".trusted.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(temp)
        raise
