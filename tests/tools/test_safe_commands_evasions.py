"""Command lines that looked read-only to the classifier (tools/safe_commands.py)
but were not, each found by probing it with the real bash, git and rg: they ask now."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from appserver.tools.safe_commands import classify

CASES: list[tuple[str, str]] = [
    # brace expansion after an empty quoted string: bash makes options of it
    ("find . ''{},-exec,sh,-c,'id > pwned'} {} +", "expands braces"),
    ("cat ''{},.craft/config.json}", "expands braces"),
    ("cat x{},.craft/config.json}", "expands braces"),
    ("find . -name {}x", "expands braces"),
    # bash expands `~` after `=` or `:` in a word that looks like an assignment
    ("cat a=~/config.json", "expands `~`"),
    ("cat a=b:~/config.json", "expands `~`"),
    # git takes -U/--unified/--pretty/--format values only attached: the next word is its own
    ("git diff -U --output=/tmp/written", "writes: --output"),
    ("git log -p -U --output=written", "writes: --output"),
    ("git show --pretty --output=written", "writes: --output"),
    ("git diff --unified --output=written", "writes: --output"),
    ("git log --format --output=written", "writes: --output"),
    ("git diff -U /etc/passwd README.md", "reads outside the workspace: /etc/passwd"),
    ("git log --contains --output=x", "unknown flag for git log: --contains"),
    # a value word that looks like a flag is asked (a program may read it as one)
    ("grep -e -foo README.md", "takes -foo as the value of -e"),
    ("git log --author --output=x", "takes --output=x as the value of --author"),
    # rg's --color takes a value: the words after it are not shifted
    ("rg --color never -. FAKE", "reads the workspace's .craft/"),
    ("rg --color always --hidden sk-", "reads the workspace's .craft/"),
    # tail's obsolete `+Nf` follows, as -f does
    ("tail +1f README.md", "never ends"),
    ("tail +f README.md", "never ends"),
    ("tail +2lf README.md", "never ends"),
    # no subcommand at all
    ("git", "not a known read-only git command"),
    ("git --no-pager", "not a known read-only git command"),
]
STILL_UNASKED = [
    "git log HEAD~1 -U5 -p",
    "git log --pretty=oneline --since 2.weeks -3",
    "head -n -5 README.md",
    "tail +3 README.md",
    "git branch -l --format '%(refname:short)'",
    "cut -d - -f1 README.md",
    "rg --color=never foo",
    "rg --color never foo src",
]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "README.md").write_text("hello\n")
    (root / "src").mkdir()
    return Path(os.path.realpath(root))


@pytest.mark.parametrize(("command", "expected"), CASES)
def test_asked(workspace: Path, command: str, expected: str) -> None:
    reason = classify(command, workspace, workspace)
    assert reason is not None and expected in reason, (command, reason)


@pytest.mark.parametrize("command", STILL_UNASKED)
def test_still_unasked(workspace: Path, command: str) -> None:
    assert classify(command, workspace, workspace) is None


def test_find_placeholder_as_its_own_word_still_parses(workspace: Path) -> None:
    reason = classify("find . -exec ls {} +", workspace, workspace)
    assert reason == "runs a program: -exec"


def test_rg_asks_when_an_ignore_file_above_the_workspace_re_includes(tmp_path: Path) -> None:
    """rg reads the ignore files of every directory above the one it searches."""
    outer = Path(os.path.realpath(tmp_path)) / "outer"
    workspace = outer / "ws"
    workspace.mkdir(parents=True)
    assert classify("rg FAKE", workspace, workspace) is None
    (outer / ".ignore").write_text("!.craft\n")
    reason = classify("rg FAKE", workspace, workspace)
    assert reason is not None and "outer/.ignore re-includes" in reason


def test_a_byte_order_mark_does_not_hide_a_re_inclusion(workspace: Path) -> None:
    (workspace / ".gitignore").write_text("\ufeff!.craft\n", encoding="utf-8")
    reason = classify("rg FAKE", workspace, workspace)
    assert reason is not None and "re-includes" in reason


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def repository(workspace: Path) -> Path:
    _git(workspace, "init", "-q")
    _git(workspace, "config", "user.email", "a@example.com")
    _git(workspace, "remote", "add", "origin", "https://example.com/x.git")
    return workspace


def test_git_runs_unasked_in_a_plain_repository(repository: Path) -> None:
    assert classify("git status", repository, repository) is None
    assert classify("git log --oneline -3", repository / "src", repository) is None


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("core.fsmonitor", "touch pwned"),
        ("diff.evil.textconv", "touch pwned"),
        ("filter.evil.clean", "touch pwned"),
        ("gpg.program", "touch pwned"),
        ("core.worktree", "/"),
        ("include.path", "../elsewhere.cfg"),
    ],
)
def test_git_asks_when_the_repository_config_names_a_program(
    repository: Path, key: str, value: str
) -> None:
    _git(repository, "config", key, value)
    reason = classify("git status", repository, repository)
    # core.worktree=/ is caught first: the work tree is then outside the workspace.
    assert reason is not None
    assert f"sets {key.lower()}" in reason or "work tree is outside" in reason, reason
    assert not (repository / "pwned").exists()


def test_git_asks_for_what_an_included_file_sets(repository: Path) -> None:
    (repository / "inc.cfg").write_text("[core]\n\tfsmonitor = touch pwned\n")
    _git(repository, "config", "include.path", "../inc.cfg")
    reason = classify("git diff", repository, repository)
    assert reason is not None and "include.path" in reason


def test_git_asks_when_the_repository_has_a_post_index_change_hook(repository: Path) -> None:
    hook = repository / ".git" / "hooks" / "post-index-change"
    hook.write_text("#!/bin/sh\ntouch pwned\n")
    hook.chmod(0o755)
    reason = classify("git status", repository, repository)
    assert reason is not None and "post-index-change" in reason


def test_git_asks_for_a_repository_outside_or_borrowing_from_outside(
    repository: Path, tmp_path: Path
) -> None:
    """A `.git` file naming another repository, or a workspace inside a bigger
    one, lets git read what lies outside; so do alternates."""
    other = tmp_path / "other"
    other.mkdir()
    _git(other, "init", "-q")
    inner = repository / "src"
    assert classify("git log -1", inner, inner) is not None  # the work tree is above the root
    pointer = tmp_path / "pointer"
    pointer.mkdir()
    (pointer / ".git").write_text(f"gitdir: {other / '.git'}\n")
    reason = classify("git status", pointer, Path(os.path.realpath(pointer)))
    assert reason is not None and "git directory is outside" in reason
    alternates = repository / ".git" / "objects" / "info" / "alternates"
    alternates.parent.mkdir(parents=True, exist_ok=True)
    alternates.write_text(str(other / ".git" / "objects") + "\n")
    assert "alternates" in str(classify("git log -1", repository, repository))


def test_git_asks_with_submodules_and_outside_a_repository(
    repository: Path, tmp_path: Path
) -> None:
    (repository / ".gitmodules").write_text('[submodule "sub"]\n\tpath = sub\n')
    assert "submodules" in str(classify("git status", repository, repository))
    plain = tmp_path / "plain"
    plain.mkdir()
    root = Path(os.path.realpath(plain))
    assert "outside a repository" in str(classify("git diff . src", root, root))
    assert classify("git log", root, root) is None  # git refuses it there


def test_git_asks_for_a_partial_clone(repository: Path) -> None:
    """Reading a missing object of a partial clone fetches, and a fetch runs
    `git maintenance --auto` and its hook."""
    _git(repository, "config", "remote.origin.promisor", "true")
    assert "remote.origin.promisor" in str(classify("git log -p", repository, repository))
