"""The server's tools of an IDE's own request family (``ext/acp/<family>/<method>``).

A client that lists a family in ``acpExtensions.extensions`` serves that family's
methods; these are the tools the server offers for the one family DotCraft
defines, ``_unity`` (its Unity module: read-only views of the Unity editor,
served by DotCraft's Unity client package). Each is data: the model's name,
description and schema, and how its arguments become the request's params.
The runtime (``runtime.turns.editor_families``) offers them on the threads
whose client serves the family and sends the requests; see docs/tools.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from appserver.protocol.base import WireModel
from appserver.protocol.editor_families import (
    AcpFamilyResult,
    UnityConsoleLogsParams,
    UnityConsoleLogsResult,
    UnityProjectInfoResult,
    UnitySceneQueryParams,
    UnitySceneQueryResult,
    UnitySelectionResult,
    UnityThreadParams,
)
from appserver.providers.base import ToolSpec
from appserver.tools.base import ToolError

# (thread id, the model's arguments) -> the request's params; ToolError for bad arguments.
ParamsBuilder = Callable[[str, Mapping[str, Any]], WireModel]


@dataclass(frozen=True)
class FamilyTool:
    """A tool whose call is one request of a client's family."""

    name: str
    method: str  # `_family/method`: sent as `ext/acp/<method>`
    description: str
    input_schema: dict[str, Any]
    params: ParamsBuilder
    result: type[AcpFamilyResult]  # what a valid answer looks like

    @property
    def family(self) -> str:
        """The family the client must serve (``_unity``)."""
        return self.method.split("/", 1)[0]

    def spec(self) -> ToolSpec:
        """What the model is offered."""
        return ToolSpec(self.name, self.description, self.input_schema)


def _text(arguments: Mapping[str, Any], key: str) -> str | None:
    value = arguments.get(key)
    if value is None or isinstance(value, str):
        return value
    raise ToolError(f"`{key}` must be a string")


def _flag(arguments: Mapping[str, Any], key: str) -> bool:
    value = arguments.get(key, False)
    if isinstance(value, bool):
        return value
    raise ToolError(f"`{key}` must be true or false")


def _positive(arguments: Mapping[str, Any], key: str, default: int) -> int:
    """A positive whole number; absent or not above zero: ``default`` (as DotCraft
    does); anything else is a bad argument."""
    value = arguments.get(key)
    if value is None:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ToolError(f"`{key}` must be a whole number")
    return value if 0 < value < 2**63 else default


def _texts(arguments: Mapping[str, Any], key: str) -> list[str] | None:
    value = arguments.get(key)
    if value is None:
        return None
    if isinstance(value, list) and all(isinstance(entry, str) for entry in value):
        return value
    raise ToolError(f"`{key}` must be a list of strings")


def _scene_query(thread_id: str, arguments: Mapping[str, Any]) -> WireModel:
    return UnitySceneQueryParams(
        thread_id=thread_id,
        query=_text(arguments, "query"),
        include_components=_flag(arguments, "includeComponents"),
        max_depth=_positive(arguments, "maxDepth", 10),
    )


def _console_logs(thread_id: str, arguments: Mapping[str, Any]) -> WireModel:
    return UnityConsoleLogsParams(
        thread_id=thread_id,
        types=_texts(arguments, "types"),
        limit=_positive(arguments, "limit", 50),
    )


def _no_fields(thread_id: str, arguments: Mapping[str, Any]) -> WireModel:
    return UnityThreadParams(thread_id=thread_id)


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "additionalProperties": False}


UNITY_TOOLS: tuple[FamilyTool, ...] = (
    FamilyTool(
        "unity_scene_query",
        "_unity/scene_query",
        "Read the hierarchy of the scenes open in the Unity editor, as JSON: each "
        "GameObject's name, path, instance id, active flag and children. `query` keeps "
        "the objects whose name or path contains it; `includeComponents` adds their "
        "component types; `maxDepth` limits how deep the walk goes (default 10).",
        _object(
            {
                "query": {"type": "string"},
                "includeComponents": {"type": "boolean"},
                "maxDepth": {"type": "integer", "minimum": 1},
            }
        ),
        _scene_query,
        UnitySceneQueryResult,
    ),
    FamilyTool(
        "unity_get_selection",
        "_unity/get_selection",
        "The GameObjects selected in the Unity editor right now, with their paths and "
        "components, as JSON.",
        _object({}),
        _no_fields,
        UnitySelectionResult,
    ),
    FamilyTool(
        "unity_get_console_logs",
        "_unity/get_console_logs",
        "The newest entries of the Unity console, as JSON. `types` keeps only some kinds "
        '(any of "error", "warning", "log"; default all); `limit` is how many (default 50).',
        _object(
            {
                "types": {
                    "type": "array",
                    "items": {"type": "string", "enum": ["error", "warning", "log"]},
                },
                "limit": {"type": "integer", "minimum": 1},
            }
        ),
        _console_logs,
        UnityConsoleLogsResult,
    ),
    FamilyTool(
        "unity_get_project_info",
        "_unity/get_project_info",
        "The Unity project: its name and path, the editor version and the installed "
        "packages, as JSON.",
        _object({}),
        _no_fields,
        UnityProjectInfoResult,
    ),
)
"""DotCraft's ``_unity`` tools (its ``UnityAcpToolProvider``), in the order offered."""

FAMILY_TOOLS: tuple[FamilyTool, ...] = UNITY_TOOLS
"""Every family tool the server knows (one family so far)."""
