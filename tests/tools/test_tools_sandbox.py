"""Workspace sandbox: path resolution and the inside/outside verdict."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from appserver.tools.base import ToolError
from appserver.tools.sandbox import Sandbox


@pytest.fixture
def sandbox(workspace: Path) -> Sandbox:
    return Sandbox(workspace)


def real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def test_relative_path_is_under_workspace(sandbox: Sandbox, workspace: Path) -> None:
    resolved = sandbox.resolve("src/main.py")
    assert resolved.path == real(workspace) / "src" / "main.py"
    assert resolved.inside
    assert sandbox.display(resolved) == "src/main.py"


def test_workspace_itself_is_inside(sandbox: Sandbox, workspace: Path) -> None:
    for path in (".", str(workspace), "./"):
        resolved = sandbox.resolve(path)
        assert resolved.path == real(workspace)
        assert resolved.inside
        assert sandbox.display(resolved) == "."


def test_absolute_path_inside(sandbox: Sandbox, workspace: Path) -> None:
    resolved = sandbox.resolve(str(workspace / "a" / "b.txt"))
    assert resolved.inside
    assert resolved.path == real(workspace) / "a" / "b.txt"


def test_dotdot_escape_is_outside(sandbox: Sandbox, workspace: Path) -> None:
    resolved = sandbox.resolve("../secret.txt")
    assert resolved.path == real(workspace).parent / "secret.txt"
    assert not resolved.inside
    assert sandbox.display(resolved) == str(resolved.path)
    # Going down and back up stays inside.
    assert sandbox.resolve("a/../b").inside
    assert not sandbox.resolve("a/../../b").inside


def test_sibling_with_common_prefix_is_outside(sandbox: Sandbox, workspace: Path) -> None:
    # A string-prefix check would wrongly accept /tmp/ws-evil for /tmp/ws.
    assert not sandbox.resolve(str(workspace) + "-evil/x").inside


def test_absolute_path_outside(sandbox: Sandbox) -> None:
    resolved = sandbox.resolve("/etc/passwd")
    assert resolved.path == real(Path("/etc/passwd"))
    assert not resolved.inside


def test_tilde_is_not_expanded(sandbox: Sandbox, workspace: Path) -> None:
    resolved = sandbox.resolve("~/notes.txt")
    assert resolved.path == real(workspace) / "~" / "notes.txt"
    assert resolved.inside


def test_symlink_inside_pointing_outside_is_outside(
    sandbox: Sandbox, workspace: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "data.txt").write_text("x")
    (workspace / "link").symlink_to(outside)
    resolved = sandbox.resolve("link/data.txt")
    assert resolved.path == real(outside) / "data.txt"
    assert not resolved.inside
    assert not sandbox.resolve("link").inside


def test_symlink_to_file_inside_is_inside(sandbox: Sandbox, workspace: Path) -> None:
    (workspace / "real.txt").write_text("x")
    (workspace / "alias.txt").symlink_to(workspace / "real.txt")
    resolved = sandbox.resolve("alias.txt", must_exist=True)
    assert resolved.path == real(workspace) / "real.txt"
    assert resolved.inside


def test_new_leaf_under_symlinked_dir_follows_the_link(
    sandbox: Sandbox, workspace: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (workspace / "out").symlink_to(outside)
    resolved = sandbox.resolve("out/new/deeper.txt")
    assert resolved.path == real(outside) / "new" / "deeper.txt"
    assert not resolved.inside


def test_dangling_symlink_resolves_to_its_target(
    sandbox: Sandbox, workspace: Path, tmp_path: Path
) -> None:
    # Writing through a dangling link creates its target, so the target decides.
    (workspace / "dangling").symlink_to(tmp_path / "not-yet")
    resolved = sandbox.resolve("dangling")
    assert resolved.path == real(tmp_path) / "not-yet"
    assert not resolved.inside


def test_symlinked_workspace(tmp_path: Path, workspace: Path) -> None:
    link = tmp_path / "ws-link"
    link.symlink_to(workspace)
    sandbox = Sandbox(link)
    assert sandbox.resolve("f.txt").inside
    assert sandbox.resolve(str(workspace / "f.txt")).inside
    assert sandbox.display(sandbox.resolve("f.txt")) == "f.txt"


def test_must_exist(sandbox: Sandbox, workspace: Path) -> None:
    (workspace / "here.txt").write_text("x")
    assert sandbox.resolve("here.txt", must_exist=True).inside
    with pytest.raises(ToolError, match="no such file"):
        sandbox.resolve("missing.txt", must_exist=True)


def test_nul_byte_and_empty_path_are_refused(sandbox: Sandbox) -> None:
    with pytest.raises(ToolError, match="NUL"):
        sandbox.resolve("a\0b")
    with pytest.raises(ToolError, match="empty"):
        sandbox.resolve("")


def test_the_servers_state_directory_is_outside(sandbox: Sandbox, workspace: Path) -> None:
    """.craft holds the database and the config with API keys: the model reaches
    it only through an approval naming the path."""
    (workspace / ".craft").mkdir(exist_ok=True)
    for path in (".craft", ".craft/config.json", "sub/../.craft/appserver.db"):
        assert sandbox.resolve(path).inside is False, path
    assert sandbox.resolve(".crafty/file").inside is True
