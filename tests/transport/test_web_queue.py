"""The web page after an interrupt with messages queued (issue 27): the page says the queue
waits, and a new message runs after the queued ones, not before them."""

from __future__ import annotations

from collections.abc import Callable

from tests.transport import test_web_browser as web
from tests.transport.test_web_browser import (
    Tabs,
    WebServer,
    agent_text,
    new_thread,
    say,
    turn,
    wait_turn,
)

browser = web.browser
servers = web.servers
tabs = web.tabs


def test_a_paused_queue_is_said_and_keeps_its_order(
    servers: Callable[..., WebServer], tabs: Callable[..., Tabs]
) -> None:
    server = servers()
    page = tabs().open(server.base + "/")
    new_thread(page)
    say(page, "?stream 200\n?delay 40")
    page.wait_for_selector(f"{turn(page, 1)} .item-agentMessage:has-text('chunk 2')")
    say(page, "first queued")
    page.wait_for_selector("#queue .queued:has-text('first queued')")
    page.locator("#composer").focus()
    page.keyboard.press("Escape")
    wait_turn(page, 1, "cancelled")
    # The queue waits, and the page says so.
    note = page.wait_for_selector("#queue .queue-paused")
    assert "Queue paused: you interrupted the turn" in note.inner_text()
    # A new message runs after the queued one.
    say(page, "then this")
    wait_turn(page, 2, "completed")
    wait_turn(page, 3, "completed")
    assert agent_text(page, 2) == "You said: first queued"
    assert agent_text(page, 3) == "You said: then this"
    page.wait_for_selector("#queue .queue-paused", state="detached")
