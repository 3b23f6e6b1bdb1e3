"""Small shared helpers for the end-to-end tests."""

from __future__ import annotations

import json
import re
from typing import Any

from tests.support.client import RpcClient

IDENTITY: dict[str, Any] = {"channelName": "cli", "userId": "local"}
THREAD_ID = re.compile(r"^thread_\d{8}_[a-z0-9]{6}$")


def identity(**overrides: Any) -> dict[str, Any]:
    """The default CLI identity with some fields replaced."""
    return {**IDENTITY, **overrides}


async def start_thread(client: RpcClient, **params: Any) -> dict[str, Any]:
    """``thread/start`` with the default identity; returns the wire thread."""
    params.setdefault("identity", IDENTITY)
    result = await client.request("thread/start", params)
    thread: dict[str, Any] = result["thread"]
    return thread


async def list_ids(client: RpcClient, **params: Any) -> list[str]:
    """Ids from ``thread/list`` (default identity), in the order returned."""
    params.setdefault("identity", IDENTITY)
    result = await client.request("thread/list", params)
    return [summary["id"] for summary in result["data"]]


def index_of(client: RpcClient, predicate: Any) -> int:
    """Index in ``client.messages`` of the first message matching ``predicate``."""
    for index, message in enumerate(client.messages):
        if predicate(message):
            return index
    raise AssertionError("no matching message")


def response_index(client: RpcClient, request_id: Any) -> int:
    return index_of(client, lambda m: "method" not in m and m.get("id") == request_id)


def assert_error_frame(
    message: dict[str, Any], code: int, request_id: Any = None
) -> dict[str, Any]:
    """A well-formed JSON-RPC error response with ``code``; returns its error object."""
    assert set(message) == {"jsonrpc", "id", "error"}, message
    assert message["jsonrpc"] == "2.0"
    assert message["id"] == request_id and type(message["id"]) is type(request_id), message
    error = message["error"]
    assert isinstance(error["code"], int) and error["code"] == code, message
    assert isinstance(error["message"], str) and error["message"]
    assert set(error) <= {"code", "message", "data"}
    return dict(error)


def without_seq(params: dict[str, Any]) -> dict[str, Any]:
    """Notification params minus the per-thread ``seq`` stamp."""
    return {key: value for key, value in params.items() if key != "seq"}


def raw(message: Any) -> str:
    return json.dumps(message)
