"""Timestamps and identifiers in the shapes the protocol uses."""

from __future__ import annotations

import secrets
import string
from datetime import UTC, datetime

_ALPHABET = string.ascii_lowercase + string.digits


def now_iso() -> str:
    """UTC now as fixed-width ISO-8601 with milliseconds (sorts as text)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def new_thread_id() -> str:
    """``thread_<yyyymmdd>_<6 random base36 chars>``, like DotCraft's."""
    suffix = "".join(secrets.choice(_ALPHABET) for _ in range(6))
    return f"thread_{datetime.now(UTC):%Y%m%d}_{suffix}"
