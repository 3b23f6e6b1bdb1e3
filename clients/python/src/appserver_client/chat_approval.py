"""The chat's approval prompt: what is asked, what each answer covers, and the
result sent back for ``item/approval/request``.

Servers that send ``sessionScopes`` (``[{scope, scopeKey, description}]``,
the first one the default) get the session choice for the default scope and,
when offered, a wider one (``{"decision": "acceptForSession", "scope":
"wider"}``). Older servers send only ``scopeKey``; the prompt then describes
that key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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


def header(params: Mapping[str, Any], offered: list[Choice]) -> str:
    """The lines shown before the prompt: what would run, where, why, and
    what each answer covers."""
    lines = [
        f"Approval needed ({params.get('approvalType', '?')}): {params.get('operation', '')}",
        f"  in:  {params.get('target', '')}",
    ]
    if params.get("reason"):
        lines.append(f"  why: {params['reason']}")
    lines += [f"  {choice.label}" for choice in offered]
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
