"""``dumps_text`` (a streamed delta's text) writes what ``dumps`` writes; nothing writes NaN."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from appserver.protocol.encoding import dumps, dumps_lenient, dumps_text


@given(st.text())
def test_a_string_encodes_as_dumps_encodes_it(text: str) -> None:
    encoded = dumps_text(text)
    assert encoded == dumps(text)
    assert "\n" not in encoded and "\u2028" not in encoded and "\u2029" not in encoded
    assert json.loads(encoded) == text


def test_line_separators_and_lone_surrogates_are_escaped() -> None:
    assert dumps_text("a\u2028b\u2029c") == '"a\\u2028b\\u2029c"'
    assert dumps_text("x\ud800y") == '"x\\ud800y"'


def test_floats_json_has_no_form_for_are_written_as_null() -> None:
    # A model's tool arguments and a client's answers are parsed leniently (Python's
    # json reads NaN): a frame or stored event made of them must stay JSON.
    value = {"n": float("nan"), "l": [float("inf"), (-float("inf"), 1.0)], "s": "NaN"}
    expected = '{"n":null,"l":[null,[null,1.0]],"s":"NaN"}'
    assert dumps(value) == expected
    assert dumps_lenient(value) == expected
