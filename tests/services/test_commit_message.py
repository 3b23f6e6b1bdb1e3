"""``workspace/commitMessage/suggest`` (docs/suggestions.md): a real git repository
made in the test, the offline model writing the message in a helper turn; a model
API that never answers (the scripted fake) for the timeout, the hidden helper
thread and the other connection that hears nothing of it."""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import anyio

from tests.support.client import RpcFailure
from tests.support.fake_models import Reply, fake_model_server
from tests.support.helpers import IDENTITY
from tests.support.processes import ws_client, ws_server
from tests.support.servers import ServerUnderTest
from tests.support.turns import new_thread, run_turn

SUGGEST = "workspace/commitMessage/suggest"
HELPER_CHANNELS = ("commit-suggest", "welcome-suggest")
CHAT = "POST /v1/chat/completions"
HELPER_EVENTS = ("thread/started", "thread/deleted", "thread/runtimeChanged", "turn/started")


def git(workspace: Path, *args: str) -> None:
    identity = ["-c", "user.name=Test", "-c", "user.email=test@example.com"]
    subprocess.run(["git", *identity, *args], cwd=workspace, check=True, capture_output=True)


def make_repository(workspace: Path) -> None:
    """A commit of greet.py, then greet.py changed and notes/new.md added (untracked)."""
    git(workspace, "init", "-q", "-b", "main")
    (workspace / "greet.py").write_text('print("hello")\n')
    git(workspace, "add", "greet.py")
    git(workspace, "commit", "-q", "-m", "first")
    (workspace / "greet.py").write_text('print("hello, everyone")\nprint("bye")\n')
    (workspace / "notes").mkdir()
    (workspace / "notes" / "new.md").write_text("# Notes\n")


async def internal_threads(client: Any, *, include: bool) -> list[dict[str, Any]]:
    params = {
        "identity": IDENTITY,
        "crossChannelOrigins": list(HELPER_CHANNELS),
        "includeInternal": include,
    }
    listed = await client.request("thread/list", params)
    return [thread for thread in listed["data"] if thread["originChannel"] in HELPER_CHANNELS]


async def test_a_message_for_changed_and_untracked_files_and_the_refusals(
    server: ServerUnderTest, workspace: Path
) -> None:
    with anyio.fail_after(30):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            await run_turn(client, thread_id, "make greet.py greet everyone and say bye")
            asked = {"threadId": thread_id, "paths": ["greet.py", "notes/new.md"]}

            not_git = await client.fail(SUGGEST, asked)
            assert not_git.code == -32600
            assert "not a git repository" in not_git.data["detail"]

            make_repository(workspace)
            result = await client.request(SUGGEST, asked)
            # The offline model names the files of the diff it read: the untracked
            # file came as a new-file diff (docs in appserver/providers/offline.py).
            assert result == {
                "message": "Update greet.py, notes/new.md\n\n"
                "2 file(s) changed: 3 line(s) added, 1 removed."
            }
            small = await client.request(SUGGEST, {**asked, "maxDiffChars": 40})
            assert small["message"].startswith("Update greet.py\n\n")  # cut inside its diff

            (workspace / "elsewhere").symlink_to(workspace.parent)  # a link out of it
            outside = ["../x.txt", str(workspace.parent / "x.txt"), ".craft/x", "elsewhere/x.txt"]
            for path in outside:
                refused = await client.fail(SUGGEST, {"threadId": thread_id, "paths": [path]})
                assert refused.code == -32602, path
            for params in ({"threadId": thread_id, "paths": []}, {"paths": ["greet.py"]}):
                assert (await client.fail(SUGGEST, params)).code == -32602
            unknown = await client.fail(SUGGEST, {"threadId": "thread_nope", "paths": ["greet.py"]})
            assert unknown.code == -32010
            nothing = await client.fail(SUGGEST, {"threadId": thread_id, "paths": ["absent.txt"]})
            assert nothing.code == -32600 and "No diff" in nothing.data["detail"]

            # Every helper thread is gone, and no helper event reached the client.
            assert await internal_threads(client, include=True) == []
            started = [m["params"]["threadId"] for m in client.notifications("thread/started")]
            assert started == [thread_id]
            assert not client.notifications("thread/deleted")


async def test_a_slow_helper_turn_times_out_hidden_from_everyone(
    multi_server: ServerUnderTest, workspace: Path
) -> None:
    make_repository(workspace)
    async with (
        fake_model_server() as fake,
        multi_server.connect("asker") as asker,
        multi_server.connect("watcher") as watcher,
    ):
        fake.script(CHAT, Reply(hang=True))  # the helper's model never answers
        thread_id = await new_thread(asker)
        await asker.request(
            "workspace/config/update",
            {"provider": "openai", "endPoint": fake.openai_base_url, "apiKey": "sk-test"},
        )
        marks = (asker.mark(), watcher.mark())
        failure: list[RpcFailure] = []

        async def ask() -> None:
            params = {"threadId": thread_id, "paths": ["greet.py"], "timeoutMs": 2000}
            failure.append(await asker.fail(SUGGEST, params))

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(ask)
                await fake.received(CHAT)  # the helper turn is waiting on its model
                # Listed only when asked for (by the watcher: any connection may).
                (helper,) = await internal_threads(watcher, include=True)
                assert helper["originChannel"] == "commit-suggest"
                assert helper["userId"] == "internal"
                assert await internal_threads(watcher, include=False) == []
        (timeout,) = failure
        assert timeout.code == -32603
        assert timeout.data["reason"] == "timeout"
        assert "2000 ms" in timeout.data["detail"]

        (request,) = fake.bodies(CHAT)
        assert [tool["function"]["name"] for tool in request["tools"]] == ["CommitSuggest"]
        assert "--- unified diff ---" in request["messages"][-1]["content"]

        # The helper thread is deleted, and neither connection heard of it.
        assert await internal_threads(watcher, include=True) == []
        await watcher.settle()
        for client, mark in zip((asker, watcher), marks, strict=True):
            heard = [m["method"] for m in client.since(mark) if m.get("method") in HELPER_EVENTS]
            assert heard == [], client.name


async def test_a_helper_thread_a_dead_process_left_is_swept(workspace: Path) -> None:
    """A helper thread idle for an hour (its process died mid-turn) is deleted by
    the next process's first helper turn."""
    make_repository(workspace)
    with anyio.fail_after(30):
        async with ws_server(workspace) as (_, url), ws_client(url) as client:
            orphan = await new_thread(client)
            thread_id = await new_thread(client)
        with sqlite3.connect(workspace / ".craft" / "appserver.db") as db:
            db.execute(
                "UPDATE threads SET source_kind = 'internal', user_id = 'internal',"
                " origin_channel = 'commit-suggest', last_active_at = ? WHERE id = ?",
                ("2020-01-01T00:00:00.000Z", orphan),
            )
        async with ws_server(workspace) as (_, url), ws_client(url) as client:
            answer = await client.request(SUGGEST, {"threadId": thread_id, "paths": ["greet.py"]})
            assert answer["message"]
            assert await internal_threads(client, include=True) == []
            failure = await client.fail("thread/read", {"threadId": orphan})
            assert failure.code == -32010
