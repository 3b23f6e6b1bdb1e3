"""JSON Schema (draft 2020-12) for the whole protocol, from the method table.

One bundle: every wire model under ``$defs``, and three maps that say which
model is the params/result of each method, notification and server->client
request. Generated clients (the Node types) and docs are built from it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from appserver import __version__
from appserver.protocol.methods import METHODS, NOTIFICATIONS, SERVER_REQUESTS

SCHEMA_FILE = "protocol.schema.json"
DIALECT = "https://json-schema.org/draft/2020-12/schema"


def build_schema() -> dict[str, Any]:
    """The protocol bundle as a JSON-ready dict (deterministic key order)."""
    wanted: list[tuple[type[BaseModel], JsonSchemaMode]] = []

    def want(model: type[BaseModel], mode: JsonSchemaMode) -> None:
        if (model, mode) not in wanted:
            wanted.append((model, mode))

    for method in METHODS.values():
        want(method.params, "validation")
        want(method.result, "serialization")
    for notification in NOTIFICATIONS.values():
        want(notification.params, "serialization")
    for request in SERVER_REQUESTS.values():
        want(request.params, "serialization")
        want(request.result, "validation")
    refs, top = models_json_schema(wanted, by_alias=True, ref_template="#/$defs/{model}")

    def ref(model: type[BaseModel], mode: JsonSchemaMode) -> dict[str, Any]:
        return dict(refs[(model, mode)])

    methods = {
        name: {
            "summary": spec.summary,
            "capability": spec.capability,
            "errors": list(spec.errors),
            "params": ref(spec.params, "validation"),
            "result": ref(spec.result, "serialization"),
        }
        for name, spec in sorted(METHODS.items())
    }
    notifications = {
        name: {
            "summary": spec.summary,
            "delivery": spec.delivery,
            "params": ref(spec.params, "serialization"),
        }
        for name, spec in sorted(NOTIFICATIONS.items())
    }
    requests = {
        name: {
            "summary": spec.summary,
            "params": ref(spec.params, "serialization"),
            "result": ref(spec.result, "validation"),
        }
        for name, spec in sorted(SERVER_REQUESTS.items())
    }
    return {
        "$schema": DIALECT,
        "$id": "urn:appserver:protocol:1",
        "title": "appserver JSON-RPC protocol",
        "description": (
            f"protocolVersion 1 (appserver {__version__}). Thread notifications also carry "
            "an integer `seq` in params."
        ),
        "x-methods": methods,
        "x-notifications": notifications,
        "x-serverRequests": requests,
        "$defs": dict(sorted(top.get("$defs", {}).items())),
    }


def render() -> str:
    return json.dumps(build_schema(), indent=2, sort_keys=False) + "\n"


def write_schema(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / SCHEMA_FILE
    path.write_text(render(), "utf-8")
    return path


def is_current(directory: Path) -> bool:
    """Whether the committed copy in ``directory`` matches the method table."""
    path = directory / SCHEMA_FILE
    return path.is_file() and path.read_text("utf-8") == render()
