"""config.json edits from several writers (processes) and the SubAgent sections
of the file (:mod:`appserver.storage.workspace`, :mod:`appserver.storage.subagent_config`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anyio

from appserver.storage.subagent_config import read_subagent_config
from appserver.storage.workspace import WorkspaceConfigFile


async def test_two_writers_do_not_lose_each_others_edits(tmp_path: Path) -> None:
    # Two writer objects have separate in-process locks, as two processes do: only
    # the flock on locks/config.json.lock keeps the second from reading a stale file.
    first, second = WorkspaceConfigFile(tmp_path), WorkspaceConfigFile(tmp_path)
    holding = anyio.Event()
    release = anyio.Event()

    async def edit_first() -> None:
        async with first.edit() as document:
            holding.set()
            await release.wait()
            document["First"] = 1

    async def edit_second() -> None:
        async with second.edit() as document:
            document["Second"] = 2

    async with anyio.create_task_group() as group:
        group.start_soon(edit_first)
        await holding.wait()
        group.start_soon(edit_second)
        await anyio.wait_all_tasks_blocked()  # the second waits on the lock
        assert not (tmp_path / "config.json").exists()
        release.set()
    assert json.loads((tmp_path / "config.json").read_text()) == {"First": 1, "Second": 2}
    assert (tmp_path / "locks" / "config.json.lock").exists()


async def test_another_process_holding_the_lock_is_waited_for(tmp_path: Path) -> None:
    holder = (
        "import fcntl, os, sys\n"
        "os.makedirs(sys.argv[1] + '/locks', exist_ok=True)\n"
        "fd = os.open(sys.argv[1] + '/locks/config.json.lock', os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "open(sys.argv[1] + '/config.json', 'w').write('{\"Other\": true}')\n"
        "print('locked', flush=True)\n"
        "sys.stdin.read()\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", holder, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None and process.stdout.readline() == "locked\n"
        writer = WorkspaceConfigFile(tmp_path)

        async def edit() -> None:
            async with writer.edit() as document:
                document["Mine"] = 1

        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                group.start_soon(edit)
                await anyio.wait_all_tasks_blocked()
                # The other process still holds it: nothing of ours is written yet.
                assert json.loads((tmp_path / "config.json").read_text()) == {"Other": True}
                assert process.stdin is not None
                process.stdin.close()  # the holder exits, the kernel drops its lock
    finally:
        process.wait(timeout=30)
        assert process.stdout is not None
        process.stdout.close()
    assert json.loads((tmp_path / "config.json").read_text()) == {"Other": True, "Mine": 1}


def test_max_depth_is_read_with_default_one() -> None:
    assert read_subagent_config({}).max_depth == 1
    assert read_subagent_config({"subagent": {"maxdepth": 3}}).max_depth == 3
    for junk in (0, -2, "3", True, None):
        assert read_subagent_config({"SubAgent": {"MaxDepth": junk}}).max_depth == 1


async def test_a_linked_lock_file_or_directory_is_refused(tmp_path: Path) -> None:
    """``.craft/`` can come with a checkout: its lock never opens a file elsewhere."""
    outside = tmp_path / "outside.txt"
    outside.write_text("keep\n")
    craft = tmp_path / "craft"
    (craft / "locks").mkdir(parents=True)
    (craft / "locks" / "config.json.lock").symlink_to(outside)
    linked_dir = tmp_path / "craft2"
    linked_dir.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (linked_dir / "locks").symlink_to(tmp_path / "elsewhere")
    for directory in (craft, linked_dir):
        try:
            async with WorkspaceConfigFile(directory).edit() as document:
                document["Written"] = True
        except OSError:
            pass
        else:
            raise AssertionError(f"{directory}: the linked lock was used")
        assert not (directory / "config.json").exists()
    assert outside.read_text() == "keep\n"
    assert list((tmp_path / "elsewhere").iterdir()) == []
