"""The offline model's answers to the server's helper turns (:mod:`appserver.providers.offline`).

A helper turn (docs/suggestions.md) offers one tool whose call is the answer;
the offline model makes that call from the turn's message alone, deterministically.
"""

from __future__ import annotations

from typing import Any

_WELCOME_TOOL = "EmitWelcomeSuggestions"
_COMMIT_TOOL = "CommitSuggest"
_DIFF_MARK = "--- unified diff ---"
_WELCOME_VERBS = (
    ("Continue", "Continue the work on"),
    ("Test", "Write tests for"),
    ("Review", "Review the change for"),
    ("Document", "Document"),
)


def helper_call(offered: set[str], text: str) -> tuple[str, dict[str, Any]] | None:
    """The tool and arguments a helper message ``text`` gets, when a helper tool
    is among the ``offered`` tool names (``EmitWelcomeSuggestions`` first)."""
    if _WELCOME_TOOL in offered:
        return _WELCOME_TOOL, offline_welcome(text)
    if _COMMIT_TOOL in offered:
        return _COMMIT_TOOL, offline_commit(text)
    return None


def offline_welcome(text: str) -> dict[str, Any]:
    """The ``EmitWelcomeSuggestions`` arguments for a helper message (module docstring)."""
    evidence = [line[2:].strip() for line in text.splitlines() if line.startswith("- ")]
    evidence = [line for line in evidence if line] or ["the workspace"]
    items = []
    for index, (short, long) in enumerate(_WELCOME_VERBS):
        said = evidence[index % len(evidence)]
        items.append(
            {
                "title": f"{short}: {said[:60]}",
                "prompt": f"{long}: {said}",
                "reason": f"You asked: {said[:120]}",
            }
        )
    return {"items": items}


def offline_commit(text: str) -> dict[str, Any]:
    """The ``CommitSuggest`` arguments for a helper message (module docstring)."""
    _, _, diff = text.partition(_DIFF_MARK + "\n")
    files: list[str] = []
    added = removed = 0
    for line in diff.splitlines():
        if line.startswith("diff --git ") and " b/" in line:
            name = line.rsplit(" b/", 1)[1]
            if name not in files:
                files.append(name)
        elif line.startswith("+") and not line.startswith("+++"):
            added += 1
        elif line.startswith("-") and not line.startswith("---"):
            removed += 1
    if not files:
        summary = "Update files"
    else:
        summary = "Update " + ", ".join(files[:3])
        if len(files) > 3:
            summary += f" and {len(files) - 3} more"
    body = f"{len(files)} file(s) changed: {added} line(s) added, {removed} removed."
    return {"summary": summary, "body": body}
