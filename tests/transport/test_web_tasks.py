"""Automation tasks in the web page (docs/web.md, docs/automations.md, issue 31).

Real Chromium and real ``appserver app-server --listen`` processes (the fixtures of
tests/transport/test_web_browser.py). The test's own client creates a task whose shell
command waits until the test creates a file, so the task is seen running for as long
as the test needs, without a pause: every wait is for a DOM condition.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import anyio.from_thread
from appserver_client import AppServerClient

from tests.transport import test_web_browser as web
from tests.transport.test_web_browser import (
    Tabs,
    WebServer,
    connected,
    screenshot,
    wait_turn,
)

browser = web.browser
servers = web.servers
tabs = web.tabs

# The task's command: it ends once `go` exists (at the latest after 30 s, so a failed
# test leaves nothing running). One round: the task is done when its turn is.
HELD = "for i in $(seq 600); do [ -e go ] && break; sleep 0.05; done; echo released"
WORKFLOW = "---\nmax_rounds: 1\n---\n{{ task.description }}"


async def _create_task(url: str) -> str:
    """Create the held task as any client would; an unscheduled task runs at once."""
    async with AppServerClient.connect(url, reconnect=False) as client:
        created = await client.automation_task_create(
            title="Nightly report", description=f"! {HELD}", workflow_template=WORKFLOW
        )
        return str(created["taskId"])


def test_a_task_is_listed_runs_live_and_opens_its_thread(
    servers: Callable[..., WebServer], tabs: Callable[..., Tabs], tmp_path: Path
) -> None:
    # A workspace that switched Automations off: the server does not advertise them,
    # and the page offers no Tasks button.
    off = tmp_path / "off"
    (off / ".craft").mkdir(parents=True)
    (off / ".craft" / "config.json").write_text(json.dumps({"Automations": {"Enabled": False}}))
    with web.web_server(off) as server_off:
        page = tabs().open(server_off.base + "/")
        connected(page)
        assert page.locator("#tasks-open").is_hidden()
        page.close()  # before its server stops: no reconnecting page is left behind

    server = servers()
    page = tabs().open(server.base + "/")
    connected(page)
    page.click("#tasks-open")
    page.locator("#tasks-empty").wait_for()  # no tasks yet: said, nothing breaks
    assert page.locator("#task-list .task").count() == 0

    url = server.base.replace("http://", "ws://", 1) + "/ws"
    with anyio.from_thread.start_blocking_portal() as portal:  # Playwright owns this loop
        task_id = portal.call(_create_task, url)

    # Live (automation/task/updated): the new task appears running, with its thread.
    row = page.locator(f'#task-list .task[data-task-id="{task_id}"]')
    page.wait_for_selector(f'#task-list .task[data-task-id="{task_id}"][data-status="running"]')
    assert page.locator("#tasks-empty").is_hidden()
    assert row.locator(".task-title").inner_text() == "Nightly report"
    assert row.locator(".task-status").inner_text() == "Running…"
    facts = row.locator(".task-facts").inner_text()
    assert facts.startswith("Once · since ") and facts.endswith(f" · {task_id}"), facts
    thread = row.locator(".task-thread")
    thread.wait_for()
    assert thread.inner_text() == "Open its thread"
    assert row.locator(".task-run").is_disabled() and row.locator(".task-delete").is_disabled()
    assert "●" not in page.inner_text("#tasks-open")  # the ● is drawn by CSS, not text
    assert page.locator("#tasks-open.running").count() == 1
    screenshot(page, "tasks")

    (server.workspace / "go").touch()
    page.wait_for_selector(f'.task[data-task-id="{task_id}"][data-status="completed"]')
    assert row.locator(".task-status").inner_text() == "Done"
    assert page.locator("#tasks-open.running").count() == 0

    # Run it again: held once more, running live, then done.
    (server.workspace / "go").unlink()
    row.locator(".task-run").click()
    page.wait_for_selector(f'.task[data-task-id="{task_id}"][data-status="running"]')
    (server.workspace / "go").touch()
    page.wait_for_selector(f'.task[data-task-id="{task_id}"][data-status="completed"]')

    # Its thread opens (the dialog closes): both runs' turns, named after the task.
    thread_id = str(thread.get_attribute("data-thread-id"))
    thread.click()
    assert page.locator("#tasks-dialog").is_hidden()
    page.wait_for_selector(f'.thread-view[data-thread-id="{thread_id}"]')
    wait_turn(page, 2, "completed")
    assert page.inner_text("#thread-title") == "Nightly report"
    outputs = page.locator(f'.thread-view[data-thread-id="{thread_id}"] .command-output')
    assert [text.strip() for text in outputs.all_inner_texts()] == ["released", "released"]

    # Delete, asked first: gone from the list and from the disk; its thread is kept.
    page.click("#tasks-open")
    row.locator(".task-delete").click()
    page.locator("#task-delete-dialog").wait_for()
    assert page.inner_text("#task-delete-name") == "Nightly report"
    page.click("#task-delete-confirm")
    page.locator("#tasks-empty").wait_for()
    assert row.count() == 0
    assert not (server.workspace / ".craft" / "tasks" / task_id).exists()
