"""JSON Schema (draft 2020-12) for the whole protocol, from the method table.

One bundle: every wire model under ``$defs``, and three maps that say which
model is the params/result of each method, notification and server->client
request. Generated clients (the Node types) and docs are built from it.
"""

import ast
import inspect
import json
import textwrap
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaMode, models_json_schema

from appserver import __version__
from appserver.protocol.methods import METHODS, NOTIFICATIONS, SERVER_REQUESTS
from appserver.protocol.turns import ITEM_PAYLOADS

SCHEMA_FILE = "protocol.schema.json"
DIALECT = "https://json-schema.org/draft/2020-12/schema"


class _Generator(GenerateJsonSchema):
    """Titles only on types (the class name), not on each field ("Userid")."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


def _models() -> dict[str, type[BaseModel]]:
    """Every wire model class by name (what ``$defs`` keys are)."""
    found: dict[str, type[BaseModel]] = {}
    stack: list[type[BaseModel]] = [BaseModel]
    while stack:
        for sub in stack.pop().__subclasses__():
            if sub.__module__.startswith("appserver.protocol."):
                found.setdefault(sub.__name__, sub)
            stack.append(sub)
    return found


@cache
def _field_docs(cls: type) -> dict[str, str]:
    """``{field: docstring}`` of the string literals right after a class's annotated fields."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    node = ast.parse(source).body[0]
    if not isinstance(node, ast.ClassDef):
        return {}
    docs: dict[str, str] = {}
    for stmt, following in zip(node.body, node.body[1:], strict=False):
        if (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[stmt.target.id] = " ".join(inspect.cleandoc(following.value.value).split())
    return docs


def _field_description(model: type[BaseModel], wire: str) -> str | None:
    for name, field in model.model_fields.items():
        if wire in (name, field.alias, field.serialization_alias, field.validation_alias):
            if field.description:
                return field.description
            for cls in model.__mro__:
                doc = _field_docs(cls).get(name) if issubclass(cls, BaseModel) else None
                if doc:
                    return doc
            return None
    return None


def _describe(defs: dict[str, Any]) -> None:
    """Give every property of every model in ``defs`` its field docstring as description."""
    models = _models()
    for name, definition in defs.items():
        model = models.get(name)
        if model is None:
            continue
        for wire, prop in definition.get("properties", {}).items():
            text = _field_description(model, wire)
            if text and "description" not in prop:
                prop["description"] = text


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
    for payload in ITEM_PAYLOADS.values():
        want(payload, "serialization")
    refs, top = models_json_schema(
        wanted, by_alias=True, ref_template="#/$defs/{model}", schema_generator=_Generator
    )
    _describe(top.get("$defs", {}))

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
    payloads = {kind: ref(model, "serialization") for kind, model in sorted(ITEM_PAYLOADS.items())}
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
        "x-itemPayloads": payloads,
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
