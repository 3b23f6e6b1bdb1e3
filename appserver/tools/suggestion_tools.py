"""The helper turns' tools: ``EmitWelcomeSuggestions`` and ``CommitSuggest`` (DotCraft's names).

A helper turn (runtime/helper_threads.py) asks its model for an answer the server
needs: four welcome suggestions, or a commit message. The model hands it over by
calling one of these tools; the tool only checks the shape and says "Recorded.",
and the server reads the call's arguments from its ``toolCall`` item once the
turn has ended (services/suggestions/). Each belongs to a *tool profile* and is
offered only to threads whose configuration names that profile
(``toolProfile``; tools/profiles.py), so no user thread ever sees them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from appserver.tools.base import Tool, ToolContext, ToolError, ToolOutcome, ToolPlan
from appserver.tools.profiles import COMMIT_SUGGEST, EMIT_WELCOME

RECORDED = "Recorded."


class RecordingTool:
    """A tool whose call is the answer: checks the arguments, records nothing else."""

    def __init__(
        self,
        name: str,
        description: str,
        input_schema: dict[str, Any],
        check: Callable[[dict[str, Any]], None],
    ) -> None:
        self.name = name
        self.description = description
        self.input_schema = input_schema
        self._check = check

    def plan(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolPlan:
        self._check(arguments)
        return ToolPlan(self.name, arguments)

    async def run(self, plan: ToolPlan, ctx: ToolContext) -> ToolOutcome:
        return ToolOutcome(True, RECORDED)


def _check_suggestions(arguments: dict[str, Any]) -> None:
    items = arguments.get("items")
    if not isinstance(items, list) or not items:
        raise ToolError("'items' must be a non-empty list of {title, prompt, reason}")
    for item in items:
        if not isinstance(item, dict):
            raise ToolError("each item must be an object {title, prompt, reason}")
        for key in ("title", "prompt"):
            if not isinstance(item.get(key), str) or not item[key].strip():
                raise ToolError(f"each item needs a non-empty string '{key}'")


def _check_commit(arguments: dict[str, Any]) -> None:
    summary = arguments.get("summary")
    if not isinstance(summary, str) or not summary.strip():
        raise ToolError("'summary' must be a non-empty string")
    body = arguments.get("body")
    if body is not None and not isinstance(body, str):
        raise ToolError("'body' must be a string")


def suggestion_tools() -> list[Tool]:
    """Fresh instances of both profile tools."""
    text = {"type": "string"}
    welcome = RecordingTool(
        EMIT_WELCOME,
        "Hand over the welcome suggestions: exactly the number asked for, each a short "
        "title, the prompt it puts in the message box and why it is suggested.",
        {
            "type": "object",
            "properties": {
                "items": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"title": text, "prompt": text, "reason": text},
                        "required": ["title", "prompt", "reason"],
                    },
                }
            },
            "required": ["items"],
        },
        _check_suggestions,
    )
    commit = RecordingTool(
        COMMIT_SUGGEST,
        "Hand over the commit message: a one-line summary (imperative, at most about 72 "
        "characters) and an optional body.",
        {
            "type": "object",
            "properties": {"summary": text, "body": text},
            "required": ["summary"],
        },
        _check_commit,
    )
    return [welcome, commit]
