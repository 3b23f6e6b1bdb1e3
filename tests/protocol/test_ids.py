"""Timestamps in the protocol's shape (appserver/protocol/ids.py)."""

from __future__ import annotations

from datetime import UTC, datetime

from appserver.protocol.ids import iso_at, now_iso


def test_now_iso_is_the_current_millisecond_in_the_fixed_shape() -> None:
    before = iso_at(datetime.now(UTC))
    stamps = [now_iso() for _ in range(1000)]  # most from the per-millisecond memo
    after = iso_at(datetime.now(UTC))
    assert stamps == sorted(stamps)
    assert before <= stamps[0] and stamps[-1] <= after
    assert all(len(stamp) == 24 and stamp.endswith("Z") for stamp in stamps)
    assert datetime.fromisoformat(stamps[-1]).tzinfo is not None
