"""Streamed text grows in place (runtime/streamed_text.py): an item's payload,
a face's attribute."""

from __future__ import annotations

from typing import Any

from appserver.runtime.streamed_text import append_attribute, append_text


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


class Message:
    def __init__(self) -> None:
        self.text = ""


def test_an_attribute_grows_the_same_way() -> None:
    message = Message()
    for number in range(30_000):
        append_attribute(message, "text", f"{number} ")
    assert message.text == "".join(f"{number} " for number in range(30_000))
