"""YAML front matter of Markdown files (SKILL.md, custom command files).

A file may start with a ``---`` line, YAML, and a closing ``---`` line. Real
SKILL.md files often are not valid YAML (``description: Use when: ...`` has
a second colon), so when YAML parsing fails, or does not give a mapping, the
block is read the forgiving way DotCraft reads it: one ``key: value`` per
line, split at the first colon, quotes trimmed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

# The closing fence must be a line of its own; the body starts after it.
_FENCED = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.DOTALL)
_EMPTY_FENCED = re.compile(r"\A---[ \t]*\r?\n---[ \t]*(?:\r?\n|\Z)")


@dataclass
class FrontMatter:
    """A Markdown file split into its front matter and body."""

    fields: dict[str, Any] | None  # None: the file has no front matter block
    body: str
    flat: dict[str, str] = field(default_factory=dict)  # fields as text (wire metadata)

    def text(self, key: str) -> str | None:
        """A field as a stripped, non-empty string (keys match case-insensitively)."""
        value = self.get(key)
        if value is None or isinstance(value, dict | list):
            return None
        text = _as_text(value).strip()
        return text or None

    def get(self, key: str) -> Any:
        """A raw field value; keys match case-insensitively."""
        for name, value in (self.fields or {}).items():
            if name.lower() == key.lower():
                return value
        return None

    def names(self, key: str) -> list[str]:
        """A list field given as a YAML list or a comma-separated string."""
        value = self.get(key)
        items = value if isinstance(value, list) else str(value or "").split(",")
        return [str(item).strip() for item in items if str(item).strip()]

    def flag(self, key: str) -> bool:
        """A boolean field (``true``/``yes``/``1`` in any case)."""
        value = self.get(key)
        if isinstance(value, bool):
            return value
        return str(value).strip().lower() in ("true", "yes", "1")


def parse_front_matter(content: str) -> FrontMatter:
    """Split ``content`` into front matter and body (body stripped)."""
    text = content.removeprefix("\ufeff")
    empty = _EMPTY_FENCED.match(text)
    if empty:
        return FrontMatter(fields={}, body=text[empty.end() :].strip())
    match = _FENCED.match(text)
    if match is None:
        return FrontMatter(fields=None, body=text.strip())
    fields = _parse_block(match.group(1))
    flat = {str(key): _as_text(value) for key, value in fields.items()}
    return FrontMatter(fields=fields, body=text[match.end() :].strip(), flat=flat)


def _parse_block(block: str) -> dict[str, Any]:
    import yaml  # here: a session that reads no front matter never pays for it

    try:
        parsed = yaml.safe_load(block)
    except yaml.YAMLError:
        parsed = None
    if isinstance(parsed, dict):
        return {str(key): value for key, value in parsed.items()}
    fields: dict[str, Any] = {}
    for line in block.splitlines():
        key, colon, value = line.partition(":")
        if colon and key.strip() and not line.startswith((" ", "\t", "#")):
            fields[key.strip()] = value.strip().strip("\"'")
    return fields


def _as_text(value: Any) -> str:
    """How a front matter value appears in the wire ``metadata`` map."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, list) and all(not isinstance(item, dict | list) for item in value):
        return ", ".join(_as_text(item) for item in value)
    if isinstance(value, dict | list):
        return json.dumps(value, default=str, ensure_ascii=False)
    return str(value)  # numbers, dates
