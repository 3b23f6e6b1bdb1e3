"""Qwen Code's permission knobs for the ``qwen`` face: approval modes, the tool
lists (``--core-tools``, ``--exclude-tools``, ``--allowed-tools``) and the
decision a gated tool call gets before the SDK is asked.

Tool names may be ours (``shell``, ``read_file``, ``list_dir``, ``write_file``,
``edit_file``) or Qwen Code's (``run_shell_command``, ``read_file``,
``list_directory``, ``write_file``, ``edit``, and the aliases ``Bash``,
``Read``, ``Edit``...), case-insensitively. A rule may carry a specifier:
``Bash(git *)`` matches shell commands, ``Edit(src/**)`` paths (absolute, or
relative to the workspace), both as ``fnmatch`` patterns. A command rule is
about one simple command (``shell``): an allow rule never covers a
compound command, a substitution or a redirection, and an exclude rule declines
a command if any simple command in it matches (a command that cannot be read
reliably is asked, and refused under ``yolo``).

Nothing is accepted here in a workspace that is not trusted (``storage.trust``):
``--yolo``, ``auto-edit`` and ``--allowed-tools`` then leave the call to the
person (``can_use_tool``), while exclusions and ``plan`` still decline. Input
typed into a background terminal (``write_stdin``, :data:`TERMINAL_INPUT`) is
not a command an allow rule covers (the program reading it may be anything);
exclude rules still read it as a command line, since a shell in the terminal
would run it as one.
"""

from __future__ import annotations

import contextlib
import fnmatch
import re
from dataclasses import dataclass, field
from pathlib import Path

from appserver.faces.qwen.shell import allowed_by, excluded_by

# Qwen Code's approval modes (``--approval-mode``, ``set_permission_mode``).
MODES = ("plan", "default", "auto-edit", "auto", "yolo")

ALIASES = {
    "shell": "shell",
    "run_shell_command": "shell",
    "bash": "shell",
    "read_file": "read_file",
    "read": "read_file",
    "readfile": "read_file",
    "list_dir": "list_dir",
    "list_directory": "list_dir",
    "ls": "list_dir",
    "readfolder": "list_dir",
    "write_file": "write_file",
    "write": "write_file",
    "writefile": "write_file",
    "edit_file": "edit_file",
    "edit": "edit_file",
    "replace": "edit_file",
    "apply_patch": "apply_patch",
}
# The tool behind a gated file operation (ApprovalRequestParams.operation).
FILE_TOOLS = {
    "read": "read_file",
    "write": "write_file",
    "edit": "edit_file",
    "list": "list_dir",
    "patch": "apply_patch",
}
EDIT_TOOLS = frozenset({"write_file", "edit_file", "apply_patch"})
PATCH_TOOL = "apply_patch"
# Exclude rules that name a patch (it writes and edits).
_PATCH_RULES = frozenset({"write_file", "edit_file", PATCH_TOOL})
# Input typed into a background terminal: its own tool, never a rule's ``shell``.
TERMINAL_INPUT = "write_stdin"
# Calls whose subject is a command line (what command exclude rules read).
_COMMAND_TOOLS = frozenset({"shell", TERMINAL_INPUT})
_RULE = re.compile(r"^\s*([^()\s]+)\s*(?:\((.*)\))?\s*$", re.S)


def canonical(name: str) -> str | None:
    """Our tool name for ``name`` (ours or Qwen Code's), or ``None``."""
    return ALIASES.get(name.strip().lower())


def split_list(values: list[str] | None) -> list[str]:
    """Repeated and comma-separated values, flattened (Qwen Code's array flags).
    A comma inside a specifier's parentheses does not split."""
    out: list[str] = []
    for value in values or []:
        depth, start = 0, 0
        for index, char in enumerate(value):
            if char == "(":
                depth += 1
            elif char == ")":
                depth = max(0, depth - 1)
            elif char == "," and depth == 0:
                out.append(value[start:index])
                start = index + 1
        out.append(value[start:])
    return [item.strip() for item in out if item.strip()]


@dataclass(frozen=True)
class Rule:
    """``tool`` (ours), with an optional ``fnmatch`` pattern on the command or path."""

    tool: str
    pattern: str | None = None

    def matches(self, tool: str, subject: str, workspace: Path) -> bool:
        """Whether the rule covers the call (a shell pattern: as an allow rule,
        one simple command only; exclusions use :func:`exclusion`)."""
        if tool != self.tool:
            return False
        if self.pattern is None:
            return True
        if tool == "shell":
            return allowed_by(subject, [self.pattern])
        candidates = [subject]
        if tool != "shell":
            with contextlib.suppress(ValueError):  # outside the workspace: absolute only
                candidates.append(str(Path(subject).relative_to(workspace)))
        return any(fnmatch.fnmatchcase(text, self.pattern) for text in candidates)


def parse_rules(values: list[str]) -> tuple[list[Rule], list[str]]:
    """Rules for the names we have, and the names we do not know (ignored)."""
    rules: list[Rule] = []
    unknown: list[str] = []
    for value in values:
        match = _RULE.match(value)
        tool = canonical(match.group(1)) if match else None
        if match is None or tool is None:
            unknown.append(value)
            continue
        pattern = match.group(2)
        rules.append(Rule(tool, pattern.strip() if pattern and pattern.strip() else None))
    return rules, unknown


@dataclass
class ToolRules:
    """What the tool flags decided: the registry and the per-call rules."""

    registry: list[str] | None = None  # None: every built-in tool
    allowed: list[Rule] = field(default_factory=list)
    excluded: list[Rule] = field(
        default_factory=list
    )  # with a pattern (bare ones leave the registry)
    ignored: list[str] = field(default_factory=list)  # names we have no tool for

    @classmethod
    def build(
        cls, known: list[str], core: list[str], exclude: list[str], allow: list[str]
    ) -> ToolRules:
        rules = cls()
        core_rules, unknown = parse_rules(core)
        rules.ignored += unknown
        names = list(known)
        if core:
            wanted = {rule.tool for rule in core_rules}
            names = [name for name in names if name in wanted]
        excluded, unknown = parse_rules(exclude)
        rules.ignored += unknown
        bare = {rule.tool for rule in excluded if rule.pattern is None}
        if bare & _PATCH_RULES:
            bare.add(PATCH_TOOL)  # a patch writes and edits: no way around the exclusion
        names = [name for name in names if name not in bare]
        rules.excluded = [rule for rule in excluded if rule.pattern is not None]
        rules.allowed, unknown = parse_rules(allow)
        rules.ignored += unknown
        if names != known:
            rules.registry = names
        return rules


@dataclass(frozen=True)
class Call:
    """A gated call as the seat sees it."""

    tool: str  # ours: shell, a file tool, or TERMINAL_INPUT
    call_id: str
    arguments: dict[str, object]
    subject: str  # the command (shell), the typed input (terminal), or the resolved path
    outside: bool  # outside the workspace: asked even under autoApprove


def thread_policy(mode: str, override: str | None, rules: ToolRules) -> str:
    """The thread's ``approvalPolicy`` for an approval mode.

    ``yolo`` is ``autoApprove`` (inside the workspace; outside it the SDK is
    still asked), unless pattern exclusions must see every call: then the
    seat accepts in the workspace itself. Other modes leave the decision to
    the seat (``default``, or what ``--approval-policy`` says).
    """
    if mode == "yolo":
        return "default" if rules.excluded else "autoApprove"
    return override or "default"


def exclusion(call: Call, rules: ToolRules, workspace: Path) -> bool | None:
    """Whether an exclude rule names the call; ``None`` when the call is a
    shell command (or terminal input) that cannot be read reliably and a shell
    rule might name it (or a patch a path rule of a write or an edit might)."""
    if call.tool == PATCH_TOOL:
        # A patch writes and edits files: a path rule of either might name one of
        # its paths, which cannot be judged against the patch's several paths.
        # (A bare exclusion of either took apply_patch off the tools: ToolRules.build.)
        return None if any(rule.tool in _PATCH_RULES for rule in rules.excluded) else False
    if call.tool not in _COMMAND_TOOLS:
        return any(rule.matches(call.tool, call.subject, workspace) for rule in rules.excluded)
    patterns = [rule.pattern for rule in rules.excluded if rule.tool == "shell" and rule.pattern]
    return excluded_by(call.subject, patterns)


def local_decision(
    mode: str, call: Call, rules: ToolRules, workspace: Path, *, trusted: bool
) -> str | None:
    """``accept``/``decline`` when the mode or the rules settle the call, else
    ``None`` (the SDK is asked). ``trusted``: the workspace is trusted; when it
    is not, only a decline is settled here."""
    excluded = exclusion(call, rules, workspace)
    if excluded or mode == "plan":
        return "decline"
    if call.outside:
        return None  # only the user may let a call out of the workspace
    if excluded is None:
        # Fail closed: yolo never runs what an exclude rule might name; others ask.
        return "decline" if mode == "yolo" else None
    if not trusted:
        return None  # an untrusted workspace auto-approves nothing: the person is asked
    if mode == "yolo":
        return "accept"
    if call.tool == TERMINAL_INPUT:
        return None  # typed into whatever the terminal runs: no allow rule covers it
    if call.tool == "shell" and call.arguments.get("interactive") is True:
        return None  # the agent types into it later: a command rule does not cover that
    if any(rule.matches(call.tool, call.subject, workspace) for rule in rules.allowed):
        return "accept"
    if mode == "auto-edit" and call.tool in EDIT_TOOLS:
        return "accept"
    return None


def decides_locally(mode: str, rules: ToolRules) -> bool:
    """Whether :func:`local_decision` can settle anything at all."""
    return mode in ("plan", "yolo", "auto-edit") or bool(rules.allowed or rules.excluded)
