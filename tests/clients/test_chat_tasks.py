"""Automation tasks in `appserver-client chat` (docs/clients.md), through a
pseudo-terminal against a real WebSocket server: ``/tasks`` lists the task
another client made, ``/tasks run 1`` runs it, and ``⚙`` lines follow it."""

from __future__ import annotations

import asyncio
import io
import re
from pathlib import Path

from appserver_client import AppServerClient

from tests.clients.test_chat import chat, finish, websocket_server

TOKEN = "tok-tasks"
DAY_MS = 86_400_000


async def create_task(url: str) -> str:
    """A task due in a day (every hour after that), made as any client would."""
    async with AppServerClient.connect(f"{url}/ws", token=TOKEN, reconnect=False) as client:
        created = await client.automation_task_create(
            title="Nightly report",
            description="Summarise the day.",
            # One round: the run ends with its one turn.
            workflow_template="---\nmax_rounds: 1\n---\n{{ task.description }}",
            schedule={"kind": "every", "everyMs": 3_600_000, "initialDelayMs": DAY_MS},
        )
        return str(created["taskId"])


def test_tasks_lists_a_task_runs_it_and_update_lines_follow(
    workspace: Path, tmp_path: Path
) -> None:
    with (
        websocket_server(workspace, TOKEN) as url,
        chat("--url", url, "--token", TOKEN, cwd=tmp_path) as child,
    ):
        transcript = io.StringIO()
        child.logfile_read = transcript
        child.expect_exact("you> ")
        child.sendline("/tasks")
        child.expect_exact("This workspace has no automation tasks (.craft/tasks/).")
        child.expect_exact("you> ")
        task_id = asyncio.run(create_task(url))

        child.sendline("/tasks")
        child.expect_exact("Tasks of this workspace (/tasks run N runs one now):")
        child.expect(
            r" 1\) Nightly report  \[waiting, next run \d{4}-\d\d-\d\d \d\d:\d\d, every hour\]  "
            + re.escape(task_id)
            + r"\r\n"
        )
        child.expect_exact("you> ")
        child.sendline("/tasks run 1")
        # Said as the run goes (automation/task/updated), at the prompt; its end is a
        # wait for the next hour's run.
        child.expect(r"⚙ task Nightly report: waiting, next run \d{4}-\d\d-\d\d \d\d:\d\d")
        child.sendline("/tasks")
        child.expect(
            r" 1\) Nightly report  \[waiting, .*, every hour\]  "
            + re.escape(task_id)
            + r"  thread (thread_\S+)\r\n"
        )
        child.expect_exact("you> ")
        child.sendline("/tasks run 7")
        child.expect_exact("No task 7: /tasks lists 1.")
        child.expect_exact("you> ")
        child.sendline("/quit")
        assert finish(child) == 0
    ran = transcript.getvalue().split("/tasks run 1", 1)[1]
    # The answer and the first news may come in either order; the run's second
    # `running` (with its thread) says nothing new.
    assert f"Running Nightly report ({task_id}) now." in ran, ran
    assert ran.count("⚙ task Nightly report: running") == 1, ran
