"""Encoding of JSON-RPC frames: one message, one line, UTF-8."""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel

_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), check_circular=False)
_SURROGATE = re.compile("[\ud800-\udfff]")


def _finish(text: str) -> str:
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


def dumps(value: Any) -> str:
    """Compact single-line JSON for an already JSON-ready value."""
    return _finish(_encoder.encode(value))


class RawJSON(str):
    """A result already encoded as JSON (a cached answer); sent as is."""


def payload_json(value: Any) -> str:
    """JSON text for a result or params value: a wire model or plain JSON data."""
    if isinstance(value, RawJSON):
        return str(value)
    if isinstance(value, BaseModel):
        return _finish(value.model_dump_json(by_alias=True, exclude_none=True))
    return dumps(value)


def response_frame(request_id: str | int | None, result: Any) -> str:
    return f'{{"jsonrpc":"2.0","id":{dumps(request_id)},"result":{payload_json(result)}}}'


def error_frame(request_id: str | int | None, error: dict[str, Any]) -> str:
    return dumps({"jsonrpc": "2.0", "id": request_id, "error": error})


def notification_frame(method: str, params: Any) -> str:
    return f'{{"jsonrpc":"2.0","method":{dumps(method)},"params":{payload_json(params)}}}'


def notification_frame_json(method: str, params_json: str, seq: int | None = None) -> str:
    """A notification from already-encoded params, optionally stamped with ``seq``."""
    if seq is not None:
        params_json = (
            f'{{"seq":{seq}}}' if params_json == "{}" else f'{{"seq":{seq},{params_json[1:]}'
        )
    return f'{{"jsonrpc":"2.0","method":{dumps(method)},"params":{params_json}}}'


def request_frame(request_id: int, method: str, params: Any) -> str:
    return (
        f'{{"jsonrpc":"2.0","id":{request_id},"method":{dumps(method)},'
        f'"params":{payload_json(params)}}}'
    )
