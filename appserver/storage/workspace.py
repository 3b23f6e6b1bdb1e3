"""Safe edits of a DotCraft-style ``config.json`` (the user's settings for a
workspace, :mod:`appserver.storage.user_settings`), and :func:`write_private`.

The file can hold secrets (``ApiKey``), so every write produces a file with
mode ``0600`` regardless of the umask, and replaces the old file atomically
(temporary file in the same directory, ``fsync``, ``os.replace``): a crash
leaves either the old or the new file, never half of one. Edits are
read-modify-write under one lock (an in-process lock, then an ``flock`` on a
file beside it that every process editing the file takes), so two concurrent
updates, from this process or another on the same workspace, cannot lose each
other's changes. Keys are matched case-insensitively, as DotCraft does, and
an existing key keeps its spelling.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import anyio

from appserver.storage.lock import open_lock_file

SECRET_FILE_MODE = 0o600


class ConfigFileError(Exception):
    """config.json exists but cannot be read as a JSON object; we refuse to overwrite it."""


def find_key(node: dict[str, Any], key: str) -> str | None:
    """The spelling of ``key`` in ``node`` (case-insensitive), or ``None``."""
    wanted = key.lower()
    return next((name for name in node if name.lower() == wanted), None)


def get_value(node: dict[str, Any], *path: str) -> Any:
    """The value at ``path`` (case-insensitive), or ``None``."""
    current: Any = node
    for key in path:
        if not isinstance(current, dict):
            return None
        found = find_key(current, key)
        if found is None:
            return None
        current = current[found]
    return current


def set_value(node: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    """Set (or with ``None`` remove) the value at ``path``.

    Missing sections are created for a set; a removal prunes sections it
    leaves empty, so the file does not collect ``{"Permissions": {}}`` husks.
    """
    *parents, leaf = path
    chain: list[tuple[dict[str, Any], str]] = []
    current = node
    for key in parents:
        found = find_key(current, key)
        child = current.get(found) if found is not None else None
        if not isinstance(child, dict):
            if value is None:
                return  # nothing to remove
            child = {}
            found = found or key
            current[found] = child
        assert found is not None
        chain.append((current, found))
        current = child
    found_leaf = find_key(current, leaf)
    if value is None:
        if found_leaf is not None:
            del current[found_leaf]
        for parent, key in reversed(chain):
            if parent[key]:
                break
            del parent[key]
    else:
        current[found_leaf or leaf] = value


class WorkspaceConfigFile:
    """The one writer of config.json in this process."""

    def __init__(self, craft_dir: Path) -> None:
        self.craft_dir = craft_dir
        self.path = craft_dir / "config.json"
        # Not config.json itself: os.replace swaps that inode, which would drop the
        # lock. Under locks/, which .craft/.gitignore already keeps out of git.
        self.lock_path = craft_dir / "locks" / "config.json.lock"
        self._lock = anyio.Lock()

    def read(self) -> dict[str, Any]:
        """The parsed file (``{}`` when absent); :class:`ConfigFileError` when broken."""
        try:
            text = self.path.read_text("utf-8")
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise ConfigFileError(f"cannot read {self.path}: {exc.strerror}") from None
        try:
            value = json.loads(text)
        except ValueError:
            raise ConfigFileError(f"{self.path} is not valid JSON; fix or remove it") from None
        if not isinstance(value, dict):
            raise ConfigFileError(f"{self.path} does not hold a JSON object")
        return value

    @asynccontextmanager
    async def edit(self) -> AsyncIterator[dict[str, Any]]:
        """Yield the current document; what the block leaves in it is written
        back (only if it changed). Raises :class:`ConfigFileError` before
        yielding when the file is unreadable, so a broken file is never clobbered."""
        async with self._lock:
            fd = await anyio.to_thread.run_sync(self._lock_across_processes)
            try:
                document = self.read()
                before = json.dumps(document, sort_keys=True)
                yield document
                if json.dumps(document, sort_keys=True) != before:
                    await anyio.to_thread.run_sync(self._write, document)
            finally:
                os.close(fd)  # releases the flock

    def _lock_across_processes(self) -> int:
        """Open the lock file and wait for its exclusive ``flock`` (edits are short)."""
        fd = open_lock_file(self.lock_path.parent, self.lock_path.name)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _write(self, document: dict[str, Any]) -> None:
        write_private(self.path, json.dumps(document, indent=2, ensure_ascii=False) + "\n")


def write_private(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically (temporary file beside it,
    ``fsync``, ``os.replace``), readable by the user only (0600)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # mkstemp creates the file 0600 (the umask can only narrow that); chmod
    # again anyway so the mode never depends on the platform's default.
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(temp, SECRET_FILE_MODE)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(temp)
        raise
