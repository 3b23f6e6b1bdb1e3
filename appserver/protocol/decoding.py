"""The one JSON decoder for what clients send, at every door.

Every line or frame a client sends (JSON-RPC over stdio and WebSocket, and
each face's protocol) is parsed by :func:`loads_client`, so the same input
is refused the same way everywhere:

* nesting deeper than :data:`MAX_JSON_DEPTH` arrays and objects (Python's
  parser would recurse until ``RecursionError``, and whatever walks the
  value afterwards too);
* an integer literal of more than :data:`MAX_JSON_INT_DIGITS` digits (its
  conversion costs time quadratic in its length; Python itself stops at
  4,300 digits with a ``ValueError`` that is no ``JSONDecodeError``);
* anything that is not JSON.

The size of a message is bounded before it gets here, by the transport that
read it (each door's line or frame limit). Each door answers
:class:`JsonRejected` with its own protocol's parse error and goes on.
"""

import json
import math
import re
from itertools import accumulate
from typing import Any

__all__ = ["MAX_JSON_DEPTH", "MAX_JSON_INT_DIGITS", "JsonRejected", "loads_client"]

MAX_JSON_DEPTH = 256
"""Arrays and objects nested inside each other, the outermost counting as 1."""
MAX_JSON_INT_DIGITS = 1_000
"""Digits of one integer literal (a 64-bit integer has at most 20)."""

# A JSON string (escapes included) or, unterminated, the rest of the text: every
# quote starts a match, so removing strings takes one pass (no retries).
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
# Every byte but brackets (deleted), and each byte's change of depth.
_NOT_BRACKETS = bytes(byte for byte in range(256) if byte not in b"[]{}")
_DEPTH_STEP = tuple(1 if byte in b"[{" else -1 if byte in b"]}" else 0 for byte in range(256))
# A run of more digits than the limit; the look-behind makes only a run's
# first digit start a match, so the search stays linear in the text.
_LONG_DIGITS = re.compile(rf"(?<![0-9])[0-9]{{{MAX_JSON_INT_DIGITS + 1}}}")


class JsonRejected(ValueError):
    """The text is not JSON this server takes; the message says why."""


def _bounded_int(text: str) -> int:
    digits = len(text) - (text[:1] == "-")
    if digits > MAX_JSON_INT_DIGITS:
        raise JsonRejected(
            f"an integer of {digits:,} digits exceeds the limit of {MAX_JSON_INT_DIGITS:,}"
        )
    return int(text)


def _no_constant(name: str) -> Any:
    raise JsonRejected(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    number = float(text)
    if math.isinf(number):
        raise JsonRejected(f"number out of range: {text[:40]}")
    return number


def _too_deep(text: str) -> bool:
    """Whether ``text`` nests arrays and objects deeper than :data:`MAX_JSON_DEPTH`."""
    # Fewer brackets than the limit cannot nest past it: most messages stop here.
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return False
    outside_strings = _STRING.sub("", text).encode("utf-8", "surrogatepass")
    brackets = outside_strings.translate(None, _NOT_BRACKETS)
    # The running depth after each bracket, computed in C (no Python loop per bracket).
    return max(accumulate(map(_DEPTH_STEP.__getitem__, brackets)), default=0) > MAX_JSON_DEPTH


def loads_client(text: str, *, strict_numbers: bool = False) -> Any:
    """Parse one message a client sent; :class:`JsonRejected` when it is not
    JSON or passes a bound (depth, integer digits).

    ``strict_numbers`` also refuses ``NaN``/``Infinity`` and numbers past a
    double's range (``1e999``), which JSON does not have; doors whose models
    would fail on such a value deep inside ask for it.
    """
    if _too_deep(text):
        raise JsonRejected(f"nested deeper than {MAX_JSON_DEPTH} levels")
    options: dict[str, Any] = {}
    # Checking every integer is slower than Python's own parsing; only text
    # with a long run of digits somewhere (a string may hold it) needs it.
    if _LONG_DIGITS.search(text):
        options["parse_int"] = _bounded_int
    if strict_numbers:
        options.update(parse_constant=_no_constant, parse_float=_finite_float)
    try:
        return json.loads(text, **options)
    except JsonRejected:
        raise
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, and anything Python refuses
        raise JsonRejected(str(exc)) from None
