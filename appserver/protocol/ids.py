"""Timestamps and identifiers in the shapes the protocol uses."""

from __future__ import annotations

import secrets
import string
from datetime import UTC, datetime, timedelta

_ALPHABET = string.ascii_lowercase + string.digits


def now_iso() -> str:
    """UTC now as fixed-width ISO-8601 with milliseconds (sorts as text)."""
    return iso_at(datetime.now(UTC))


def iso_at(moment: datetime) -> str:
    """An aware ``moment`` in :func:`now_iso`'s shape (``2026-01-02T03:04:05.000Z``)."""
    # isoformat is a third faster than strftime; "+00:00" becomes "Z".
    return moment.astimezone(UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


def iso_ago(seconds: float) -> str:
    """:func:`now_iso` of ``seconds`` ago (the same shape, so it compares as text)."""
    return iso_at(datetime.now(UTC) - timedelta(seconds=seconds))


def new_thread_id() -> str:
    """``thread_<yyyymmdd>_<6 random base36 chars>``, like DotCraft's."""
    suffix = "".join(secrets.choice(_ALPHABET) for _ in range(6))
    return f"thread_{datetime.now(UTC):%Y%m%d}_{suffix}"
