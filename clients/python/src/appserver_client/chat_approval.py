"""The chat's approval prompt: what is asked, what each answer covers, and the
result sent back for ``item/approval/request``.

Servers that send ``sessionScopes`` (``[{scope, scopeKey, description}]``,
the first one the default) get the session choice for the default scope and,
when offered, a wider one (``{"decision": "acceptForSession", "scope":
"wider"}``). Older servers send only ``scopeKey``; the prompt then describes
that key.

The request is shown exactly (:mod:`appserver_client.chat_exact`): a command's
lines numbered when there are several, hidden and control characters as
``⟨U+XXXX⟩``, a file write or edit as the server's ``diff`` of the real file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from appserver_client import chat_exact as exact

PROMPT_END = "[c]ancel turn? "


@dataclass(frozen=True)
class Choice:
    """One answer the user can type."""

    keys: tuple[str, ...]  # what the user may type (first: the one shown)
    label: str  # shown in the prompt, with the key in brackets
    result: dict[str, Any]  # sent as the request's result


def describe_scope_key(key: str, target: str) -> str:
    """What a session grant for ``key`` covers, for servers without ``sessionScopes``."""
    kind, _, rest = key.partition(":")
    operation, _, where = rest.partition(":")
    if kind == "shell":
        place = f"in {where}" if where else "in the workspace"
        return f"every shell command {place} for this thread"
    if kind == "file":
        place = where or "anywhere in the workspace"
        return f"every file {operation or 'operation'} {place} for this thread"
    return f"{key} for this thread"


def choices(params: Mapping[str, Any]) -> list[Choice]:
    """The answers offered for one request, in prompt order."""
    found: list[Choice] = [Choice(("y", "yes", "accept"), "[y]es once", {"decision": "accept"})]
    scopes = [scope for scope in params.get("sessionScopes") or [] if isinstance(scope, dict)]
    if scopes:
        default = scopes[0]
        result: dict[str, Any] = {"decision": "acceptForSession"}
        if default.get("scope") not in (None, "exact"):
            result["scope"] = default.get("scope")
        found.append(
            Choice(("s", "session"), f"[s]ession: {default.get('description', '')}", result)
        )
        for scope in scopes[1:]:
            if scope.get("scope") == "wider":
                found.append(
                    Choice(
                        ("w", "S", "wider"),
                        f"[w]ider: {scope.get('description', '')}",
                        {"decision": "acceptForSession", "scope": "wider"},
                    )
                )
                break
    else:
        covers = describe_scope_key(str(params.get("scopeKey", "")), str(params.get("target")))
        found.append(
            Choice(("s", "session"), f"[s]ession: {covers}", {"decision": "acceptForSession"})
        )
    found += [
        Choice(
            ("a", "always"),
            "[a]lways: this exact call, remembered for good",
            {"decision": "acceptAlways"},
        ),
        Choice(("n", "no", "d", "decline"), "[n]o", {"decision": "decline"}),
        Choice(("c", "cancel"), "[c]ancel turn", {"decision": "cancel"}),
    ]
    return found


_SHELL_REASON = "Run a shell command in "


def place(target: str, workspace: str | None) -> str:
    """Where an approval applies, said plainly: ``/w (the workspace)``,
    ``src/app (in the workspace)`` or ``/etc (outside the workspace)``; the
    target as given when the workspace is not known or it is not a path."""
    if not workspace or not os.path.isabs(target):
        return target
    root, path = os.path.normpath(workspace), os.path.normpath(target)
    if path == root:
        return f"{target} (the workspace)"
    if path.startswith(root.rstrip(os.sep) + os.sep):
        return f"{os.path.relpath(path, root)} (in the workspace)"
    return f"{target} (outside the workspace)"


def why(reason: str) -> str:
    """The server's reason without what the prompt already shows: a shell
    command's "Run a shell command in DIR — WHY" reads as WHY, keeping how it
    runs (", as a background terminal ...")."""
    head, dash, asked = reason.partition(" — ")
    if not dash or not head.startswith(_SHELL_REASON):
        return reason
    _, comma, how = head.partition(", as ")
    return f"{asked}; runs as {how}" if comma else asked


def header(
    params: Mapping[str, Any],
    offered: list[Choice],
    *,
    colour: bool = False,
    workspace: str | None = None,
) -> str:
    """The lines shown before the prompt: what would run (exactly: a command of
    several lines numbered line by line, hidden characters as ``⟨U+XXXX⟩``),
    where (relative to ``workspace`` inside it), why, the file change as a
    diff, and what each answer covers.

    Nothing from the server is written raw: each field but the command's own
    lines is one line, so no text can pose as another part of the prompt."""
    kind = exact.reveal(str(params.get("approvalType", "?")), colour=colour)
    operation = str(params.get("operation", ""))
    if "\n" in operation:
        count = operation.count("\n") + 1
        lines = [f"Approval needed ({kind}), {count} lines:"]
        lines += exact.command_lines(operation, colour=colour)
    else:
        lines = [f"Approval needed ({kind}): {exact.reveal(operation, colour=colour)}"]
    where = place(str(params.get("target", "")), workspace)
    lines.append(f"  in:  {exact.reveal(where, colour=colour)}")
    if params.get("reason"):
        lines.append(f"  why: {exact.reveal(why(str(params['reason'])), colour=colour)}")
    diff = params.get("diff")
    if isinstance(diff, str) and diff:
        lines.append("  the change:")
        lines += exact.diff_lines(diff, colour=colour)
    lines += [f"  {exact.reveal(choice.label, colour=colour)}" for choice in offered]
    return "\n".join(lines)


def prompt(offered: list[Choice]) -> str:
    """The one-line prompt: the keys, ending with :data:`PROMPT_END`."""
    keys = "/".join(choice.keys[0] for choice in offered[:-1])
    return f"{keys} or {PROMPT_END}"


def answer(offered: list[Choice], text: str) -> dict[str, Any] | None:
    """The result for what the user typed (``None``: not one of the choices).

    Keys are case-insensitive except ``S`` (the wider scope, beside ``s``).
    """
    typed = text.strip()
    for choice in offered:
        if typed in choice.keys:
            return dict(choice.result)
    for choice in offered:
        if typed.lower() in (key.lower() for key in choice.keys if key != "S"):
            return dict(choice.result)
    return None


def keys_hint(offered: list[Choice]) -> str:
    """``y, s, w, a, n or c``: the keys offered."""
    keys = [choice.keys[0] for choice in offered]
    return ", ".join(keys[:-1]) + f" or {keys[-1]}"
