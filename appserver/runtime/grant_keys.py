"""Grant keys: what a session grant or a remembered grant covers.

A grant covers what its prompt showed. Each :class:`~appserver.tools.base.ApprovalNeed`
offers its :func:`session_scopes` (the default ``exact`` first, a ``wider`` one where
there is one), each with the key ``acceptForSession`` grants; ``acceptAlways`` is
remembered as :func:`stored_grant`. A shell call's key says how it runs (to its end,
in the background, with its stdin open, or input typed into a background terminal),
and every key outside the workspace names its place. The rules for using them live in
:mod:`appserver.runtime.approvals`.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from appserver.tools.base import ApprovalNeed, one_line

if TYPE_CHECKING:
    from appserver.protocol.turns import SessionScope


def _place_key(need: ApprovalNeed) -> str:
    """The grant key of an operation anywhere in the workspace (DotCraft's keys:
    ``shell:*``, ``file:<operation>``), or of that one place outside it
    (``shell:*:<workdir>``, ``file:<operation>:<path>``): approving a write in
    the workspace never lets a write to ``~/.bashrc`` through, and one read
    outside never lets ``/etc/passwd`` through. Input to a background
    terminal: any input to that one terminal (``shell:stdin:<sessionId>``)."""
    if need.kind == "shell" and need.terminal is not None:
        key = f"shell:stdin:{need.terminal}"
        return f"{key}:{need.target}" if need.outside_workspace else key
    if need.kind == "shell":
        return f"shell:*:{need.target}" if need.outside_workspace else "shell:*"
    if need.kind == "file":
        operation = need.operation.lower()
        if need.outside_workspace:
            return f"file:{operation}:{need.target}"
        return f"file:{operation}"
    return f"{need.kind}:{need.operation}:{need.target}"


def _shell_mode(need: ApprovalNeed) -> str:
    """How a shell call runs: ``cmd`` (to its end), ``background`` (a background
    terminal), ``interactive`` (one whose stdin stays open), ``stdin`` (input
    typed into a background terminal)."""
    if need.terminal is not None:
        return "stdin"
    if need.interactive:
        return "interactive"
    return "background" if need.background else "cmd"


def shell_command_key(need: ApprovalNeed) -> str:
    """The key of one shell call exactly as its prompt showed it.

    ``shell:<mode>-<digest>``: the mode says how it runs (``cmd``: to its end;
    ``background``; ``interactive``: a background terminal with its stdin
    open; ``stdin``: input to one background terminal), the digest is 16 hex
    digits of SHA-256 over the directory and the command line (for input: the
    terminal's session id and the input), so keys stay short and one line
    whatever the command, and a grant of ``bash`` does not cover ``bash`` in
    the background. Outside the workspace the directory follows, as every key
    there names its place: ``shell:cmd-<digest>:<workdir>``.
    """
    mode = _shell_mode(need)
    where = need.terminal if need.terminal is not None else need.target
    digest = hashlib.sha256(f"{where}\0{need.operation}".encode()).hexdigest()[:16]
    key = f"shell:{mode}-{digest}"
    return f"{key}:{need.target}" if need.outside_workspace else key


def stored_grant(need: ApprovalNeed) -> tuple[str, str, str]:
    """``(kind, operation, target)`` an ``acceptAlways`` of ``need`` is kept as.

    A plain command, a file operation or a client tool's call is kept as it
    is; a background or interactive command, or terminal input, adds its mode
    to the kind (``shell+background``, ``shell+interactive``, ``shell+stdin``
    whose target is the terminal's session id), so remembering one never
    covers the other; a file operation outside the workspace (a path outside,
    or a hard-linked file inside) is kept as ``file+outside``.
    """
    mode = _shell_mode(need) if need.kind == "shell" else "cmd"
    if need.kind == "file" and need.outside_workspace:
        # One path can be inside or, as a hard link to a file elsewhere, outside:
        # remembering the inside write never covers the outside one.
        return "file+outside", need.operation, need.target
    if mode == "cmd":
        return need.kind, need.operation, need.target
    if mode == "stdin":
        return "shell+stdin", need.operation, str(need.terminal)
    return f"shell+{mode}", need.operation, need.target


def _how_it_runs(need: ApprovalNeed) -> str:
    """How a shell command runs, as the prompt says it (empty: to its end)."""
    if need.interactive:
        return " as a background terminal with its stdin open"
    return " as a background terminal" if need.background else ""


def session_scopes(need: ApprovalNeed) -> list[SessionScope]:
    """What ``acceptForSession`` of ``need`` can cover, the default first.

    A shell command: ``exact`` (that command line in that directory, run
    the way the prompt showed: to its end, in the background, or with its
    stdin open) by default, ``wider`` (every command in the workspace, or in
    that directory outside it) only when the answer asks for it. Input to a
    background terminal: ``exact`` (that input to that terminal) or
    ``wider`` (any input to that terminal); a command grant never covers
    input. A file operation: one scope,
    the operation anywhere in the workspace (or on that one path outside).
    """
    from appserver.protocol.turns import SessionScope

    if need.kind == "shell" and need.terminal is not None:
        return [
            SessionScope(
                scope="exact",
                scope_key=shell_command_key(need),
                description=(
                    f"this input (`{one_line(need.operation, 80)}`) to terminal {need.terminal} "
                    "for the rest of this thread"
                ),
            ),
            SessionScope(
                scope="wider",
                scope_key=_place_key(need),
                description=f"any input to terminal {need.terminal} for the rest of this thread",
            ),
        ]
    if need.kind == "shell":
        where = need.target if need.outside_workspace else "the workspace"
        return [
            SessionScope(
                scope="exact",
                scope_key=shell_command_key(need),
                description=(
                    f"this command (`{one_line(need.operation, 80)}`) in {need.target}"
                    f"{_how_it_runs(need)} for the rest of this thread"
                ),
            ),
            SessionScope(
                scope="wider",
                scope_key=_place_key(need),
                description=f"every shell command in {where} for the rest of this thread",
            ),
        ]
    if need.kind == "file":
        operation = need.operation.lower()
        where = need.target if need.outside_workspace else "any path in the workspace"
        description = f"file {operation} of {where} for the rest of this thread"
    else:
        description = f"{need.kind} {need.operation} on {need.target} for the rest of this thread"
    return [SessionScope(scope="exact", scope_key=_place_key(need), description=description)]


def scope_key(need: ApprovalNeed) -> str:
    """What a session grant covers by default (``sessionScopes[0]``)."""
    return session_scopes(need)[0].scope_key


def grant_key(need: ApprovalNeed, scope: str) -> str:
    """The key ``acceptForSession`` with ``scope`` grants; anything but a
    ``wider`` the request offered is the default (fail closed: narrower)."""
    scopes = session_scopes(need)
    chosen = next((s for s in scopes if s.scope == scope), scopes[0])
    return chosen.scope_key
