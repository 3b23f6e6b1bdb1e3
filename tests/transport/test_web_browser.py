"""The web client in a real headless Chromium (docs/web.md).

Debian's ``chromium`` driven by Playwright's Python package (``make test`` installs
both). Each test starts a real ``appserver app-server --listen`` subprocess with the
offline model, whose directives script the turns (``?stream N``, ``?delay MS``,
``! command``, ``?plan``). Every wait is for a DOM condition, never a sleep; every
page must finish without a console error. A screenshot of the chat is written to
``test-artifacts/web-chat.png`` (and ``docs/web.png`` with ``APPSERVER_DOC_SCREENSHOTS=1``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.support.servers import child_env, server_command

playwright_api = pytest.importorskip("playwright.sync_api")
Browser = playwright_api.Browser
Page = playwright_api.Page

CHROMIUM = os.environ.get("APPSERVER_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
TIMEOUT_MS = 15_000  # a ceiling for each DOM condition, not a pause
TOKEN = "w3b-Token_42"


@dataclass
class WebServer:
    process: subprocess.Popen[str]
    base: str  # http://127.0.0.1:PORT
    workspace: Path
    log: list[str] = field(default_factory=list)  # its stderr, drained as it comes


@contextmanager
def web_server(workspace: Path, *extra: str) -> Iterator[WebServer]:
    command = [*server_command(workspace, *extra), "--listen", "ws://127.0.0.1:0"]
    process = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=child_env()
    )
    assert process.stderr is not None
    drain: threading.Thread | None = None
    try:
        seen = ""
        while not (match := re.search(r"listening on (ws://\S+)", seen)):
            line = process.stderr.readline()
            if not line:
                raise RuntimeError(f"server exited: {seen}")
            seen += line
        base = match.group(1).replace("ws://", "http://", 1).removesuffix("/ws")
        # The next line says where the page is.
        assert process.stderr.readline() == f"appserver: web client at {base}/\n"
        server = WebServer(process, base, workspace)
        # Drained for the server's whole life: a full pipe would stop it at its next log line.
        drain = threading.Thread(target=server.log.extend, args=(process.stderr,), daemon=True)
        drain.start()
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if drain is not None:
            drain.join(timeout=10)
        process.stderr.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail(f"no Chromium at {CHROMIUM}: `make test` installs Debian's chromium")
        pytest.skip(f"no Chromium at {CHROMIUM} (`make test` installs it)")
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS, timeout=30_000)
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class Tabs:
    """Pages of one browser context, each watched for console errors."""

    browser: Browser
    viewport: dict[str, int] = field(default_factory=lambda: {"width": 1100, "height": 760})
    # Console errors the test provokes on purpose (a refused WebSocket logs one).
    expected: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    pages: list[Page] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.context = self.browser.new_context(viewport=self.viewport)  # type: ignore[arg-type]
        self.context.set_default_timeout(TIMEOUT_MS)

    def open(self, url: str) -> Page:
        page = self.context.new_page()
        page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.goto(url)
        self.pages.append(page)
        return page


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Callable[..., WebServer]]:
    """Start servers (``servers(*flags)``); stopped after the test's pages are closed."""
    with ExitStack() as stack:
        started = 0

        def start(*extra: str) -> WebServer:
            nonlocal started
            started += 1
            workspace = tmp_path / f"ws{started}"
            workspace.mkdir()
            return stack.enter_context(web_server(workspace, *extra))

        yield start


@pytest.fixture
def tabs(browser: Browser, servers: object) -> Iterator[Callable[..., Tabs]]:
    """Browser contexts (``tabs(viewport=...)``); closed before the servers stop."""
    made: list[Tabs] = []

    def make(**options: Any) -> Tabs:
        tabs = Tabs(browser, **options)
        made.append(tabs)
        return tabs

    yield make
    for tabs in made:
        tabs.context.close()
    for tabs in made:
        unexpected = [e for e in tabs.errors if not any(re.search(x, e) for x in tabs.expected)]
        assert unexpected == [], unexpected  # no console errors, ever


# --- helpers --------------------------------------------------------------------------------


def connected(page: Page) -> None:
    page.wait_for_selector('#status[data-state="connected"]')


def new_thread(page: Page) -> None:
    """Click **New thread**: the thread itself is started by the first message."""
    connected(page)
    page.click("#new-thread")
    page.wait_for_selector("#composer:not([disabled])")


def thread_id(page: Page) -> str:
    """The open thread's id (it exists once its first message is sent)."""
    page.wait_for_selector(".thread-view[data-thread-id]", state="attached")
    return str(page.locator(".thread-view").get_attribute("data-thread-id"))


def say(page: Page, text: str) -> None:
    """Type ``text`` as a person would: Shift+Enter between lines, Enter to send."""
    box = page.locator("#composer")
    box.focus()
    for index, line in enumerate(text.split("\n")):
        if index:
            box.press("Shift+Enter")
        if line:
            box.type(line)
    box.press("Enter")


def turn(page: Page, n: int) -> str:
    return f".turn:nth-child({n})"


def wait_turn(page: Page, n: int, status: str) -> None:
    try:
        page.wait_for_selector(f'{turn(page, n)}[data-status="{status}"]')
    except playwright_api.TimeoutError as timeout:
        # What the page showed instead, for a failure far away (CI) to be read.
        shown = page.evaluate(
            """() => ({
                statuses: [...document.querySelectorAll('.turn')].map(t => t.dataset.status),
                error: document.getElementById('error')?.textContent,
                connection: document.getElementById('status')?.dataset.state,
                chat: document.getElementById('chat')?.innerText.slice(0, 2000),
            })"""
        )
        raise AssertionError(f"turn {n} never {status}: the page showed {shown}") from timeout


def agent_text(page: Page, n: int) -> str:
    return page.locator(f"{turn(page, n)} .item-agentMessage").last.inner_text()


DOCS = Path(__file__).resolve().parents[2] / "docs" / "web"


def screenshot(page: Page, name: str, doc: str = "") -> None:
    """``test-artifacts/web-NAME.png``; with ``APPSERVER_DOC_SCREENSHOTS=1`` also the
    picture of docs/web.md, ``docs/web/NAME.png`` (or ``docs/DOC``)."""
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"web-{name}.png"))
    if os.environ.get("APPSERVER_DOC_SCREENSHOTS") == "1":
        target = DOCS.parent / doc if doc else DOCS / f"{name}.png"
        target.parent.mkdir(exist_ok=True)
        page.screenshot(path=str(target))


def chunks(n: int) -> str:
    return " ".join(f"chunk {i}" for i in range(1, n + 1))


# --- tests ----------------------------------------------------------------------------------


def test_a_thread_streams_a_reply_rendered_as_markdown(
    servers: Callable[..., WebServer], tabs: Callable[..., Tabs]
) -> None:
    server = servers()
    page = tabs().open(server.base + "/")
    new_thread(page)
    # 30 chunks 60 ms apart: long enough to be seen running on a loaded machine.
    say(page, "?think weighing it up\n?stream 30\n?delay 60")
    # The reply streams: a partial text is on screen before the turn ends.
    page.wait_for_selector(f'{turn(page, 1)}[data-status="running"] .item-agentMessage')
    wait_turn(page, 1, "completed")
    assert agent_text(page, 1) == chunks(30)
    # Reasoning is folded; usage is shown per turn.
    reasoning = page.locator(f"{turn(page, 1)} details.reasoning")
    assert reasoning.get_attribute("open") is None
    assert "weighing it up" in (reasoning.text_content() or "")
    assert re.fullmatch(r"\d+ in · \d+ out tokens", page.inner_text(f"{turn(page, 1)} .usage"))
    # Markdown from the model becomes elements, never HTML.
    say(page, "**bold** and `code` <img src=x onerror=alert(1)>")
    wait_turn(page, 2, "completed")
    reply = page.locator(f"{turn(page, 2)} .item-agentMessage")
    assert reply.locator("strong").inner_text() == "bold"
    assert reply.locator("code").inner_text() == "code"
    assert reply.locator("img").count() == 0
    assert "<img src=x onerror=alert(1)>" in reply.inner_text()
    # Code is highlighted; links only for http(s) and mailto.
    rendered = page.evaluate(
        """async () => {
            const { renderMarkdown } = await import('/assets/markdown.js');
            const md = '# Title\\n\\n```python\\ndef f(x):\\n    return "s"  # note\\n```\\n' +
                '[ok](https://example.com) [bad](javascript:alert(1)) <b>raw</b>' +
                '\\n\\n- one\\n- two';
            const root = renderMarkdown(md);
            return {
                kw: [...root.querySelectorAll('.hl-kw')].map((e) => e.textContent),
                str: [...root.querySelectorAll('.hl-str')].map((e) => e.textContent),
                com: [...root.querySelectorAll('.hl-com')].map((e) => e.textContent),
                links: [...root.querySelectorAll('a')].map((a) => a.href),
                items: root.querySelectorAll('li').length,
                heading: root.querySelector('h3')?.textContent,
                raw: root.querySelectorAll('b').length,
                text: root.textContent,
            };
        }"""
    )
    assert rendered["kw"] == ["def", "return"]
    assert rendered["str"] == ['"s"'] and rendered["com"] == ["# note"]
    assert rendered["links"] == ["https://example.com/"]
    assert (rendered["items"], rendered["heading"], rendered["raw"]) == (2, "Title", 0)
    assert "<b>raw</b>" in rendered["text"] and "[bad]" not in rendered["text"]
    # Inline Markdown nests, and delimiters that never close cost a linear scan (they
    # used to take seconds to minutes); quotes nest 32 deep, deeper `>` is text.
    inline = page.evaluate(
        """async () => {
            const { renderMarkdown } = await import('/assets/markdown.js');
            const nested = renderMarkdown(
                '**a *b* `c` ~~d~~ __e__ [f](https://example.com/)** g_h_i *j*');
            const cases = ['**a '.repeat(20000), '*a `b` '.repeat(10000), '_a '.repeat(20000),
                           '[x'.repeat(20000), '`a '.repeat(20000), '> '.repeat(3000) + 'deep'];
            const started = performance.now();
            const sizes = cases.map((md) => renderMarkdown(md).textContent.length);
            const quotes = renderMarkdown('> '.repeat(40) + 'deep').querySelectorAll('blockquote');
            return { html: nested.innerHTML, ms: performance.now() - started, sizes,
                     quotes: quotes.length };
        }"""
    )
    assert inline["html"] == (
        "<p><strong>a <em>b</em> <code>c</code> <del>d</del> <strong>e</strong> "
        '<a href="https://example.com/" target="_blank" rel="noopener noreferrer">f</a>'
        "</strong> g_h_i <em>j</em></p>"
    )
    assert inline["ms"] < 10_000, inline["ms"]  # a guard against quadratic scans, not a target
    assert inline["quotes"] == 32 and all(size > 0 for size in inline["sizes"])
    # The thread list shows the thread, named from its first message.
    page.wait_for_selector(".thread-item .thread-name:has-text('?think weighing it up')")


def test_approvals_offer_five_decisions_and_command_output_streams(
    servers: Callable[..., WebServer], tabs: Callable[..., Tabs]
) -> None:
    server = servers()
    page = tabs().open(server.base + "/")
    new_thread(page)
    say(page, "! echo approved-output; sleep 0.4; echo second-line")
    dialog = page.locator("#approval")
    dialog.wait_for(state="visible")
    decisions = dialog.locator(".decision")
    assert [decisions.nth(i).get_attribute("data-decision") for i in range(5)] == [
        "accept",
        "acceptForSession",
        "acceptAlways",
        "decline",
        "cancel",
    ]
    assert (
        page.inner_text("#approval-operation")
        == "echo approved-output; sleep 0.4; echo second-line"
    )
    # What "for this thread" covers: the exact command, or every command (wider), each
    # labelled by what it covers (the request's sessionScopes descriptions).
    scopes = dialog.locator(".scope")
    assert scopes.count() == 2
    assert [scopes.nth(i).get_attribute("data-scope") for i in range(2)] == ["exact", "wider"]
    assert (
        scopes.nth(0)
        .inner_text()
        .strip()
        .startswith("this command (`echo approved-output; sleep 0.4; echo second-line`) in ")
    )
    assert scopes.nth(1).inner_text().strip() == (
        "every shell command in the workspace for the rest of this thread"
    )
    # Keyboard: the first decision has focus; Enter takes it.
    page.keyboard.press("Enter")
    dialog.wait_for(state="hidden")
    # The command's output streams: its first line shows while it still runs.
    running = f"{turn(page, 1)} .item-commandExecution[data-status='streaming']"
    page.wait_for_selector(f"{running} pre:has-text('approved-output')")
    wait_turn(page, 1, "completed")
    command = page.locator(f"{turn(page, 1)} .item-commandExecution")
    assert command.locator("pre").inner_text().split() == ["approved-output", "second-line"]
    assert "exit code 0" in command.inner_text()
    assert "Approved once" in page.inner_text(turn(page, 1))
    assert "Approval: accept" not in page.inner_text(turn(page, 1))
    # Declining: the agent is told no, the turn goes on.
    say(page, "! echo not-run")
    dialog.wait_for(state="visible")
    dialog.locator('[data-decision="decline"]').click()
    wait_turn(page, 2, "completed")
    assert agent_text(page, 2) == "The shell call was declined."
    # An edit is shown as the server's diff of what it applied; a plan as its todos.
    say(page, ">notes.md\nfirst line\nsecond line")
    dialog.wait_for(state="visible")
    dialog.locator('[data-decision="acceptForSession"]').click()
    wait_turn(page, 3, "completed")
    diff = page.locator(f"{turn(page, 3)} .change-diff").inner_text()
    assert diff.splitlines()[3:] == ["+first line", "+second line"]
    assert (server.workspace / "notes.md").read_text() == "first line\nsecond line\n"
    edit = {"path": "notes.md", "old_string": "second line", "new_string": "2nd line"}
    say(page, f"?tool edit_file {json.dumps(edit)}")
    dialog.wait_for(state="visible")
    dialog.locator('[data-decision="accept"]').click()
    wait_turn(page, 4, "completed")
    diff = page.locator(f"{turn(page, 4)} .change-diff").inner_text()
    assert "-second line" in diff.splitlines() and "+2nd line" in diff.splitlines()
    say(page, "?plan Ship the web client")
    wait_turn(page, 5, "completed")
    plan = page.locator(".plan")
    assert "Plan: Ship the web client" in plan.inner_text()
    assert plan.locator(".todo").count() == 3
    # A bidi override cannot make the command shown differ from the one that runs.
    say(page, "! echo harmless \u202e; 1# txt.eliF_dlO mr-")
    dialog.wait_for(state="visible")
    shown = page.inner_text("#approval-operation")
    assert shown == "echo harmless ⟨U+202E⟩; 1# txt.eliF_dlO mr-", shown
    dialog.locator('[data-decision="decline"]').click()
    wait_turn(page, 6, "completed")
    page.locator(turn(page, 1)).scroll_into_view_if_needed()
    screenshot(page, "chat", doc="web.png")


def test_esc_interrupts_a_running_turn_and_messages_queue_or_steer(
    servers: Callable[..., WebServer], tabs: Callable[..., Tabs]
) -> None:
    server = servers()
    page = tabs().open(server.base + "/")
    new_thread(page)
    say(page, "?stream 200\n?delay 40")
    page.wait_for_selector(f"{turn(page, 1)} .item-agentMessage:has-text('chunk 2')")
    assert page.inner_text("#send") == "Queue"
    # While it runs, Enter queues the next message ...
    say(page, "queued message")
    page.wait_for_selector("#queue .queued:has-text('queued message')")
    # ... and Steer hands one to the running turn.
    page.fill("#composer", "steered message")
    page.click("#steer")
    page.wait_for_selector("#queue .queued[data-status='guidancePending']")
    page.locator("#composer").focus()
    page.keyboard.press("Escape")
    wait_turn(page, 1, "cancelled")
    assert page.inner_text("#send") == "Send"
    assert len(agent_text(page, 1)) < len(chunks(200))
    # Removing a queued message.
    page.locator("#queue .queued:has-text('queued message') button").click()
    page.wait_for_selector("#queue .queued:has-text('queued message')", state="detached")


def test_a_reload_mid_turn_resumes_without_duplicate_text(
    servers: Callable[..., WebServer], tabs: Callable[..., Tabs]
) -> None:
    server = servers()
    page = tabs().open(server.base + "/")
    new_thread(page)
    say(page, "?stream 40\n?delay 25")
    thread = thread_id(page)
    page.wait_for_selector(f"{turn(page, 1)} .item-agentMessage:has-text('chunk 5 ')")
    page.reload()
    connected(page)
    assert f"thread={thread}" in page.url
    # The replay brings back what streamed so far (once), then the rest streams.
    page.wait_for_selector(f"{turn(page, 1)} .item-agentMessage")
    wait_turn(page, 1, "completed")
    assert agent_text(page, 1) == chunks(40)
    assert page.locator(f"{turn(page, 1)} .item-userMessage").count() == 1


def test_a_dropped_connection_resumes_with_after_seq_and_no_duplicate(
    servers: Callable[..., WebServer], tabs: Callable[..., Tabs]
) -> None:
    server = servers()
    session = tabs()
    sent: list[str] = []
    links: list[tuple[Any, Any]] = []

    def relay(route: Any) -> None:
        """Pass the page's WebSocket through, keeping a handle to cut it."""
        upstream = route.connect_to_server()

        def forward(message: str | bytes) -> None:
            sent.append(str(message))
            upstream.send(message)

        route.on_message(forward)
        links.append((route, upstream))

    session.context.route_web_socket(re.compile(r"/ws"), relay)
    page = session.open(server.base + "/")
    new_thread(page)
    say(page, "?stream 40\n?delay 25")
    page.wait_for_selector(f"{turn(page, 1)} .item-agentMessage:has-text('chunk 5 ')")
    route, upstream = links[-1]
    upstream.close()  # the network drops: both ends see the connection end
    route.close(code=4000, reason="network drop")
    wait_turn(page, 1, "completed")
    assert len(links) == 2  # one reconnect
    assert agent_text(page, 1) == chunks(40)
    resubscribed = [m for m in sent if '"thread/subscribe"' in m and '"afterSeq"' in m]
    after = [int(re.search(r'"afterSeq":(\d+)', m).group(1)) for m in resubscribed]  # type: ignore[union-attr]
    assert after[0] == 0 and after[1] > 0  # opened from the start, resumed from the last seq
    connected(page)


def test_two_tabs_on_one_thread_both_stream(
    servers: Callable[..., WebServer], tabs: Callable[..., Tabs]
) -> None:
    server = servers()
    session = tabs()
    first = session.open(server.base + "/")
    new_thread(first)
    say(first, "?stream 12\n?delay 20")
    thread = thread_id(first)
    second = session.open(f"{server.base}/#thread={thread}")
    connected(second)
    second.wait_for_selector(f'.thread-view[data-thread-id="{thread}"]', state="attached")
    for page in (first, second):
        wait_turn(page, 1, "completed")
        assert agent_text(page, 1) == chunks(12)
    # An approval is asked in both; the first answer wins and closes the other.
    say(second, "! echo two-tabs")
    first.locator("#approval").wait_for(state="visible")
    second.locator("#approval").wait_for(state="visible")
    second.locator('[data-decision="accept"]').click()
    first.locator("#approval").wait_for(state="hidden")
    for page in (first, second):
        wait_turn(page, 2, "completed")
        assert "two-tabs" in page.locator(f"{turn(page, 2)} .item-commandExecution").inner_text()


def test_the_token_comes_from_the_fragment_or_a_prompt(
    servers: Callable[..., WebServer], tabs: Callable[..., Tabs]
) -> None:
    server = servers("--token", TOKEN)
    session = tabs()
    # No token: the page asks for it.
    page = session.open(server.base + "/")
    page.locator("#token-dialog").wait_for(state="visible")
    page.fill("#token-input", TOKEN)
    page.press("#token-input", "Enter")
    connected(page)
    new_thread(page)
    # From the fragment: it never reaches the server (nor stays in the address bar).
    other = session.open(f"{server.base}/#token={TOKEN}")
    connected(other)
    assert TOKEN not in other.url and "?" not in other.url
    # A token with `+`, `&` and `=` as typed, beside a thread: taken whole, all removed.
    odd = "a+b&c=d"
    odd_server = servers("--token", odd)
    typed = session.open(f"{odd_server.base}/#token={odd}&thread=none")
    connected(typed)
    assert urlsplit(typed.url).fragment == "thread=none"
    # A wrong token: asked again, with the reason.
    wrong = tabs(expected=[r"WebSocket connection to .* failed"]).open(
        f"{server.base}/#token=wrong"
    )
    wrong.locator("#token-dialog").wait_for(state="visible")
    assert "wrong token" in wrong.inner_text("#token-error")


def test_keyboard_and_a_400_px_screen(
    servers: Callable[..., WebServer], tabs: Callable[..., Tabs]
) -> None:
    server = servers()
    page = tabs(viewport={"width": 400, "height": 720}).open(server.base + "/")
    connected(page)
    # The thread list folds behind a button on a narrow screen.
    assert not page.is_visible("#sidebar")
    page.click("#threads-toggle")
    page.wait_for_selector("#sidebar", state="visible")
    page.click("#new-thread")
    page.wait_for_selector("#sidebar", state="hidden")
    page.wait_for_selector("#composer:not([disabled])")
    # Shift+Enter is a new line, Enter sends.
    box = page.locator("#composer")
    box.type("line one")
    box.press("Shift+Enter")
    box.type("line two")
    assert box.input_value() == "line one\nline two"
    box.press("Enter")
    wait_turn(page, 1, "completed")
    assert box.input_value() == ""
    assert agent_text(page, 1) == "You said: line one line two"
    # Nothing wider than the screen; the composer and its buttons are on it.
    assert page.evaluate("document.documentElement.scrollWidth") <= 400
    for selector in ("#composer", "#send", "#interrupt", "#status"):
        box_ = page.locator(selector).bounding_box()
        assert box_ is not None and box_["x"] >= 0 and box_["x"] + box_["width"] <= 400
    # Tab reaches the controls, and focus is visible.
    page.keyboard.press("Tab")
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline not in ("none", "")
    # Esc closes the thread list and gives focus back to the button that opened it.
    page.click("#threads-toggle")
    page.wait_for_selector("#sidebar", state="visible")
    page.keyboard.press("Escape")
    page.wait_for_selector("#sidebar", state="hidden")
    assert page.evaluate("document.activeElement.id") == "threads-toggle"


def test_thread_list_pages_and_searches(
    servers: Callable[..., WebServer], tabs: Callable[..., Tabs]
) -> None:
    server = servers()
    page = tabs().open(server.base + "/")
    connected(page)
    # 35 threads: more than one page of 30.
    page.evaluate(
        """async () => {
            const { AppServerClient } = await import('/assets/client.js');
            const url = `ws://${location.host}/ws`;
            const c = await AppServerClient.connect(url, { reconnect: false });
            for (let i = 0; i < 35; i++) {
                await c.threadStart({ identity: { channelName: 'web', userId: 'local' },
                                      displayName: `topic ${i}` });
            }
            await c.close();
        }"""
    )
    page.reload()
    connected(page)
    page.wait_for_selector(".thread-item >> nth=29")
    assert page.locator(".thread-item").count() == 30
    page.click("#more-threads")
    page.wait_for_selector(".thread-item >> nth=34")
    assert page.is_hidden("#more-threads")
    page.fill("#thread-search", "topic 3")
    names = page.locator(".thread-name").all_inner_texts()
    assert sorted(names) == sorted(["topic 3", *(f"topic {i}" for i in range(30, 35))])
    # The server searches too (thread/list searchTerm): "topic 2" is on the second page.
    page.reload()
    connected(page)
    page.wait_for_selector(".thread-item >> nth=29")
    page.fill("#thread-search", "topic 2")
    page.wait_for_selector(".thread-name:text-is('topic 2')")
    names = page.locator(".thread-name").all_inner_texts()
    assert sorted(names) == sorted(["topic 2", *(f"topic {i}" for i in range(20, 30))])
    assert urlsplit(page.url).query == ""


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
