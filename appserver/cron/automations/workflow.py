"""A task's ``workflow.md``: how many rounds, which steps, and each step's prompt.

Front matter (optional): ``max_rounds`` (default 10), ``steps`` (a list of
prompts; default: the body is the one step) and ``workspace``
(``project`` | ``isolated``). A prompt may name the task with Liquid output
tags: ``{{ task.id }}``, ``{{ task.title }}``, ``{{ task.description }}``,
``{{ task.workspace_path }}``, ``{{ task.thread_id }}``, ``{{ work_item.id }}``,
``{{ work_item.title }}``; an unknown name renders empty and a filter
(``| upcase``) is ignored. Liquid's ``{% %}`` tags are left as written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from appserver.storage.automation_tasks import TaskRecord

DEFAULT_ROUNDS = 10
# What a step that renders to nothing asks instead.
EMPTY_PROMPT = "Carry on with this automation task."
_OUTPUT = re.compile(r"\{\{-?\s*([A-Za-z_][\w.]*)\s*(?:\|[^}]*)?-?\}\}")


@dataclass(frozen=True)
class Workflow:
    """The rendered prompts, run in order each round, for at most ``max_rounds`` rounds."""

    steps: list[str]
    max_rounds: int
    workspace: str  # project | isolated


def workspace_mode(text: str | None) -> str:
    """``isolated`` when the workflow's front matter says so, else ``project``."""
    front = _front(text)[0] if text is not None else {}
    mode = str(front.get("workspace", "")).strip().lower()
    return "isolated" if mode == "isolated" else "project"


def _front(text: str) -> tuple[dict[str, object], str]:
    from appserver.storage import front_matter  # YAML loads when a file is read, not at start

    try:
        parts = front_matter.split(text)
    except front_matter.FrontMatterError:
        parts = None  # as DotCraft: a block it cannot read is part of the prompt
    return parts if parts is not None else ({}, text)


def load(text: str, task: TaskRecord, workspace_path: str) -> Workflow:
    """The workflow in ``text`` with its prompts rendered for ``task``."""
    front, body = _front(text)
    variables = {
        "task.id": task.id,
        "task.title": task.title,
        "task.description": task.description,
        "task.workspace_path": workspace_path,
        "task.thread_id": task.thread_id or "",
        "work_item.id": task.id,
        "work_item.title": task.title,
    }
    raw_steps = front.get("steps")
    if isinstance(raw_steps, list) and raw_steps:
        templates = [str(step) for step in raw_steps if step is not None]
    else:
        templates = [body]
    rounds = front.get("max_rounds")
    valid = isinstance(rounds, int) and not isinstance(rounds, bool) and rounds > 0
    return Workflow(
        steps=[render(template, variables) for template in templates] or [EMPTY_PROMPT],
        max_rounds=rounds if valid and isinstance(rounds, int) else DEFAULT_ROUNDS,
        workspace=workspace_mode(text),
    )


def render(template: str, variables: dict[str, str]) -> str:
    """``template`` with its output tags replaced (an empty result asks to carry on)."""
    if not template.strip():
        return EMPTY_PROMPT
    rendered = _OUTPUT.sub(lambda match: variables.get(match.group(1), ""), template).strip()
    return rendered or EMPTY_PROMPT


def default_workflow(mode: str) -> str:
    """The ``workflow.md`` a task made without one gets (``mode``: project | isolated)."""
    return (
        f"---\nmax_rounds: {DEFAULT_ROUNDS}\nworkspace: {mode}\n---\n\n"
        "This is an automation task, run without anyone watching.\n\n"
        "## Task\n\n"
        "- **ID**: {{ task.id }}\n"
        "- **Title**: {{ task.title }}\n\n"
        "## What to do\n\n"
        "{{ task.description }}\n\n"
        "Once the work is done, call the **`CompleteLocalTask`** tool with a one-line summary "
        "of what you did.\n"
    )
