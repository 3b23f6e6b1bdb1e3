"""The web page at desktop size (docs/web.md, issue 27).

Real Chromium and real ``appserver app-server --listen`` processes (the fixtures of
tests/transport/test_web_browser.py), 1400 px wide: the conversation is a readable
column; threads are renamed, archived and deleted; "New thread" leaves no empty thread
behind; the plan stays in sight while the conversation scrolls; status words are human
words; an approval's scopes are labelled by what they cover.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.transport import test_web_browser as web
from tests.transport.test_web_browser import (
    Page,
    Tabs,
    WebServer,
    connected,
    new_thread,
    say,
    screenshot,
    thread_id,
    turn,
    wait_turn,
)

browser = web.browser
servers = web.servers
tabs = web.tabs

DESKTOP = {"width": 1400, "height": 800}


def server_threads(page: Page, **options: Any) -> list[dict[str, Any]]:
    """``thread/list`` of the page's identity, asked over a connection of its own."""
    return list(
        page.evaluate(
            """async (options) => {
                const { AppServerClient } = await import('/assets/client.js');
                const url = `ws://${location.host}/ws`;
                const c = await AppServerClient.connect(url, { reconnect: false });
                const identity = { channelName: 'web', userId: 'local' };
                const { data } = await c.threadList({ identity, ...options });
                await c.close();
                return data;
            }""",
            options,
        )
    )


def test_a_readable_column_and_a_plan_that_stays_in_sight(
    servers: Callable[..., WebServer], tabs: Callable[..., Tabs]
) -> None:
    server = servers()
    page = tabs(viewport=DESKTOP).open(server.base + "/")
    new_thread(page)
    say(page, "?plan Ship the web client")
    wait_turn(page, 1, "completed")
    say(page, "?stream 400")
    wait_turn(page, 2, "completed")
    # Lines are at most ~80 characters wide, however wide the window.
    widths = page.evaluate(
        """() => {
            const reply = document.querySelector('.turn:nth-child(2) .item-agentMessage');
            const probe = document.createElement('span');
            probe.textContent = '0'.repeat(80);
            probe.style.cssText = 'position: absolute; white-space: nowrap; overflow-wrap: normal';
            reply.append(probe);
            const ch80 = probe.getBoundingClientRect().width;
            probe.remove();
            const view = document.querySelector('.thread-view').getBoundingClientRect();
            const chat = document.getElementById('chat').getBoundingClientRect();
            return { view: view.width, ch80,
                     left: view.left - chat.left, right: chat.right - view.right };
        }"""
    )
    assert widths["view"] <= widths["ch80"] + 1, widths
    assert abs(widths["left"] - widths["right"]) < 24, widths  # centred
    # The conversation scrolled to its end: the plan is still on screen, at the top.
    page.evaluate("document.getElementById('chat').scrollTop = 1e9")
    placed = page.evaluate(
        """() => {
            const chat = document.getElementById('chat').getBoundingClientRect();
            const plan = document.querySelector('.plan').getBoundingClientRect();
            return { scrolled: document.getElementById('chat').scrollTop, top: plan.top - chat.top,
                     bottom: plan.bottom, chatBottom: chat.bottom };
        }"""
    )
    assert placed["scrolled"] > 500, placed
    assert 0 <= placed["top"] < 2 and placed["bottom"] < placed["chatBottom"], placed
    assert page.locator(".plan").is_visible()
    assert page.locator(".plan .todo-status").first.text_content() == "To do"
    screenshot(page, "plan")


def test_new_thread_leaves_no_empty_thread_and_threads_are_renamed_archived_deleted(
    servers: Callable[..., WebServer], tabs: Callable[..., Tabs]
) -> None:
    server = servers()
    page = tabs(viewport=DESKTOP).open(server.base + "/")
    connected(page)
    # "New thread" twice, nothing sent: no thread is made.
    new_thread(page)
    new_thread(page)
    assert page.inner_text("#thread-title") == "New thread"
    screenshot(page, "new-thread")
    assert server_threads(page) == []
    page.reload()
    connected(page)
    assert page.locator(".thread-item").count() == 0
    # The first message makes it.
    new_thread(page)
    say(page, "first thread")
    wait_turn(page, 1, "completed")
    first = thread_id(page)
    assert [t["id"] for t in server_threads(page)] == [first]
    # Rename.
    page.click("#thread-rename")
    page.fill("#rename-input", "Renamed in the page")
    page.press("#rename-input", "Enter")
    page.wait_for_selector(".thread-name:text-is('Renamed in the page')")
    assert page.inner_text("#thread-title") == "Renamed in the page"
    assert server_threads(page)[0]["displayName"] == "Renamed in the page"
    screenshot(page, "thread-actions")
    # Archive: gone from the list, kept by the server.
    page.click("#thread-archive")
    page.wait_for_selector(f'.thread-item[data-thread-id="{first}"]', state="detached")
    assert server_threads(page) == []
    archived = server_threads(page, includeArchived=True)
    assert [(t["id"], t["status"]) for t in archived] == [(first, "archived")]
    # Delete (asked first): gone for good.
    new_thread(page)
    say(page, "second thread")
    wait_turn(page, 1, "completed")
    second = thread_id(page)
    page.click("#thread-delete")
    page.locator("#delete-dialog").wait_for(state="visible")
    page.click("#delete-confirm")
    page.wait_for_selector(f'.thread-item[data-thread-id="{second}"]', state="detached")
    assert [t["id"] for t in server_threads(page, includeArchived=True)] == [first]
    assert page.locator(".thread-view").count() == 0


def test_status_words_are_human_and_scopes_say_what_they_cover(
    servers: Callable[..., WebServer], tabs: Callable[..., Tabs]
) -> None:
    server = servers()
    session = tabs(viewport=DESKTOP, expected=[r"WebSocket connection to .* failed"])
    page = session.open(server.base + "/")
    new_thread(page)
    # Every decision and cancel reason the protocol names has words in the one table.
    missing = page.evaluate(
        """async () => {
            const { DECISIONS } = await import('/assets/client.js');
            const { WORDS } = await import('/assets/words.js');
            const wanted = [...DECISIONS.map((d) => `decision:${d}`),
                ...['interrupted', 'approvalCancelled', 'serverShutdown', 'threadDeleted']
                    .map((r) => `reason:${r}`),
                ...['running', 'completed', 'failed', 'cancelled'].map((s) => `turn:${s}`)];
            return wanted.filter((key) => !(key in WORDS));
        }"""
    )
    assert missing == []
    # A file write's one scope covers any path in the workspace: it says so, not "exact".
    say(page, ">notes.md\nhello")
    dialog = page.locator("#approval")
    dialog.wait_for(state="visible")
    scope = dialog.locator(".scope")
    assert scope.count() == 1
    assert scope.inner_text().strip() == (
        "file write of any path in the workspace for the rest of this thread"
    )
    screenshot(page, "approval")
    dialog.locator('[data-decision="acceptForSession"]').click()
    wait_turn(page, 1, "completed")
    assert page.inner_text(f"{turn(page, 1)} .approval-word") == "Approved for this thread"
    assert page.inner_text(f"{turn(page, 1)} .turn-status") == "Done"
    # Interrupted, then the server shuts down mid-turn: said in words.
    say(page, "?stream 200\n?delay 40")
    page.wait_for_selector(f"{turn(page, 2)} .item-agentMessage:has-text('chunk 2')")
    page.keyboard.press("Escape")
    wait_turn(page, 2, "cancelled")
    assert page.inner_text(f"{turn(page, 2)} .turn-status") == "Stopped: you interrupted it"
    say(page, "?stream 200\n?delay 40")
    page.wait_for_selector(f"{turn(page, 3)} .item-agentMessage:has-text('chunk 2')")
    server.process.terminate()
    wait_turn(page, 3, "cancelled")
    assert page.inner_text(f"{turn(page, 3)} .turn-status") == "Stopped: the server shut down"
    assert "serverShutdown" not in page.inner_text("#chat")
