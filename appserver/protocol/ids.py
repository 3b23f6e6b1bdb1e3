"""Timestamps and identifiers in the shapes the protocol uses."""

import secrets
import string
import time
from datetime import UTC, datetime, timedelta

_ALPHABET = string.ascii_lowercase + string.digits
# The last millisecond now_iso formatted, and its text: a streamed turn stamps
# every delta, ten or more a millisecond. One tuple, so threads never see a
# millisecond with another's text.
_formatted: tuple[int, str] = (-1, "")


def now_iso() -> str:
    """UTC now as fixed-width ISO-8601 with milliseconds (sorts as text)."""
    global _formatted
    millis = time.time_ns() // 1_000_000
    formatted = _formatted
    if formatted[0] != millis:
        moment = datetime.fromtimestamp(millis // 1000, UTC)
        text = iso_at(moment.replace(microsecond=millis % 1000 * 1000))
        formatted = _formatted = (millis, text)
    return formatted[1]


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
