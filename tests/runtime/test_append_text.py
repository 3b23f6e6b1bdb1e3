"""Streamed text accumulates in an item's payload (runtime/turns/items.py)."""

from __future__ import annotations

from typing import Any

from appserver.runtime.turns.items import append_text


def test_text_accumulates_in_place_and_keeps_its_key_order() -> None:
    payload: dict[str, Any] = {"text": "", "phase": "final"}
    for number in range(30_000):
        append_text(payload, "text", f"{number} ")
    assert list(payload) == ["text", "phase"]
    assert payload["text"] == "".join(f"{number} " for number in range(30_000))


def test_a_missing_value_starts_the_text_and_a_number_is_read_as_text() -> None:
    payload: dict[str, Any] = {"count": 12}
    append_text(payload, "text", "a")
    append_text(payload, "text", "b")
    append_text(payload, "count", "3")
    assert payload == {"count": "123", "text": "ab"}
