"""The read-only command classifier (tools/safe_commands.py) and its hook in the shell tool."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from appserver.tools.base import ApprovalNeed, ToolContext
from appserver.tools.safe_commands import RULES, classify
from appserver.tools.shell import ShellTool

# (command, None when it runs unasked, else a piece of the reason it asks)
CASES: list[tuple[str, str | None]] = [
    ("ls", None),
    ("ls -la src", None),
    ("ls --all --sort=time", None),
    ("cat README.md", None),
    ("head -n 5 README.md", None),
    ("head -20 README.md", None),
    ("tail -n +3 README.md", None),
    ("wc -l README.md", None),
    ("grep -rn 'foo.*bar' src", None),
    ("grep -e x -C 2 src", None),
    ("rg -n foo", None),
    ("rg --files --glob '*.py'", None),
    ("find . -name '*.py' -type f", None),
    ("find src -maxdepth 2 \\( -name a -o -name b \\) -print", None),
    ("git status", None),
    ("git status -sb -uno", None),
    ("git log --oneline -5", None),
    ("git diff --stat HEAD", None),
    ("git show HEAD", None),
    ("git branch", None),
    ("git branch -a -v", None),
    ("git branch --list 'feat*'", None),
    ("git --no-pager log -n 3", None),
    ("pwd", None),
    ("echo 'a;b|c > d'", None),
    ('echo "quoted $ is not" ', "expands a variable"),
    ("true", None),
    ("nl -ba README.md", None),
    ("cut -d: -f1 README.md", None),
    ("sort -u README.md", None),
    ("uniq -c README.md", None),
    ("tr a-z A-Z", None),
    ("sed -n 5p README.md", None),
    ("sed -n '1,5p' README.md", None),
    ("stat README.md", None),
    ("file README.md", None),
    ("which python3", None),
    # shell syntax
    ("ls; rm x", "runs several commands (`;`)"),
    ("ls && rm x", "runs several commands (`&&`)"),
    ("ls || rm x", "if this one fails"),
    ("ls | wc -l", "pipes into another command"),
    ("ls &", "runs in the background"),
    ("ls > out", "redirects output"),
    ("cat < README.md", "redirects input"),
    ("echo $(rm x)", "substitutes a command's output"),
    ("echo `rm x`", "backticks"),
    ('echo "$(rm x)"', "substitutes a command's output"),
    ("echo $HOME", "expands a variable"),
    ("ls *.py", "glob"),
    ("ls {a,b}", "braces"),
    ("ls a{b}", "braces"),
    ("ls ~", "home directory"),
    ("ls\nrm x", "several lines"),
    ("ls 'unclosed", "unbalanced quotes"),
    ("(ls)", "subshell"),
    # unknown commands and flags
    ("rm x", "not a known read-only command: rm"),
    ("FOO=1 ls", "not a known read-only command"),
    ("/bin/ls", "not a known read-only command"),
    ("ls --frobnicate", "unknown flag for ls: --frobnicate"),
    ("ls -Q9", "unknown flag for ls: -9"),
    ("sort --out=x y", "unknown flag for sort: --out"),
    # writing or running flags
    ("find . -delete", "writes: -delete"),
    ("find . -exec rm {} \\;", "runs a program: -exec"),
    ("find . -execdir rm {} +", "runs a program: -execdir"),
    ("find . -okdir rm {} +", "runs a program: -okdir"),
    ("find . -fprint out", "writes a file: -fprint"),
    ("find . -fprintf out %p", "writes a file: -fprintf"),
    ("find -L .", "follows symlinks"),
    ("sort -o out README.md", "writes: -o"),
    ("sort -uo out README.md", "writes: -o"),
    ("sort --output=out README.md", "writes: --output"),
    ("uniq README.md out", "writes its extra file argument: out"),
    ("rg --pre cat foo", "runs a program on each file: --pre"),
    ("rg --pre=cat foo", "runs a program on each file: --pre"),
    ("rg --hostname-bin=x foo", "runs a program"),
    ("rg -z foo", "decompression"),
    ("rg --search-zip foo", "decompression"),
    ("rg -L foo", "follows symlinks"),
    ("grep -R foo .", "follows symlinks"),
    ("tail -f log", "never ends"),
    ("sed -i s/a/b/ README.md", "not a known read-only form of sed"),
    ("sed -n 's/a/b/p' README.md", "not a known read-only form of sed"),
    ("sed -n 5p README.md -i", "unknown flag for sed: -i"),  # GNU sed permutes flags
    ("git -c core.pager=x log", "global options"),
    ("git -C /tmp status", "global options"),
    ("git push", "not a known read-only git command: git push"),
    ("git branch newbranch", "creates a branch"),
    ("git branch -D main", "unknown flag for git branch: -D"),
    ("git log --output=x", "writes: --output"),
    ("git diff --ext-diff", "external diff"),
    ("git log --exec=x", "unknown flag for git log: --exec"),
    # paths outside the workspace
    ("cat /etc/passwd", "reads outside the workspace: /etc/passwd"),
    ("cat ../secret", "reads outside the workspace: ../secret"),
    ("grep -f /etc/passwd x .", "reads outside the workspace: /etc/passwd"),
    ("ls .craft", "reads outside the workspace: .craft"),
    ("find / -name x", "reads outside the workspace: /"),
    ("find . -newer /etc/passwd", "reads outside the workspace: /etc/passwd"),
    ("cat link-out", "reads outside the workspace: link-out"),
    # walks that would read .craft/ or follow a link out (tools/safe_walks.py)
    ("grep -rn 'foo.*bar' .", "reads the workspace's .craft/"),
    ("grep -rn foo", "reads the workspace's .craft/"),
    ("grep -d recurse foo .", "reads the workspace's .craft/"),
    ("grep -r foo src/.. README.md", "reads the workspace's .craft/"),
    ("grep -r --exclude-dir=.craft foo .", None),
    ("grep -r --exclude-dir='[^.]craft' foo .", "reads the workspace's .craft/"),
    ("grep -d rec -n foo .", "reads the workspace's .craft/"),
    ("grep -drec foo .", "reads the workspace's .craft/"),
    ("grep --directories=rec foo .", "reads the workspace's .craft/"),
    ("grep -d skip foo .", None),
    ("grep --recur foo .", "unknown flag for grep: --recur"),
    ("grep -r -e foo src", None),
    ("grep foo README.md", None),
    ("rg --hidden foo", "reads the workspace's .craft/"),
    ("rg -uu foo", "reads the workspace's .craft/"),
    ("rg -n. foo", "reads the workspace's .craft/"),
    ("rg --unrestricted foo .", "reads the workspace's .craft/"),
    ("rg -g '.*' foo", "reads the workspace's .craft/"),
    ("rg --glob '**' foo", "reads the workspace's .craft/"),
    ("rg --files --hidden", "reads the workspace's .craft/"),
    ("rg --ignore-file src/x foo", "reads the workspace's .craft/"),
    ("rg -g '*.py' -g '!*.md' foo", None),
    ("rg -g 'src/**' -g Makefile -g '.github/*' foo", None),
    ("rg -g '{.craft,*.json}' foo", "reads the workspace's .craft/"),
    ("rg -g '.cr{a,b}ft' -g '*.json' foo", "reads the workspace's .craft/"),
    ("rg -g '\\.craft' -g '*.json' foo", "reads the workspace's .craft/"),
    ("rg --iglob .CRAFT -g '*.json' foo", "reads the workspace's .craft/"),
    ("rg --glob-case-insensitive -g .CRAFT foo", "reads the workspace's .craft/"),
    ("rg -g '/.craft/*' foo", "reads the workspace's .craft/"),
    ("rg -g '*t' foo", "reads the workspace's .craft/"),
    ("rg -g '*' foo", "reads the workspace's .craft/"),
    ("rg -g '**/*.py' foo", "reads the workspace's .craft/"),
    ("rg --hidden foo src", None),
    ("rg --files --hidden src", None),
    ("diff links plain", "reads outside the workspace: links/x"),
    ("diff plain links", "reads outside the workspace: links/x"),
    ("diff --new-file links/.. plain", "reads outside the workspace"),
    ("diff plain other", None),
    ("diff plain README.md", None),
]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "README.md").write_text("hello\n")
    os.symlink("/etc/passwd", root / "link-out")
    for name in ("links", "plain", "other"):
        (root / name).mkdir()
    os.symlink("/etc/passwd", root / "links" / "x")  # diff follows it
    (root / "plain" / "x").write_text("")
    (root / "other" / "y").write_text("")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)  # git reads a repository
    return Path(os.path.realpath(root))


@pytest.mark.parametrize(("command", "expected"), CASES)
def test_classify(workspace: Path, command: str, expected: str | None) -> None:
    reason = classify(command, workspace, workspace)
    if expected is None:
        assert reason is None, f"{command!r} was asked: {reason}"
    else:
        assert reason is not None and expected in reason, (command, reason)


def test_git_asks_in_an_untrusted_workspace(workspace: Path) -> None:
    reason = classify("git status", workspace, workspace, trusted=False)
    assert reason is not None and "not trusted" in reason
    assert classify("ls", workspace, workspace, trusted=False) is None


def test_rg_from_the_root_asks_when_an_ignore_file_re_includes(workspace: Path) -> None:
    """A ``!`` line may bring the hidden .craft/ back into a plain rg."""
    assert classify("rg foo", workspace, workspace) is None
    (workspace / ".ignore").write_text("build/\n!.craft/\n")
    reason = classify("rg foo", workspace, workspace)
    assert reason is not None and ".ignore re-includes" in reason
    assert classify("rg foo src", workspace, workspace) is None


def test_rg_from_the_root_asks_in_a_worktree(workspace: Path) -> None:
    """A ``.git`` file (a worktree's) names a git directory whose exclude file rg reads."""
    shutil.rmtree(workspace / ".git")
    (workspace / ".git").write_text("gitdir: sub/gd\n")
    reason = classify("rg foo", workspace, workspace)
    assert reason is not None and ".git is a file" in reason


def test_a_working_directory_outside_asks(workspace: Path, tmp_path: Path) -> None:
    assert classify("ls", tmp_path, workspace) == "runs outside the workspace"


def test_every_rule_names_a_command_that_exists_in_the_table() -> None:
    for name in ("ls", "cat", "head", "tail", "wc", "grep", "rg", "pwd", "echo", "true"):
        assert name in RULES


def _plan(workspace: Path, command: str, **settings: object) -> ApprovalNeed | None:
    ctx = ToolContext(workspace=workspace, thread_id="t", turn_id="u", call_id="c")
    for key, value in settings.items():
        setattr(ctx, key, value)
    return ShellTool().plan({"command": command}, ctx).approval


def test_shell_plan_runs_read_only_commands_unasked(workspace: Path) -> None:
    assert _plan(workspace, "ls -la") is None
    assert _plan(workspace, "git status") is None


def test_shell_plan_says_why_it_asks(workspace: Path) -> None:
    need = _plan(workspace, "ls; rm x")
    assert need is not None
    assert need.reason == "Run a shell command in . — runs several commands (`;`)"
    need = _plan(workspace, "find . -delete")
    assert "writes: -delete" in need.reason


def test_shell_plan_setting_off_asks(workspace: Path) -> None:
    need = _plan(workspace, "ls", read_only_unasked=False)
    assert need is not None and "autoApproveReadOnlyCommands is off" in need.reason
    need = _plan(workspace, "git status", workspace_trusted=False)
    assert need is not None and "not trusted" in need.reason


def test_background_terminals_still_ask(workspace: Path) -> None:
    ctx = ToolContext(workspace=workspace, thread_id="t", turn_id="u", call_id="c")
    plan = ShellTool().plan({"command": "ls", "run_in_background": True}, ctx)
    assert plan.approval is not None
    assert "background terminal" in plan.approval.reason
