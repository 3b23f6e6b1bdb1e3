"""The web page shows the server's diffs (docs/web.md): in the approval, on the result
of what was applied, and the turn's whole diff from ``turn/diff/updated``.

Real Chromium and a real ``appserver app-server --listen`` (the fixtures of
tests/transport/test_web_browser.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tests.transport import test_web_browser as web
from tests.transport.test_web_browser import (
    ARTIFACTS,
    Page,
    Tabs,
    WebServer,
    new_thread,
    turn,
    wait_turn,
)

# The browser tests' fixtures: one Chromium per module, servers and tabs per test.
browser = web.browser
servers = web.servers
tabs = web.tabs


def ask(page: Page, tool: str, arguments: dict[str, object]) -> None:
    """Have the offline model call ``tool``."""
    box = page.locator("#composer")
    box.fill(f"?tool {tool} {json.dumps(arguments)}")
    box.press("Enter")


def test_an_overwrite_shows_the_server_diff_with_the_removed_lines(
    servers: Callable[..., WebServer], tabs: Callable[..., Tabs]
) -> None:
    server = servers()
    notes = Path(server.workspace) / "notes.md"
    notes.write_text("first line\nsecond line\n")
    page = tabs().open(server.base + "/")
    new_thread(page)
    ask(page, "write_file", {"path": "notes.md", "content": "all new\n"})
    dialog = page.locator("#approval")
    dialog.wait_for(state="visible")
    # The approval: the server's proposed diff of the real file.
    removed = page.locator("#approval-diff .diff-del").all_inner_texts()
    assert removed == ["-first line", "-second line"]
    assert page.locator("#approval-diff .diff-add").all_inner_texts() == ["+all new"]
    dialog.locator('[data-decision="accept"]').click()
    wait_turn(page, 1, "completed")
    assert notes.read_text() == "all new\n"
    # After: what was applied, on the result; the tool call shows no guessed diff.
    applied = page.locator(f"{turn(page, 1)} .change-diff")
    assert applied.inner_text().splitlines() == [
        "--- a/notes.md",
        "+++ b/notes.md",
        "@@ -1,2 +1 @@",
        "-first line",
        "-second line",
        "+all new",
    ]
    assert applied.locator(".diff-del").all_inner_texts() == ["-first line", "-second line"]
    assert "write_file notes.md" in page.inner_text(f"{turn(page, 1)} .tool-call summary")
    assert page.locator(f"{turn(page, 1)} .tool-call .diff-add").count() == 0
    # The turn's whole diff (turn/diff/updated), in its own fold.
    whole = page.locator(f"{turn(page, 1)} .turn-diff")
    assert "Changes in this turn (1 file)" in whole.locator("summary").inner_text()
    whole.locator("summary").click()  # folded until opened
    assert whole.locator(".diff-del").all_inner_texts() == ["-first line", "-second line"]
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "web-diffs.png"))
