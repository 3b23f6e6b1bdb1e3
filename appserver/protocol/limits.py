"""Bounds on what a client may send, and on what the server sends back.

Every integer in a request's params is a signed 64-bit value at most (SQLite's
INTEGER, and what other languages' clients can hold), and tighter where the
value feeds something with a smaller range (cron durations and times feed
``datetime``). Every client-supplied string the server stores (thread names,
identities, cron jobs, settings) has a maximum length, and stored
configuration objects a maximum encoded size, so nothing stored can later
make an answer larger than a frame. Turn input is not bounded here: the
frame size bounds it.

A value out of bounds is ``-32602`` naming the field. The bounds appear in
the JSON Schema (``minimum``/``maximum``/``maxLength``) and in
``docs/protocol.md``.
"""

from typing import TYPE_CHECKING

from appserver.protocol.encoding import model_json

if TYPE_CHECKING:
    from pydantic import BaseModel

# --- integers ------------------------------------------------------------------------

# Give every integer field of a params model ``Field(ge=..., le=...)`` within these
# (tests/test_limits.py fails on one without). Not an ``Annotated[int, Field(...)]``
# alias on purpose: a field that adds its own ``Field(ge=1)`` to such an alias
# silently keeps the alias's bounds instead.
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

# --- strings that are stored -----------------------------------------------------------

MAX_NAME_CHARS = 256
"""Identifiers and names: channel names, user ids, modes, models, skill and plugin ids."""
MAX_LABEL_CHARS = 1_000
"""Human-readable labels: a thread's ``displayName``, a cron job's name, ``channelContext``."""
MAX_PATH_CHARS = 8_192
"""Paths, URLs and API keys (twice Linux's ``PATH_MAX``; what HTTP servers take in a URL)."""
MAX_TEXT_CHARS = 100_000
"""Stored free text that is not turn input: a cron job's message."""

# Their field types (``Name``, ``Label``, ``PathText``, ``LongText``) are in
# ``protocol/base.py``, beside pydantic: this module is read without it.

# --- stored objects, by encoded size ---------------------------------------------------

MAX_THREAD_CONFIG_BYTES = 256 * 1024
"""A thread's configuration (``thread/start`` ``config``, ``thread/config/update``), as JSON."""
MAX_SERVER_CONFIG_BYTES = 64 * 1024
"""An MCP server or external channel configuration, as JSON."""
MAX_PLAN_BYTES = 256 * 1024
"""A thread's plan (the model's ``CreatePlan``/``UpdateTodos``), as JSON: it is stored, sent
whole with each ``plan/updated`` and returned by ``thread/read``."""

# --- frames ----------------------------------------------------------------------------

MAX_FRAME_BYTES = 4 * 1024 * 1024
"""The largest message the transports accept (stdio line, WebSocket frame)."""
LIST_PAGE_BYTES = MAX_FRAME_BYTES // 4
"""``thread/list`` ends a page early (with ``nextCursor``) before its result passes this."""


def utf8_size(text: str) -> int:
    """Bytes of ``text`` (wire JSON, whose lone surrogates are escaped) in UTF-8."""
    return len(text) if text.isascii() else len(text.encode())


def encoded_size(model: "BaseModel") -> int:
    """Bytes of ``model`` as wire JSON (UTF-8)."""
    return utf8_size(model_json(model))


def check_encoded_size(model: "BaseModel", limit: int) -> None:
    """Raise ``ValueError`` (-> ``-32602``) when ``model`` encodes to more than ``limit`` bytes."""
    size = encoded_size(model)
    if size > limit:
        raise ValueError(f"must be at most {limit:,} bytes as JSON (got {size:,})")


def check_length(value: str | None, limit: int, what: str) -> None:
    """Raise ``ValueError`` when ``value`` (a nested field named ``what``) is too long."""
    if value is not None and len(value) > limit:
        raise ValueError(f"'{what}' must be at most {limit:,} characters (got {len(value):,})")
