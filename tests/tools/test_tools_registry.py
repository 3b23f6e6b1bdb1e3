"""Tool registry: defaults, specs, duplicate protection."""

from __future__ import annotations

import pytest

from appserver.providers.base import ToolSpec
from appserver.tools.base import Tool
from appserver.tools.files import ReadFileTool
from appserver.tools.registry import ToolRegistry, default_tools


def test_default_tools_and_specs() -> None:
    registry = ToolRegistry.with_defaults()
    assert registry.names() == [
        "shell",
        "read_file",
        "list_dir",
        "grep",
        "find_files",
        "write_file",
        "edit_file",
        "apply_patch",
        "view_image",
        "web_fetch",
        "CreatePlan",
        "UpdateTodos",
    ]
    assert [tool.name for tool in default_tools()] == registry.names()
    specs = registry.specs()
    assert all(isinstance(spec, ToolSpec) for spec in specs)
    for spec in specs:
        schema = spec.input_schema
        assert schema["type"] == "object"
        assert spec.description
        assert set(schema.get("required", [])) <= set(schema["properties"])
        assert all(prop["description"] for prop in schema["properties"].values())
    shell = registry.get("shell")
    assert shell is not None and shell.name == "shell"
    assert registry.get("nope") is None
    assert "read_file" in registry
    assert len(registry) == 12


def test_duplicates_invalid_names_and_unregister() -> None:
    registry = ToolRegistry(default_tools())
    with pytest.raises(ValueError, match="already registered"):
        registry.register(ReadFileTool())
    replacement = ReadFileTool(max_bytes=10)
    registry.register(replacement, replace=True)
    assert registry.get("read_file") is replacement
    assert registry.names().index("read_file") == 1  # replacing keeps the order

    class Bad(ReadFileTool):
        name = "bad name!"

    with pytest.raises(ValueError, match="invalid tool name"):
        registry.register(Bad())
    removed: Tool | None = registry.unregister("read_file")
    assert removed is replacement
    assert "read_file" not in registry
    assert registry.unregister("read_file") is None


def test_specs_follow_a_tool_whose_description_or_schema_changes() -> None:
    """Specs are kept between model calls, but never stale: a changed description
    or schema (an MCP server's tool, SpawnAgent's profiles) is offered as it is now."""
    tool = ReadFileTool()
    registry = ToolRegistry([tool])
    first = registry.specs()[0]
    assert registry.specs()[0] is first  # unchanged: the same spec
    tool.input_schema = {"type": "object", "properties": {}}
    assert registry.specs()[0].input_schema == {"type": "object", "properties": {}}
    tool.description = "Read one file, differently."
    assert registry.specs()[0].description == "Read one file, differently."
    registry.unregister("read_file")
    registry.register(ReadFileTool())
    assert registry.specs()[0].input_schema == first.input_schema
