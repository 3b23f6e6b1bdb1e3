"""What one incoming frame is: the JSON-RPC 2.0 envelope checks.

:func:`read_envelope` decodes a frame (with the bounded decoder every door
uses) and says whether it is a :class:`Request`, a :class:`Notification`, an
answer to a server->client request (:class:`Answer`) or something to refuse
(:class:`Refusal`, the error to send back); ``None`` means drop it unanswered
(a malformed notification has no id to answer to). It knows no method.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from appserver.protocol import errors as rpc_errors
from appserver.protocol.decoding import JsonRejected, loads_client
from appserver.protocol.errors import RpcError

RequestId = str | int

_BAD_ID = "'id' must be a string or an integer"


@dataclass(frozen=True, slots=True)
class Request:
    """A request to answer."""

    request_id: RequestId
    method: str
    params: Any


@dataclass(frozen=True, slots=True)
class Notification:
    """A client notification."""

    method: str
    params: Any


@dataclass(frozen=True, slots=True)
class Answer:
    """The peer's answer to a server->client request (``raw_id`` as sent back)."""

    raw_id: Any
    message: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Refusal:
    """A frame refused at the envelope: ``error`` goes back with id ``reply_id``."""

    reply_id: RequestId | None
    error: RpcError


Envelope = Request | Notification | Answer | Refusal


def valid_id(value: Any) -> bool:
    """Whether ``value`` may be a request id (a string or an integer, not a bool)."""
    return isinstance(value, str | int) and not isinstance(value, bool)


def read_envelope(frame: str, waits_for: Callable[[Any], bool]) -> Envelope | None:
    """What ``frame`` is; ``waits_for(id)`` says whether a server->client
    request of that id still waits (so an answer without a result counts)."""
    try:
        message = loads_client(frame)
    except JsonRejected as exc:
        return Refusal(None, RpcError(rpc_errors.PARSE_ERROR, "Parse error", {"detail": str(exc)}))
    if isinstance(message, list):
        # Batches are refused: no DotCraft or Codex client sends them and
        # per-request ordering guarantees are defined for single messages.
        detail = "batch requests are not supported; send one message per frame"
        return Refusal(None, rpc_errors.invalid_request(detail))
    if not isinstance(message, dict):
        return Refusal(None, rpc_errors.invalid_request("expected an object"))
    has_id = "id" in message
    raw_id = message.get("id")
    if has_id and not valid_id(raw_id) and raw_id is not None:
        return Refusal(None, rpc_errors.invalid_request(_BAD_ID))
    reply_id: RequestId | None = raw_id
    if message.get("jsonrpc") != "2.0":
        if has_id:
            return Refusal(reply_id, rpc_errors.invalid_request("'jsonrpc' must be \"2.0\""))
        return None
    method = message.get("method")
    if method is None:
        if has_id and ("result" in message or "error" in message or waits_for(raw_id)):
            # An answer to a server->client request; one with neither
            # result nor error still answers (as a refusal), at once.
            return Answer(raw_id, message)
        return Refusal(reply_id, rpc_errors.invalid_request("missing 'method'"))
    if not isinstance(method, str):
        if has_id:
            return Refusal(reply_id, rpc_errors.invalid_request("'method' must be a string"))
        return None
    params = message.get("params")
    if not has_id:
        return Notification(method, params)
    if raw_id is None:
        return Refusal(None, rpc_errors.invalid_request(_BAD_ID))
    return Request(raw_id, method, params)
