"""The ``qwen`` face's command rules cover one simple command, not a shell line.

``--allowed-tools 'Bash(git *)'`` used to be a plain glob on the whole command
(``git --version; touch X`` ran unasked), and ``--exclude-tools 'Bash(touch *)'``
under ``--yolo`` was bypassed by ``true && touch X``. The matcher is tested on its
own (``appserver.faces.qwen_shell``, ``qwen_rules.local_decision``) and through
the real face process.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from appserver.faces.qwen_rules import Call, ToolRules, local_decision
from appserver.faces.qwen_shell import allowed_by, excluded_by
from tests.test_face_qwen import answer, of, qwen, tool_results, types

KNOWN = ["shell", "read_file", "list_dir", "write_file", "edit_file"]


@pytest.mark.parametrize(
    "command",
    ["git status", "git", "git log --oneline -n 3", "git log 'a;b && c'", "git log $REF"],
)
def test_an_allow_rule_covers_a_single_simple_command(command: str) -> None:
    assert allowed_by(command, ["git *"])


@pytest.mark.parametrize(
    "command",
    [
        "git --version; touch X",
        "git --version && touch X",
        "git --version || touch X",
        "git --version | touch X",
        "git --version & touch X",
        "git --version\ntouch X",
        "git --version\rtouch X",
        "git log $(touch X)",
        "git log `touch X`",
        'git log "$(touch X)"',
        "git log <(touch X)",
        "git log > X",
        "git log 2>X",
        "git log <<EOF\nx\nEOF",
        "git log (x)",
        "git 'unterminated",
        "GIT_PAGER=evil git log",
        "gitx status",
        "! git status",
    ],
)
def test_an_allow_rule_does_not_cover_a_compound_or_opaque_command(command: str) -> None:
    assert not allowed_by(command, ["git *"])


def test_echo_rule_does_not_cover_a_substitution() -> None:
    assert allowed_by("echo hello world", ["echo *"])
    assert not allowed_by("echo $(touch X)", ["echo *"])
    assert not allowed_by('echo "`touch X`"', ["echo *"])


def test_claude_code_pattern_forms() -> None:
    assert allowed_by("npm run test", ["npm run test:*"])
    assert allowed_by("npm run test -- -x", ["npm run test:*"])
    assert not allowed_by("npm run testx", ["npm run test *"])
    assert allowed_by("git status", ["git status"])
    assert not allowed_by("git status -s", ["git status"])


@pytest.mark.parametrize(
    "command",
    [
        "touch X",
        "touch",
        "true && touch X",
        "true || touch X",
        "true; touch X",
        "true | touch X",
        "true & touch X",
        "true\ntouch X",
        "/usr/bin/touch X",
        "\\touch X",
        "t''ouch X",
        "FOO=1 touch X",
        "> out touch X",
        "sudo -u root touch X",
        "timeout 5 touch X",
        "env -i touch X",
        "echo X | xargs touch",
        "find . -exec touch {} ;",
        "sh -c 'touch X'",
        'bash -lc "echo hi; touch X"',
        "eval touch X",
        "if true; then touch X; fi",
        "for f in a b; do touch $f; done",
        "touch X; echo $(id)",  # the readable part already matches
    ],
)
def test_an_exclude_rule_matches_any_simple_command(command: str) -> None:
    assert excluded_by(command, ["touch *"]) is True


@pytest.mark.parametrize(
    "command",
    [
        "echo $(touch X)",
        "echo `touch X`",
        "cat <(touch X)",
        "$CMD X",
        "tou?h X",
        "{touch,X}",
        "(touch X)",
        "echo touch X | sh",
        "function f { touch X; }; f",
        "echo 'unterminated",
    ],
)
def test_an_exclude_rule_cannot_tell_what_it_cannot_read(command: str) -> None:
    assert excluded_by(command, ["touch *"]) is None


@pytest.mark.parametrize(
    "command",
    ["echo touch X", "git commit -m 'touch the file'", "ls -la; git status", "echo ok # ; touch X"],
)
def test_an_exclude_rule_leaves_other_commands(command: str) -> None:
    assert excluded_by(command, ["touch *"]) is False


def _decide(mode: str, command: str, rules: ToolRules, **arguments: object) -> str | None:
    call = Call("shell", "call_1", {"command": command, **arguments}, command, outside=False)
    return local_decision(mode, call, rules, Path("/ws"))


def test_local_decisions_fail_closed() -> None:
    allow = ToolRules.build(KNOWN, [], [], ["Bash(git *)", "Bash(echo *)"])
    assert _decide("default", "git status", allow) == "accept"
    assert _decide("default", "git --version; touch X", allow) is None  # asked
    assert _decide("default", "echo $(touch X)", allow) is None
    # An interactive terminal takes typed input later: a command rule does not cover it.
    assert _decide("default", "git status", allow, interactive=True) is None
    exclude = ToolRules.build(KNOWN, [], ["Bash(touch *)"], [])
    assert _decide("yolo", "true && touch X", exclude) == "decline"
    assert _decide("yolo", "echo $(touch X)", exclude) == "decline"  # cannot tell: refused
    assert _decide("default", "echo $(touch X)", exclude) is None  # cannot tell: asked
    assert _decide("yolo", "echo hi && ls", exclude) == "accept"
    # Exclude rules for file tools only do not make shell commands uncertain.
    files_only = ToolRules.build(KNOWN, [], ["Edit(secret/**)"], [])
    assert _decide("yolo", "echo $(date)", files_only) == "accept"


# --- through the real face ------------------------------------------------------------


async def test_an_allow_rule_asks_for_a_compound_command(workspace: Path) -> None:
    prompts = [
        "!git --version; touch semicolon.txt",
        "?tool shell " + json.dumps({"command": "git --version\ntouch newline.txt"}),
        "!echo $(touch substituted.txt)",
    ]
    async with qwen(workspace, "--allowed-tools", "Bash(git *),Bash(echo *)") as proc:
        await proc.initialize()
        await proc.prompt("!echo allowed")
        frames = await proc.result()
        assert "control_request" not in types(frames)
        assert tool_results(frames)[0]["content"] == "exit code: 0\nallowed\n"
        for prompt in prompts:
            await proc.prompt(prompt)
            (request,) = of(
                await proc.until(lambda f: f["type"] == "control_request"), "control_request"
            )
            assert request["request"]["subtype"] == "can_use_tool"
            await proc.send(answer(request, behavior="deny", message="no"))
            frames = await proc.result()
            assert frames[-1]["result"] == "The shell call was declined."
    assert not list(workspace.glob("*.txt"))


async def test_yolo_exclude_rule_sees_every_simple_command(workspace: Path) -> None:
    async with qwen(workspace, "--yolo", "--exclude-tools", "Bash(touch *)") as proc:
        await proc.initialize()
        for command in ("true && touch chained.txt", "echo $(touch substituted.txt)"):
            await proc.prompt(f"!{command}")
            frames = await proc.result()
            assert "control_request" not in types(frames)
            assert frames[-1]["result"] == "The shell call was declined."
        await proc.prompt("!echo fine > fine.log")
        frames = await proc.result()
        assert frames[-1]["result"] == "The command exited with code 0."
    assert not list(workspace.glob("*.txt"))
    assert (workspace / "fine.log").read_text() == "fine\n"
