"""Codex app-server's envelope: JSON-RPC without the ``"jsonrpc"`` member.

Codex clients (OpenAI's Python SDK, the IDE extensions) send requests as
``{id, method, params?}``, notifications as ``{method, params?}`` and answer
our requests with ``{id, result}``; some add ``"jsonrpc": "2.0"``, which is
accepted and ignored. What we send carries no ``"jsonrpc"`` member either.

Lines are checked as Codex 0.169 does (measured, docs/faces.md): ids may be
strings or integers; a line that is not JSON, a batch, a float or null id get
no answer (the line is logged and dropped); refusals are ``-32600`` with an
English message, as Codex gives them.
"""

from __future__ import annotations

import logging
from typing import Any

from appserver.protocol.decoding import JsonRejected, loads_client
from appserver.protocol.encoding import dumps_lenient

log = logging.getLogger("appserver.faces.codex")

Message = dict[str, Any]

INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603


class CodexError(Exception):
    """A request refused with a JSON-RPC error (code and Codex's message)."""

    def __init__(self, message: str, code: int = INVALID_REQUEST) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def encode(message: Message) -> str:
    """One message as one line of compact JSON (never fails: odd values become
    text; a lone surrogate echoed from a peer's id is escaped)."""
    return dumps_lenient(message)


def response(request_id: Any, result: Any) -> Message:
    return {"id": request_id, "result": result}


def error(request_id: Any, code: int, message: str) -> Message:
    return {"id": request_id, "error": {"code": code, "message": message}}


def notification(method: str, params: Message) -> Message:
    return {"method": method, "params": params}


def _valid_id(value: Any) -> bool:
    return isinstance(value, str) or type(value) is int


def check(line: str) -> Message | None:
    """The message on ``line``, or ``None`` for one Codex would not answer
    (not JSON, a batch, not an object, a float or null id, no method and no
    answer): logged and dropped."""
    try:
        value = loads_client(line, strict_numbers=True)
    except JsonRejected as exc:
        log.warning("dropped a line that is not JSON: %s", exc)
        return None
    if not isinstance(value, dict):
        log.warning("dropped a line that is not a JSON object: %.200s", line)
        return None
    if "id" in value and not _valid_id(value["id"]):
        log.warning("dropped a message whose id is neither a string nor an integer")
        return None
    method = value.get("method")
    if "method" in value and (not isinstance(method, str) or not method):
        if "id" in value:
            return {"id": value["id"], "method": "", "params": None}  # answered -32600
        return None
    if method is None and "id" in value and ("result" in value or "error" in value):
        return value  # the answer to one of our requests
    if method is None:
        log.warning("dropped a message with neither a method nor an answer: %.200s", line)
        return None
    return value


class Reply:
    """A handler's result with notifications that follow the response (as Codex orders them)."""

    def __init__(self, result: Any, then: list[tuple[str, Message]]) -> None:
        self.result = result
        self.then = then


def text_param(params: Message, key: str, required: bool = False) -> str | None:
    value = params.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise CodexError(f"Invalid request: missing field `{key}`")
    return value
