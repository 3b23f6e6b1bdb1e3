"""SubAgent children in the web page (docs/web.md, issue 30).

Real Chromium and a real ``appserver app-server --listen`` process (the fixtures of
tests/transport/test_web_browser.py). The offline model spawns a child whose shell
command waits until the test creates a file, so the child is seen running for as long
as the test needs, without a pause: every wait is for a DOM condition.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from tests.transport import test_web_browser as web
from tests.transport.test_web_browser import (
    Tabs,
    WebServer,
    new_thread,
    say,
    screenshot,
    thread_id,
    wait_turn,
)

browser = web.browser
servers = web.servers
tabs = web.tabs

# The child's command: it ends once `go` exists (at the latest after 30 s, so a failed
# test leaves nothing running).
HELD = "for i in $(seq 600); do [ -e go ] && break; sleep 0.05; done; echo released"


def test_a_child_shows_under_its_parent_with_live_progress_and_opens(
    servers: Callable[..., WebServer], tabs: Callable[..., Tabs]
) -> None:
    # Approved without asking: the child's command is what is watched here.
    server = servers("--approval-policy", "autoApprove")
    page = tabs().open(server.base + "/")
    new_thread(page)
    spawn = {"agentPrompt": f"! {HELD}", "agentNickname": "scout", "agentRole": "default"}
    say(page, f"?tool SpawnAgent {json.dumps(spawn)}")
    wait_turn(page, 1, "completed")  # SpawnAgent answers at once; the child runs on
    parent = thread_id(page)

    # Nested under its parent in the list (not a thread of its own there), running.
    nested = page.locator(f'#thread-list li[data-thread-id="{parent}"] .thread-child')
    nested.locator(".thread-name:text-is('scout')").wait_for()
    page.wait_for_selector(f'#thread-list li[data-thread-id="{parent}"] .thread-child.running')
    assert page.locator("#thread-list > li").count() == 1
    # The parent's panel: nickname, role, profile, open, running.
    row = page.locator("#subagents .subagent")
    page.wait_for_selector('#subagents .subagent[data-running="true"]')
    child = str(row.get_attribute("data-child-id"))
    assert row.locator(".subagent-open").inner_text() == "scout"
    assert row.locator(".subagent-facts").inner_text() == "default · native · open"
    assert "SubAgents (1, 1 running)" in page.inner_text("#subagents summary")

    # A turn waiting on the child gets its progress: the command it runs, its tokens.
    say(page, f"?tool WaitAgent {json.dumps({'childThreadId': child})}")
    progress = row.locator(".subagent-progress")
    progress.filter(has_text=f"shell {HELD}"[:60]).wait_for()
    assert progress.inner_text().startswith("shell for i in")  # not "done ·"
    assert row.get_attribute("data-completed") == "false"
    screenshot(page, "subagents")
    (server.workspace / "go").touch()
    wait_turn(page, 2, "completed")
    page.wait_for_selector('#subagents .subagent[data-completed="true"][data-running="false"]')
    shown = progress.inner_text()
    assert shown.startswith("done · shell for i in") and shown.endswith(" out tokens"), shown
    page.wait_for_selector(f'#thread-list .thread-child[data-thread-id="{child}"]:not(.running)')

    # Clicking the child opens its thread: its turn, its command and what it printed.
    nested.click()
    page.wait_for_selector(f'.thread-view[data-thread-id="{child}"] .turn[data-status="completed"]')
    assert page.inner_text("#thread-title") == "scout"
    output = page.locator(f'.thread-view[data-thread-id="{child}"] .command-output')
    assert output.inner_text().strip() == "released"
    # A child is archived and deleted with its parent: no such buttons; a way back.
    assert page.locator("#thread-archive").is_hidden()
    assert page.locator("#thread-delete").is_hidden()
    assert "A SubAgent (default) of" in page.inner_text("#subagents .subagent-of")
    page.click(f'#subagents .subagent-of button[data-thread-id="{parent}"]')
    page.wait_for_selector(f'.thread-view[data-thread-id="{parent}"]')
    assert page.locator("#thread-archive").is_visible()
    page.wait_for_selector('#subagents .subagent[data-completed="true"]')
