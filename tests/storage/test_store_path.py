"""``--store sqlite:///...`` naming a file in a directory that does not exist
is refused at start (issue 27), through the real ``appserver`` command: one
line naming the path, exit code 2 like every bad option, nothing created."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio

from appserver.storage.db import check_store
from tests.support.servers import child_env


async def appserver(workspace: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    with anyio.fail_after(30):
        return await anyio.run_process(
            [sys.executable, "-m", "appserver", "app-server", "--workspace", str(workspace), *args],
            env=child_env(),
            stdin=subprocess.DEVNULL,
            check=False,
            cwd=cwd,
        )


def one_line(stderr: bytes) -> str:
    lines = stderr.decode().splitlines()
    assert len(lines) == 1, stderr.decode()
    return lines[0]


async def test_a_relative_store_in_a_missing_directory_is_refused(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    result = await appserver(workspace, "--store", "sqlite:///nonexistent/x.db", cwd=tmp_path)
    assert result.returncode == 2
    line = one_line(result.stderr)
    assert line.startswith("appserver: --store sqlite:///nonexistent/x.db: ")
    assert f"no directory {workspace / 'nonexistent'}" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ws"]
    assert list(workspace.iterdir()) == []  # not even .craft/


async def test_an_absolute_store_in_a_missing_directory_is_refused(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    missing = tmp_path / "nowhere" / "deeper"
    result = await appserver(workspace, "--store", f"sqlite:///{missing}/x.db", cwd=tmp_path)
    assert result.returncode == 2
    assert f"no directory {missing}" in one_line(result.stderr)
    assert not (tmp_path / "nowhere").exists()


async def test_a_store_in_an_existing_directory_is_used(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "state").mkdir(parents=True)
    result = await appserver(workspace, "--store", "sqlite:///state/x.db", cwd=tmp_path)
    assert result.returncode == 0, result.stderr.decode()
    assert (workspace / "state" / "x.db").is_file()


def test_the_default_store_still_makes_its_own_craft_dir(tmp_path: Path) -> None:
    assert check_store(None, tmp_path) == ("sqlite", str(tmp_path / ".craft" / "appserver.db"))
    assert check_store("postgresql://me@db/app", tmp_path)[0] == "postgresql"


def test_a_file_where_the_directory_should_be_is_refused(tmp_path: Path) -> None:
    (tmp_path / "state").write_text("not a directory")
    try:
        check_store("sqlite:///state/x.db", tmp_path)
    except ValueError as exc:
        assert f"no directory {tmp_path / 'state'}" in str(exc)
    else:
        raise AssertionError("accepted a store inside a file")
