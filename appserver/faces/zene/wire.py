"""The wire format of Zene Host Protocol v1: a request line in, a flat response line out.

What a request holds (:class:`Request`) and how a line is checked into one
(:func:`parse_request`, :class:`Rejected` for a line that is not a valid request), the
response object every answer is (:func:`response`, :func:`failure`, :func:`invalid`)
and its one-line encoding, with the protocol's error codes and exit codes.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from typing import Any

from appserver.protocol.decoding import JsonRejected, loads_client

PROTOCOL_VERSION = 1
DEFAULT_TIMEOUT_MS = 120_000

INVALID_REQUEST = "INVALID_REQUEST"
TIMEOUT = "TIMEOUT"
PROVIDER_AUTH = "PROVIDER_AUTH"
PROVIDER_RATE_LIMIT = "PROVIDER_RATE_LIMIT"
PROVIDER_DOWN = "PROVIDER_DOWN"
INTERNAL = "INTERNAL"

# The turn's error item code -> the protocol's error code (anything else: INTERNAL).
PROVIDER_CODES = {
    "provider_auth": PROVIDER_AUTH,
    "provider_rate_limit": PROVIDER_RATE_LIMIT,
    "provider_unavailable": PROVIDER_DOWN,
    "provider_timeout": PROVIDER_DOWN,
}

EXIT_OK = 0
EXIT_STALLED = 1  # the client stopped reading its responses: it was dropped
EXIT_INPUT = 2
EXIT_CONFIG = 3
EXIT_RUNTIME = 4


@dataclass
class Request:
    """A validated ``run`` request."""

    request_id: str
    session_id: str
    prompt: str
    channel_id: str | None
    agent: str | None
    timeout_ms: float
    idempotency_key: str | None
    # time.monotonic() where timeout_ms starts: when the line was read, or a
    # one-shot process's start.
    received: float
    # Seconds kept back at the end of timeout_ms for what follows the answer (a
    # one-shot process writes it, closes the runtime and exits within them).
    reserve: float = 0.0

    @property
    def deadline(self) -> float:
        """By when the turn ends or is interrupted."""
        return self.received + self.timeout_ms / 1000 - self.reserve

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())


def exit_reserve(timeout_ms: float) -> float:
    """How much of a one-shot's ``timeout_ms`` is kept for answering and exiting:
    a tenth, at least 0.5 s (closing the runtime and the interpreter take ~0.1 s,
    several times that on a busy machine), at most 2 s and never more than a
    quarter of it (a short request still gets most of its time)."""
    return min(2.0, max(0.5, timeout_ms / 10_000), timeout_ms / 4000)


class Rejected(Exception):
    """The line is not a valid request: answered ``INVALID_REQUEST``."""

    def __init__(self, message: str, request_id: str = "", session_id: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.request_id = request_id
        self.session_id = session_id


def token_usage(prompt_tokens: int = 0, completion_tokens: int = 0) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def response(
    request_id: str,
    session_id: str,
    *,
    text: str = "",
    error_code: str | None = None,
    error_message: str | None = None,
    usage: dict[str, int] | None = None,
) -> dict[str, Any]:
    """The flat response object (``ok`` is true exactly when there is no error)."""
    return {
        "ok": error_code is None,
        "request_id": request_id,
        "session_id": session_id,
        "text": text if error_code is None else "",
        "error_code": error_code,
        "error_message": error_message,
        "usage": usage or token_usage(),
    }


def failure(
    request: Request, code: str, message: str, usage: dict[str, int] | None = None
) -> dict[str, Any]:
    return response(
        request.request_id, request.session_id, error_code=code, error_message=message, usage=usage
    )


def encode(message: dict[str, Any]) -> str:
    from appserver.protocol.encoding import dumps

    return dumps(message)  # one line, lone surrogates (echoed ids) escaped


def _string(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _is_text(value: str) -> bool:
    """No lone surrogate (a JSON "\\ud800" escape), which is not text."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_request(line: str, received: float) -> Request:
    """Validate one request line (raises :class:`Rejected`)."""
    try:
        data = loads_client(line)
    except JsonRejected as exc:
        raise Rejected(f"request is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise Rejected("request must be a JSON object")
    request_id, session_id = _string(data.get("request_id")), _string(data.get("session_id"))

    def reject(message: str) -> Rejected:
        return Rejected(message, request_id, session_id)

    version = data.get("protocol_version", PROTOCOL_VERSION)
    if isinstance(version, bool) or version != PROTOCOL_VERSION:
        raise reject(f"unsupported protocol_version {json.dumps(version)}: expected 1")
    kind = data.get("type", "run")
    if kind != "run":
        raise reject(f'unsupported request type {json.dumps(kind)}: expected "run"')
    for name in ("request_id", "session_id", "prompt"):
        value = data.get(name)
        if value is None:
            raise reject(f"missing required field {name}")
        if not isinstance(value, str):
            raise reject(f"field {name} must be a string")
        if not value.strip():
            raise reject(f"field {name} must not be empty")
    optional: dict[str, str | None] = {}
    for name in ("channel_id", "agent", "idempotency_key"):
        value = data.get(name)
        if value is not None and not isinstance(value, str):
            raise reject(f"field {name} must be a string")
    for name in ("request_id", "session_id", "prompt", "channel_id", "agent", "idempotency_key"):
        value = data.get(name)
        if isinstance(value, str) and not _is_text(value):
            raise reject(f"field {name} contains a lone UTF-16 surrogate")
        optional[name] = value.strip() if isinstance(value, str) and value.strip() else None
    timeout = data.get("timeout_ms")
    if timeout is None:
        timeout = DEFAULT_TIMEOUT_MS
    elif (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise reject("field timeout_ms must be a positive number")
    return Request(
        request_id=data["request_id"],
        session_id=data["session_id"],
        prompt=data["prompt"],
        channel_id=optional["channel_id"],
        agent=optional["agent"],
        timeout_ms=float(timeout),
        idempotency_key=optional["idempotency_key"],
        received=received,
    )


def invalid(rejected: Rejected) -> dict[str, Any]:
    return response(
        rejected.request_id,
        rejected.session_id,
        error_code=INVALID_REQUEST,
        error_message=rejected.message,
    )
