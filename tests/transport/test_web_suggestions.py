"""The welcome suggestions on a new thread's page (docs/web.md, docs/suggestions.md).

Real Chromium and a real ``appserver app-server --listen`` process with the offline
model (the fixtures of tests/transport/test_web_browser.py): two turns about
specific files, then **New thread** shows the four suggestions the background
refresh made (the offline model's, from those messages); a click puts one in the
message box and sends nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from tests.transport import test_web_browser as web
from tests.transport.test_web_browser import Tabs, WebServer, new_thread, say, screenshot, wait_turn

browser = web.browser
servers = web.servers
tabs = web.tabs

FIRST = "Fix the off-by-one in parse_header in src/http/parser.py"
SECOND = "Add a regression test to tests/test_parser.py for empty headers"


def test_a_new_thread_offers_the_welcome_suggestions(
    servers: Callable[..., WebServer], tabs: Callable[..., Tabs]
) -> None:
    server = servers()
    page = tabs().open(server.base + "/")
    new_thread(page)
    say(page, FIRST)
    wait_turn(page, 1, "completed")
    say(page, SECOND)
    wait_turn(page, 2, "completed")

    page.click("#new-thread")
    # Shown when the refresh (a second after the last turn) announces them, or at once
    # if it already had.
    page.wait_for_selector(".welcome-suggestions button:nth-child(1)")
    buttons = page.locator(".welcome-suggestions .suggestion")
    assert buttons.count() == 4
    # The most specific message first (offline model: appserver/providers/offline.py).
    assert buttons.nth(0).locator("strong").inner_text() == f"Continue: {FIRST[:60]}"
    assert buttons.nth(1).locator("strong").inner_text() == f"Test: {SECOND[:60]}"
    assert buttons.nth(0).locator("small").inner_text() == f"You asked: {FIRST}"
    screenshot(page, "welcome-suggestions")

    buttons.nth(1).click()
    assert page.locator("#composer").input_value() == f"Write tests for: {SECOND}"
    assert page.evaluate("document.activeElement.id") == "composer"
    assert page.locator(".thread-view").count() == 0  # nothing was sent
