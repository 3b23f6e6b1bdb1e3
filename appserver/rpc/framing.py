"""Encoding of JSON-RPC frames: one message, one line, UTF-8."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from appserver.protocol.encoding import dumps, model_json

__all__ = [
    "RawJSON",
    "dumps",
    "error_frame",
    "notification_frame",
    "notification_frame_json",
    "payload_json",
    "request_frame",
    "response_frame",
]


class RawJSON(str):
    """A result already encoded as JSON (a cached answer); sent as is."""


def payload_json(value: Any) -> str:
    """JSON text for a result or params value: a wire model or plain JSON data."""
    if isinstance(value, RawJSON):
        return str(value)
    if isinstance(value, BaseModel):
        return model_json(value)
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
