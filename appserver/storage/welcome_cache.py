"""The persisted welcome suggestions: ``<workspace>/.craft/cache/welcome-suggestions.json``.

DotCraft's file, in its shape (PascalCase keys, read ignoring case)::

    {"SchemaVersion": 1,
     "Result": {"Items": [{"Title": "...", "Prompt": "...", "Reason": "..."}],
                "Source": "dynamic", "GeneratedAt": "...", "Fingerprint": "..."}}

Written whole (temporary file, then rename) after each successful refresh, read
when the server has no suggestions in memory (after a restart). A file that is
missing, too large, a link, in a linked ``cache`` directory, or not in that
shape reads as nothing; it is never repaired, only replaced by the next refresh.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from appserver.storage.workspace import write_private

if TYPE_CHECKING:
    from appserver.protocol.suggestions import WelcomeSuggestionsResult

log = logging.getLogger("appserver.storage")

CACHE_DIR = "cache"
CACHE_FILE = "welcome-suggestions.json"
SCHEMA_VERSION = 1
MAX_FILE_BYTES = 256 * 1024


def cache_path(craft_dir: Path) -> Path:
    """Where the snapshot of the workspace whose state is ``craft_dir`` lives."""
    return craft_dir / CACHE_DIR / CACHE_FILE


def _field(node: Any, name: str) -> Any:
    if not isinstance(node, dict):
        return None
    wanted = name.lower()
    return next((value for key, value in node.items() if key.lower() == wanted), None)


def read_snapshot(craft_dir: Path) -> WelcomeSuggestionsResult | None:
    """The stored suggestions, or ``None`` (see the module docstring)."""
    from appserver.protocol.suggestions import WelcomeSuggestion, WelcomeSuggestionsResult

    path = cache_path(craft_dir)
    try:
        if path.parent.is_symlink() or path.is_symlink():
            return None
        if path.stat().st_size > MAX_FILE_BYTES:
            return None
        document = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None
    result = _field(document, "Result")
    items = _field(result, "Items")
    if _field(document, "SchemaVersion") != SCHEMA_VERSION or not isinstance(items, list):
        return None
    try:
        return WelcomeSuggestionsResult(
            items=[
                WelcomeSuggestion(
                    title=_field(item, "Title"),
                    prompt=_field(item, "Prompt"),
                    reason=_field(item, "Reason") or "",
                )
                for item in items
            ],
            source=_field(result, "Source"),
            generated_at=_field(result, "GeneratedAt"),
            fingerprint=_field(result, "Fingerprint") or "",
        )
    except ValidationError:
        return None


def write_snapshot(craft_dir: Path, result: WelcomeSuggestionsResult) -> None:
    """Replace the stored suggestions with ``result`` (atomically). A linked
    ``cache`` directory is left alone (nothing is written through a link)."""
    path = cache_path(craft_dir)
    if path.parent.is_symlink():
        log.warning("not writing the welcome suggestions: %s is a link", path.parent)
        return
    document = {
        "SchemaVersion": SCHEMA_VERSION,
        "Result": {
            "Items": [
                {"Title": item.title, "Prompt": item.prompt, "Reason": item.reason}
                for item in result.items
            ],
            "Source": result.source,
            "GeneratedAt": result.generated_at,
            "Fingerprint": result.fingerprint,
        },
    }
    write_private(path, json.dumps(document, ensure_ascii=False, indent=2) + os.linesep)
