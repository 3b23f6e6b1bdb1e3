"""Streamed text grown in place, one delta at a time.

``holder[key] = holder[key] + delta`` (or ``holder.text += delta``) copies all
the text so far at every delta: quadratic in an answer's length (a 30,000-delta
answer spent 1.6 s copying). With the holder's reference dropped first, a local
is the string's only reference and CPython grows it in place.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any


def append_text(payload: MutableMapping[str, Any], key: str, text: str) -> None:
    """``payload[key] += text`` in place (a missing or non-text value is read
    as text first); the key keeps its place in the payload."""
    current = payload.get(key, "")
    payload[key] = ""
    if not isinstance(current, str):
        current = str(current)
    current += text
    payload[key] = current


def append_attribute(holder: object, name: str, text: str) -> None:
    """``holder.<name> += text`` in place (the attribute holds text)."""
    current: str = getattr(holder, name)
    setattr(holder, name, "")
    current += text
    setattr(holder, name, current)
