"""The ``qwen`` face's command rules cover one simple command, not a shell line.

``--allowed-tools 'Bash(git *)'`` used to be a plain glob on the whole command
(``git --version; touch X`` ran unasked), and ``--exclude-tools 'Bash(touch *)'``
under ``--yolo`` was bypassed by ``true && touch X``. The matcher is tested on its
own (``appserver.faces.qwen.shell``, ``qwen.rules.local_decision``) and through
the real face process. So are the face's other local approvals: none accepts
anything in a workspace that is not trusted, and input typed into a terminal is
never taken for a command an allow rule covers.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from appserver.faces.qwen.rules import TERMINAL_INPUT, Call, ToolRules, local_decision
from appserver.faces.qwen.shell import allowed_by, excluded_by
from tests.faces.qwen.test_face_qwen import answer, of, qwen, run_once, tool_results, types

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


@pytest.mark.parametrize(
    "command",
    [
        "trap 'touch X' EXIT",
        "trap -- 'touch X' INT TERM",
        'trap "echo bye; touch X" EXIT',
        "true; trap 'sh -c \"touch X\"' EXIT",
        "script -qc 'touch X'",
        "script -q -c 'touch X' /dev/null",
        "script -c'touch X'",
        "script --command 'touch X' log.txt",
        "script --command='touch X'",
        "script --comm 'touch X'",
        "sudo script -qec 'true && touch X' /dev/null",
    ],
)
def test_an_exclude_rule_sees_the_commands_trap_and_script_run(command: str) -> None:
    assert excluded_by(command, ["touch *"]) is True


@pytest.mark.parametrize("command", ["script", "script -q log.txt", 'script -qc "$CMD"'])
def test_script_without_a_visible_command_is_unknown(command: str) -> None:
    # Without -c, script starts an interactive shell reading what is typed: not visible here.
    assert excluded_by(command, ["touch *"]) is None


def test_trap_and_script_with_harmless_commands_stay_allowed() -> None:
    assert excluded_by("trap 'rm -f tmp.lock' EXIT", ["touch *"]) is False
    assert excluded_by("script -qc 'echo hi' /dev/null", ["touch *"]) is False


def _decide(
    mode: str, command: str, rules: ToolRules, *, trusted: bool = True, **arguments: object
) -> str | None:
    call = Call("shell", "call_1", {"command": command, **arguments}, command, outside=False)
    return local_decision(mode, call, rules, Path("/ws"), trusted=trusted)


def _typed(mode: str, text: str, rules: ToolRules) -> str | None:
    arguments: dict[str, object] = {"session_id": "term_1", "input": text}
    call = Call(TERMINAL_INPUT, "call_2", arguments, text, outside=False)
    return local_decision(mode, call, rules, Path("/ws"), trusted=True)


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


def test_nothing_is_accepted_locally_in_an_untrusted_workspace() -> None:
    rules = ToolRules.build(KNOWN, [], ["Bash(touch *)"], ["Bash(git *)"])
    for mode in ("yolo", "auto-edit", "default"):
        assert _decide(mode, "git status", rules, trusted=False) is None  # asked
        assert _decide(mode, "true && touch X", rules, trusted=False) == "decline"
    edit = Call("edit_file", "call_3", {"path": "a.txt"}, "/ws/a.txt", outside=False)
    assert local_decision("auto-edit", edit, rules, Path("/ws"), trusted=False) is None
    assert local_decision("auto-edit", edit, rules, Path("/ws"), trusted=True) == "accept"
    assert local_decision("plan", edit, rules, Path("/ws"), trusted=False) == "decline"


def test_a_patch_is_an_edit_that_write_and_edit_exclusions_name() -> None:
    """apply_patch: auto-edit accepts it like an edit; an exclude rule of write_file or
    edit_file names it; a path pattern cannot be judged against several paths."""
    patch = Call("apply_patch", "call_4", {"input": "..."}, "/ws/a.txt, /ws/b.txt", outside=False)
    none = ToolRules.build(KNOWN, [], [], [])
    assert local_decision("auto-edit", patch, none, Path("/ws"), trusted=True) == "accept"
    assert local_decision("default", patch, none, Path("/ws"), trusted=True) is None
    # A bare exclusion of write_file takes apply_patch off the tools too.
    whole = ToolRules.build([*KNOWN, "apply_patch"], [], ["write_file"], [])
    assert whole.registry == ["shell", "read_file", "list_dir", "edit_file"]
    paths = ToolRules.build(KNOWN, [], ["Edit(secret/**)"], [])
    assert local_decision("yolo", patch, paths, Path("/ws"), trusted=True) == "decline"
    assert local_decision("auto-edit", patch, paths, Path("/ws"), trusted=True) is None


def test_terminal_input_is_not_a_command_an_allow_rule_covers() -> None:
    allow = ToolRules.build(KNOWN, [], [], ["Bash(git *)", "Bash", "write_file"])
    assert _typed("default", "git push --force", allow) is None  # asked
    assert _typed("auto-edit", "git status", allow) is None
    assert _typed("yolo", "git push --force", allow) == "accept"  # yolo runs everything
    # Exclude rules still read it as a command line (a shell in the terminal runs it as one).
    exclude = ToolRules.build(KNOWN, [], ["Bash(touch *)"], ["Bash(git *)"])
    assert _typed("yolo", "touch X\n", exclude) == "decline"
    assert _typed("default", "git status && touch X\n", exclude) == "decline"
    assert _typed("yolo", "print(open('X', 'w'))\n", exclude) == "decline"  # cannot tell
    assert _typed("default", "print(1)\n", exclude) is None
    assert _typed("yolo", "y\n", exclude) == "accept"


# --- through the real face: trust and terminal input ----------------------------------


async def test_no_local_approval_runs_anything_in_an_untrusted_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    origin, clone = tmp_path / "origin", tmp_path / "clone"
    origin.mkdir()
    monkeypatch.setenv("APPSERVER_HOME", str(tmp_path / "home-of-the-author"))
    text = ["--input-format", "text", "--output-format", "stream-json"]
    made = await run_once(origin, *text, "--yolo", stdin=b"!touch trusted.txt")
    assert made.returncode == 0, made.stderr
    assert (origin / "trusted.txt").exists()  # its own new workspace: trusted, yolo runs
    shutil.copytree(origin / ".craft", clone / ".craft")
    monkeypatch.setenv("APPSERVER_HOME", str(tmp_path / "home-of-the-cloner"))

    # The prober's line: text input, nobody to ask, so the call is declined.
    ran = await run_once(clone, *text, "--yolo", stdin=b"!touch SENTINEL")
    assert ran.returncode == 0, ran.stderr
    assert not (clone / "SENTINEL").exists()
    last = json.loads(ran.stdout.splitlines()[-1])
    assert last["result"] == "The shell call was declined.", last

    # With the SDK, each local auto mode asks can_use_tool instead of running the call.
    flags = ("--yolo", "--allowed-tools", "Bash(touch *)", "--exclude-tools", "Bash(rm *)")
    async with qwen(clone, *flags) as proc:
        await proc.initialize()
        cases = [
            ("yolo", "!touch yolo.txt", "shell"),
            ("auto-edit", ">edit.txt\nx", "write_file"),
            ("default", "!touch allowed.txt", "shell"),
        ]
        for mode, prompt, tool in cases:
            response = await proc.control("set_permission_mode", mode=mode)
            assert response["subtype"] == "success", response
            await proc.prompt(prompt)
            (request,) = of(
                await proc.until(lambda f: f["type"] == "control_request"), "control_request"
            )
            assert request["request"]["tool_name"] == tool, (mode, request)
            await proc.send(answer(request, behavior="deny", message="not trusted"))
            frames = await proc.result()
            assert frames[-1]["result"] == f"The {tool} call was declined.", (mode, frames)
        await proc.prompt("!rm -f nothing.txt")  # an exclude rule still declines unasked
        frames = await proc.result()
        assert "control_request" not in types(frames)
        assert frames[-1]["result"] == "The shell call was declined."
    assert sorted(path.name for path in clone.iterdir()) == [".craft"]


async def test_terminal_input_is_asked_as_itself(workspace: Path) -> None:
    # Background terminals come with the full server (--websocket).
    flags = ("--websocket", "ws://127.0.0.1:0", "--allowed-tools", "Bash(git *),Bash(cat *)")
    async with qwen(workspace, *flags) as proc:
        await proc.initialize()
        start = {"command": "cat", "run_in_background": True, "interactive": True}
        await proc.prompt("?tool shell " + json.dumps(start))
        (request,) = of(
            await proc.until(lambda f: f["type"] == "control_request"), "control_request"
        )
        assert request["request"]["tool_name"] == "shell"  # an interactive start is asked
        assert request["request"]["input"] == start
        await proc.send(answer(request, behavior="allow", updatedInput=start))
        frames = await proc.result()
        found = re.search(r"Session ID: (term_\w+)", tool_results(frames)[0]["content"])
        assert found, tool_results(frames)
        typed = {"session_id": found.group(1), "input": "git push --force"}

        await proc.prompt("?tool write_stdin " + json.dumps(typed))
        frames = await proc.until(lambda f: f["type"] in ("control_request", "result"))
        (request,) = of(frames, "control_request")  # asked, not run by the git rule
        (use,) = [
            block
            for frame in of(frames, "assistant")
            for block in frame["message"]["content"]
            if block["type"] == "tool_use"
        ]
        assert request["request"]["tool_name"] == "write_stdin"
        assert request["request"]["input"] == typed  # what is typed, into which terminal
        assert request["request"]["tool_use_id"] == use["id"]
        assert request["request"]["blocked_path"] is None
        await proc.send(answer(request, behavior="deny", message="no"))
        frames = await proc.result()
        assert frames[-1]["result"] == "The write_stdin call was declined."
