"""The web page shows the setup and one history per workspace (docs/web.md, issue 27).

Real Chromium and real ``appserver app-server --listen`` processes (the fixtures of
tests/transport/test_web_browser.py). The header names the workspace, provider and model
(``workspace/status``); the model picker lists ``model/list`` and switches the thread's
model (``thread/config/update``), checked by what the model API received; the settings
dialog is built from ``workspace/config/schema`` and never shows the API key; remembered
approvals are listed and revoked; a thread started with the terminal chat's identity is
in the page's list.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import anyio.from_thread
import pytest
from appserver_client import AppServerClient
from appserver_client.cli import Chat, build_parser

from tests.support.fake_models import (
    FakeModelServer,
    fake_model_server,
    openai_models,
    openai_text_reply,
)
from tests.transport import test_web_browser as web
from tests.transport.test_web_browser import (
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

API_KEY = "sk-test-never-shown-1234"
REPLY = "Here it is:\n\n```python\nprint('copied')\n```\n"


@contextmanager
def fake_openai() -> Iterator[FakeModelServer]:
    """The scripted model API (tests/support/fake_models.py), run in a thread of its own."""
    with (
        anyio.from_thread.start_blocking_portal() as portal,
        portal.wrap_async_context_manager(fake_model_server()) as fake,
    ):
        yield fake


def test_the_header_names_the_setup_and_the_picker_switches_the_model(
    servers: Callable[..., WebServer], tabs: Callable[..., Tabs], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("APPSERVER_API_KEY", API_KEY)  # the server's environment
    with fake_openai() as fake:
        fake.script("GET /v1/models", *(openai_models("gpt-a", "gpt-b") for _ in range(10)))
        fake.script("POST /v1/chat/completions", *(openai_text_reply([REPLY]) for _ in range(3)))
        server = servers(
            "--provider", "openai", "--base-url", fake.openai_base_url, "--model", "gpt-a"
        )
        session = tabs()
        session.context.grant_permissions(["clipboard-read", "clipboard-write"])
        page = session.open(server.base + "/")
        connected(page)
        # The header: the workspace, the provider and the model in use.
        page.wait_for_selector("#workspace-info:not([hidden])")
        assert page.inner_text("#ws-name") == server.workspace.name
        assert page.inner_text("#ws-provider") == "openai"
        picker = page.locator("#model-select")
        page.wait_for_selector("#model-select:not([disabled])")
        assert picker.locator("option").all_inner_texts() == ["gpt-a", "gpt-b"]
        assert picker.input_value() == "gpt-a"
        # Picked before the first message: the new thread starts with it.
        new_thread(page)
        picker.select_option("gpt-b")
        say(page, "first")
        wait_turn(page, 1, "completed")
        thread = thread_id(page)
        # Picked in the open thread: thread/config/update, and the next turn uses it.
        picker.select_option("gpt-a")
        say(page, "second")
        wait_turn(page, 2, "completed")
        models = [body["model"] for body in fake.bodies("POST /v1/chat/completions")]
        assert models == ["gpt-b", "gpt-a"]
        # Reopened, the picker shows the thread's own model.
        page.goto(f"{server.base}/#thread={thread}")
        page.reload()
        connected(page)
        page.wait_for_selector(f'.thread-view[data-thread-id="{thread}"]', state="attached")
        page.wait_for_function("document.getElementById('model-select').value === 'gpt-a'")
        # Copy buttons: the reply and its code block.
        reply = page.locator(f"{turn(page, 1)} .item-agentMessage")
        reply.locator(".code-wrap .copy").click()
        assert page.evaluate("navigator.clipboard.readText()") == "print('copied')"
        reply.locator(":scope > .copy").click()
        assert page.evaluate("navigator.clipboard.readText()") == REPLY  # the Markdown as written
        page.locator(f"{turn(page, 1)} .item-userMessage > .copy").click()
        assert page.evaluate("navigator.clipboard.readText()") == "first"
        screenshot(page, "header-and-model")
        # The settings: what is in use, the editable settings, the key never shown.
        page.click("#settings-open")
        dialog = page.locator("#settings")
        dialog.wait_for(state="visible")
        assert str(server.workspace) in page.inner_text("#settings-status")
        key = page.locator("#setting-ApiKey")
        assert key.get_attribute("type") == "password" and key.input_value() == ""
        assert page.locator("#setting-Model").input_value() == "gpt-a"
        assert page.locator("#setting-Provider").input_value() == "openai"
        html = page.content()
        assert API_KEY not in html and API_KEY[-4:] not in html
        screenshot(page, "settings")
        page.select_option("#setting-DefaultApprovalPolicy", "autoApprove")
        page.click("#settings-save")
        page.wait_for_selector("#settings-note:has-text('Saved: defaultApprovalPolicy.')")
        page.click("#settings-close")
        dialog.wait_for(state="hidden")
        page.click("#settings-open")
        page.wait_for_selector("#settings-status dd:text-is('autoApprove')")
        assert API_KEY not in page.content()


def test_remembered_approvals_are_listed_and_revoked(
    servers: Callable[..., WebServer], tabs: Callable[..., Tabs]
) -> None:
    server = servers()
    page = tabs().open(server.base + "/")
    new_thread(page)
    page.click("#settings-open")
    page.wait_for_selector("#grants-note:has-text('No approval is remembered')")
    page.click("#settings-close")
    say(page, "! echo remembered")
    dialog = page.locator("#approval")
    dialog.wait_for(state="visible")
    dialog.locator('[data-decision="acceptAlways"]').click()
    wait_turn(page, 1, "completed")
    assert "Approved for good" in page.inner_text(f"{turn(page, 1)} .approval-word")
    page.click("#settings-open")
    grant = page.locator("#grant-list .grant")
    grant.wait_for()
    assert grant.count() == 1
    assert "echo remembered" in grant.inner_text()
    assert str(server.workspace) in grant.inner_text()
    screenshot(page, "approvals-remembered")
    grant.locator("button:has-text('Revoke')").click()
    page.wait_for_selector("#grant-list .grant", state="detached")
    page.click("#settings-close")
    # Revoked: the same command asks again.
    say(page, "! echo remembered")
    dialog.wait_for(state="visible")
    dialog.locator('[data-decision="decline"]').click()
    wait_turn(page, 2, "completed")


async def _chat_starts_a_thread(url: str) -> str:
    """Start a thread exactly as the terminal chat does (its own identity), and send."""
    chat = Chat(build_parser().parse_args(["chat", "--url", url]), out=io.StringIO())
    async with AppServerClient.connect(url, reconnect=False) as client:
        thread = (await client.thread_start(identity=chat.identity))["thread"]
        await client.turn_start(
            thread_id=thread["id"], input=[{"type": "text", "text": "hello from the chat"}]
        )
        return str(thread["id"])


def test_threads_started_in_the_chat_are_in_the_page(
    servers: Callable[..., WebServer], tabs: Callable[..., Tabs]
) -> None:
    server = servers()
    page = tabs().open(server.base + "/")
    connected(page)
    url = server.base.replace("http://", "ws://", 1) + "/ws"
    with anyio.from_thread.start_blocking_portal() as portal:  # Playwright owns this thread's loop
        thread = portal.call(_chat_starts_a_thread, url)
    # Live (thread/started), then after a reload (thread/list): one history.
    page.wait_for_selector(f'.thread-item[data-thread-id="{thread}"]')
    page.reload()
    connected(page)
    item = page.locator(f'.thread-item[data-thread-id="{thread}"]')
    item.wait_for()
    item.click()
    wait_turn(page, 1, "completed")
    assert "You said: hello from the chat" in page.inner_text(turn(page, 1))
