"""JSON text for wire models and plain JSON data: compact, one line, UTF-8 safe.

Shared by every layer that writes JSON (the stored event log, the JSON-RPC
framing, other protocols' encoders), so the stored form of an event and the
params of its notification are the same text.
"""

import json
import math
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # only its method is called: importing pydantic costs a one-shot ~35 ms
    from pydantic import BaseModel

# JSON has no NaN or infinity: a value holding one (a model's tool arguments or a
# client's answer, both parsed leniently) is written with ``null`` there, as the
# wire models write it (pydantic's default), never as a bare ``NaN`` that strict
# parsers (JavaScript's JSON.parse) refuse.
_encoder = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), check_circular=False, allow_nan=False
)
# The same, for messages that may hold values JSON has no form for (text then).
_lenient = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), check_circular=False, default=str, allow_nan=False
)
_SURROGATE = re.compile("[\ud800-\udfff]")
# What JSONEncoder.encode does for a str without ensure_ascii (C-accelerated).
_encode_string = json.encoder.encode_basestring


def finish(text: str) -> str:
    """Make encoded JSON safe to send as one line."""
    # json escapes \n and other control characters inside strings; U+2028/2029
    # are legal in JSON but split lines in JavaScript and Python's
    # str.splitlines, so escape them too: one frame is always one line.
    if "\u2028" in text or "\u2029" in text:
        text = text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    # A peer can send a lone surrogate as a "\ud800" escape (in an id, a method
    # name, a thread id we echo). Raw, it cannot be encoded as UTF-8 and would
    # kill the writer; it only ever sits inside a JSON string, so escape it back.
    if not text.isascii() and _SURROGATE.search(text):
        text = _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text


def scrub_surrogates(value: Any) -> Any:
    """``value`` with every lone UTF-16 surrogate in its strings (walking dicts
    and lists) replaced by U+FFFD.

    For text the server did not choose and must keep: a model's output, a
    client's answer to a server request. JSON allows ``"\ud800"``; such a
    string can be neither stored nor sent as UTF-8, and one would otherwise
    stop the turn that meets it. Unchanged values are returned as they are.
    """
    if isinstance(value, str):
        if value.isascii() or not _SURROGATE.search(value):
            return value
        return _SURROGATE.sub("\ufffd", value)
    # Unchanged parts come back as the same objects: identity says whether to copy.
    if isinstance(value, dict):
        fixed: dict[Any, Any] = {}
        changed = False
        for key, item in value.items():
            new_key, new_item = scrub_surrogates(key), scrub_surrogates(item)
            changed = changed or new_key is not key or new_item is not item
            fixed[new_key] = new_item
        return fixed if changed else value
    if isinstance(value, list):
        items = [scrub_surrogates(item) for item in value]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    return value


def dumps(value: Any) -> str:
    """Compact single-line JSON for an already JSON-ready value (a float that is
    not finite is written as ``null``)."""
    try:
        return finish(_encoder.encode(value))
    except ValueError:  # a NaN or infinity somewhere: the rare path
        return finish(_encoder.encode(finite(value)))


def finite(value: Any) -> Any:
    """``value`` with every float that is not finite (walking dicts, lists and
    tuples) replaced by ``None``."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite(item) for item in value]
    return value


def dumps_text(text: str) -> str:
    """:func:`dumps` of a string: the JSON string literal, straight from the
    C encoder (a streamed delta's text, each one)."""
    return finish(_encode_string(text))


def dumps_lenient(value: Any) -> str:
    """As :func:`dumps`, but a value that is no JSON value becomes its text
    (never an error: a face's frame carries what the runtime handed it). One
    encoder for every frame: ``json.dumps`` with options builds one a call."""
    try:
        return finish(_lenient.encode(value))
    except ValueError:  # a float that is not finite: null, as in dumps
        return finish(_lenient.encode(finite(value)))


def model_json(value: "BaseModel") -> str:
    """A wire model as compact JSON (camelCase, nulls left out)."""
    return finish(value.model_dump_json(by_alias=True, exclude_none=True))
