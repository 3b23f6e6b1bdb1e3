"""The set of tools a turn may call, by name."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Iterator

from appserver.providers.base import ToolSpec
from appserver.tools.apply_patch import ApplyPatchTool
from appserver.tools.base import Tool
from appserver.tools.files import EditFileTool, ListDirTool, ReadFileTool, WriteFileTool
from appserver.tools.plans import plan_tools
from appserver.tools.search import FindFilesTool, GrepTool
from appserver.tools.shell import ShellTool
from appserver.tools.view_image import ViewImageTool
from appserver.tools.web_fetch import WebFetchTool

# What both the Anthropic and the OpenAI APIs accept as a tool name.
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def default_tools(pass_env: Collection[str] = ()) -> list[Tool]:
    """Fresh instances of the built-in tools, in the order they are offered to the model.

    ``pass_env``: secret environment variables commands may see all the same
    (see ``tools.environment``).
    """
    return [
        ShellTool(pass_env=pass_env),
        ReadFileTool(),
        ListDirTool(),
        GrepTool(),
        FindFilesTool(),
        WriteFileTool(),
        EditFileTool(),
        ApplyPatchTool(),
        ViewImageTool(),
        WebFetchTool(),
        *plan_tools(),  # write the thread's plan once the runtime attaches its store
    ]


class ToolRegistry:
    """Tools by name, in registration order (the order the model sees them)."""

    def __init__(
        self, tools: Iterable[Tool] = (), restricted_to: Collection[str] | None = None
    ) -> None:
        self._tools: dict[str, Tool] = {}
        # Each tool's spec as last offered: every model call offers them all,
        # and most tools' description and schema never change.
        self._specs: dict[str, ToolSpec] = {}
        # A set a client chose (Qwen's --core-tools/--exclude-tools): tools the
        # runtime adds later (the agent-control tools) join only if named here.
        self.restricted_to = None if restricted_to is None else frozenset(restricted_to)
        for tool in tools:
            self.register(tool)

    def admits(self, name: str) -> bool:
        """Whether a tool added by the runtime may join this registry."""
        return self.restricted_to is None or name in self.restricted_to

    @classmethod
    def with_defaults(cls, pass_env: Collection[str] = ()) -> ToolRegistry:
        """A registry holding :func:`default_tools`."""
        return cls(default_tools(pass_env))

    def register(self, tool: Tool, *, replace: bool = False) -> None:
        """Add ``tool``; a name already taken raises ``ValueError`` unless ``replace``."""
        if not _NAME.match(tool.name):
            raise ValueError(f"invalid tool name {tool.name!r}: use 1-64 of [A-Za-z0-9_-]")
        if tool.name in self._tools and not replace:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    def unregister(self, name: str) -> Tool | None:
        """Remove a tool (e.g. when an MCP server goes away); returns it, if it was there."""
        self._specs.pop(name, None)
        return self._tools.pop(name, None)

    def get(self, name: str) -> Tool | None:
        """The tool called ``name``, or ``None``."""
        return self._tools.get(name)

    def names(self) -> list[str]:
        """Registered tool names, in order."""
        return list(self._tools)

    def specs(self) -> list[ToolSpec]:
        """What the model is offered."""
        specs = []
        for name, tool in self._tools.items():
            description, schema = tool.description, tool.input_schema
            spec = self._specs.get(name)
            if (
                spec is None
                or spec.description is not description
                or spec.input_schema is not schema
            ):
                spec = self._specs[name] = ToolSpec(name, description, schema)
            specs.append(spec)
        return specs

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)
