"""``.craft/.gitignore`` (issue 27): after a real server ran in a git
repository, ``git status`` shows nothing of ``.craft/``'s machine state, but
still shows what a user writes there; a file of the user's is never replaced."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio

from appserver.storage.craft_ignore import CRAFT_GITIGNORE, write_craft_gitignore
from tests.support.processes import ws_client, ws_server
from tests.support.servers import child_env
from tests.support.turns import new_thread, run_turn


def git_status(repo: Path) -> list[str]:
    result = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all", "--ignored=no"],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    )
    return result.stdout.splitlines()


def git_repo(path: Path) -> Path:
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    return path


async def test_a_server_run_leaves_git_status_clean(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo")
    (repo / "README.md").write_text("hello\n")
    with anyio.fail_after(60):
        async with ws_server(repo) as (_, url), ws_client(url) as client:
            thread_id = await new_thread(client)
            _, terminal = await run_turn(client, thread_id, "hello")
            assert terminal["method"] == "turn/completed"
            # While it runs: the database, its WAL and shared memory, the lock.
            assert (repo / ".craft" / "appserver.db-wal").exists()
            assert git_status(repo) == ["?? README.md"]
            # The file is the server's own: the workspace is still its to trust.
            status = await client.request("workspace/status", {})
            assert status["trusted"] is True
    assert git_status(repo) == ["?? README.md"]
    assert (repo / ".craft" / ".gitignore").read_text() == CRAFT_GITIGNORE


async def test_a_stdio_server_writes_it_too(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo")
    with anyio.fail_after(30):
        result = await anyio.run_process(
            [sys.executable, "-m", "appserver", "app-server", "--workspace", str(repo)],
            env=child_env(),
            stdin=subprocess.DEVNULL,
            check=False,
        )
    assert result.returncode == 0, result.stderr.decode()
    assert (repo / ".craft" / "appserver.db").exists()
    assert git_status(repo) == []


def test_what_a_user_writes_in_craft_still_shows(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo")
    craft = repo / ".craft"
    assert write_craft_gitignore(craft)
    for name in ("appserver.db", "appserver.db-wal", "appserver.db-shm", "appserver.lock"):
        (craft / name).write_bytes(b"x")
    for name in ("terminals/thread_1/term_1.log", "attachments/images/ab.png", "nodes/n1.lock"):
        (craft / name).parent.mkdir(parents=True, exist_ok=True)
        (craft / name).write_bytes(b"x")
    (craft / ".config.json.k2j3.tmp").write_text("{}")
    assert git_status(repo) == []
    (craft / "skills" / "review").mkdir(parents=True)
    (craft / "skills" / "review" / "SKILL.md").write_text("# review\n")
    (craft / "commands").mkdir()
    (craft / "commands" / "ship.md").write_text("ship it\n")
    (craft / "HEARTBEAT.md").write_text("- check the build\n")
    (craft / "config.json").write_text("{}\n")
    assert sorted(git_status(repo)) == [
        "?? .craft/HEARTBEAT.md",
        "?? .craft/commands/ship.md",
        "?? .craft/config.json",
        "?? .craft/skills/review/SKILL.md",
    ]


def test_an_existing_file_is_never_replaced(tmp_path: Path) -> None:
    craft = tmp_path / ".craft"
    craft.mkdir()
    (craft / ".gitignore").write_text("mine\n")
    assert not write_craft_gitignore(craft)
    assert (craft / ".gitignore").read_text() == "mine\n"


def test_a_symlinked_craft_or_gitignore_is_not_written_through(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / ".craft").symlink_to(elsewhere)
    assert not write_craft_gitignore(workspace / ".craft")
    assert list(elsewhere.iterdir()) == []
    other = tmp_path / "other"
    other.mkdir()
    (other / ".gitignore").symlink_to(tmp_path / "target")
    assert not write_craft_gitignore(other)
    assert not (tmp_path / "target").exists()
