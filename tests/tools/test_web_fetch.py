"""web_fetch: a URL's text through the SSRF-safe fetcher, asked as network access.

A real local HTTP server serves the pages; the tool reaches it only through
its test seam (``allow_private=True``): the default refuses loopback."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from appserver.providers.openai_compat import OpenAIProvider
from appserver.tools.base import ToolContext, ToolError, ToolOutcome
from appserver.tools.web_fetch import WebFetchTool
from tests.support.agent_runs import agent_run, openai_tool_call, tool_messages
from tests.support.fake_models import fake_model_server, openai_text_reply

PAGE = (
    "<!doctype html><html><head><title>The  Title</title><style>p{color:red}</style>"
    "<script>alert('no')</script></head><body><h1>Hello</h1><p>Some <b>bold</b> text, "
    'a <a href="/next">link</a> and caf&eacute;.</p><ul><li>one</li><li>two</li></ul>'
    "<pre>  indented\n    code</pre></body></html>"
)
PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 64


class _Pages(BaseHTTPRequestHandler):
    port = 0

    def do_GET(self) -> None:
        routes: dict[str, tuple[int, str, bytes, dict[str, str]]] = {
            "/page.html": (200, "text/html; charset=utf-8", PAGE.encode(), {}),
            "/latin1.txt": (200, "text/plain; charset=iso-8859-1", "café".encode("latin-1"), {}),
            "/data.json": (200, "application/json", b'{"a": 1}', {}),
            "/image.png": (200, "image/png", PNG, {}),
            "/big.html": (200, "text/html", b"<p>" + b"word " * 10_000 + b"</p>", {}),
            "/same": (302, "text/plain", b"", {"Location": "/page.html"}),
            "/other": (
                302,
                "text/plain",
                b"",
                {"Location": f"http://localhost:{self.port}/page.html"},
            ),
        }
        status, kind, body, headers = routes.get(self.path, (404, "text/plain", b"no", {}))
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # keep the test output clean


@pytest.fixture
def site() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    _Pages.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{_Pages.port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def context(tmp_path: Path) -> ToolContext:
    return ToolContext(workspace=tmp_path, thread_id="t", turn_id="u", call_id="c")


async def fetch(tmp_path: Path, url: str, tool: WebFetchTool | None = None) -> ToolOutcome:
    tool = tool or WebFetchTool(allow_private=True)
    return await tool.run(tool.plan({"url": url}, context(tmp_path)), context(tmp_path))


def test_a_fetch_is_asked_as_network_access_to_the_origin(tmp_path: Path) -> None:
    plan = WebFetchTool().plan({"url": "https://Example.com:8443/a/b?q=1"}, context(tmp_path))
    assert plan.approval is not None
    assert (plan.approval.kind, plan.approval.operation) == ("network", "fetch")
    assert plan.approval.target == "https://example.com:8443"
    assert plan.approval.reason == "Fetch https://Example.com:8443/a/b?q=1"
    assert not plan.approval.outside_workspace


@pytest.mark.parametrize(
    "url",
    ["file:///etc/passwd", "ftp://example.com/x", "https://", "example.com", " ", "http://[::1"],
)
def test_urls_it_refuses(tmp_path: Path, url: str) -> None:
    with pytest.raises(ToolError):
        WebFetchTool().plan({"url": url}, context(tmp_path))


def test_unknown_arguments_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="unknown argument"):
        WebFetchTool().plan({"url": "https://example.com", "method": "POST"}, context(tmp_path))


async def test_loopback_is_refused_without_the_test_seam(tmp_path: Path, site: str) -> None:
    outcome = await fetch(tmp_path, f"{site}/page.html", WebFetchTool())
    assert not outcome.success
    assert "non-public address" in outcome.output


async def test_html_becomes_readable_text(tmp_path: Path, site: str) -> None:
    outcome = await fetch(tmp_path, f"{site}/page.html")
    assert outcome.success, outcome.output
    assert outcome.output == (
        f"URL: {site}/page.html\nTitle: The Title\n\n# Hello\n\n"
        f"Some bold text, a link ({site}/next) and café.\n\n- one\n- two\n\n  indented\n    code"
    )
    assert "alert" not in outcome.output and "color" not in outcome.output


async def test_other_text_is_returned_as_it_is(tmp_path: Path, site: str) -> None:
    latin = await fetch(tmp_path, f"{site}/latin1.txt")
    assert latin.output.endswith("\n\ncafé")  # decoded with the page's charset
    data = await fetch(tmp_path, f"{site}/data.json")
    assert data.output.endswith('\n\n{"a": 1}')


async def test_binary_content_and_errors_fail_the_call(tmp_path: Path, site: str) -> None:
    image = await fetch(tmp_path, f"{site}/image.png")
    assert not image.success and "image/png" in image.output and "text only" in image.output
    missing = await fetch(tmp_path, f"{site}/missing")
    assert not missing.success and "HTTP 404" in missing.output


async def test_a_long_page_is_cut_with_a_marker(tmp_path: Path, site: str) -> None:
    small = WebFetchTool(allow_private=True, max_bytes=1000)
    cut = await fetch(tmp_path, f"{site}/big.html", small)
    assert cut.success and cut.details["truncated"]
    assert cut.output.endswith("[the page is longer than 1000 bytes; only its start was read]")
    short_text = WebFetchTool(allow_private=True, max_text_bytes=100)
    capped = await fetch(tmp_path, f"{site}/big.html", short_text)
    assert capped.output.endswith("[the text is longer than 100 bytes; the rest is cut]")


async def test_redirects_stay_on_the_approved_origin(tmp_path: Path, site: str) -> None:
    same = await fetch(tmp_path, f"{site}/same")
    assert same.success and same.output.startswith(f"URL: {site}/page.html\n")
    other = await fetch(tmp_path, f"{site}/other")
    assert not other.success
    assert other.output == (
        f"{site}/other redirects to http://localhost:{_Pages.port}/page.html (another site); "
        "call web_fetch with that URL to fetch it."
    )


async def test_the_agent_asks_then_the_model_reads_the_page(tmp_path: Path, site: str) -> None:
    async with fake_model_server() as fake:
        route = "POST /v1/chat/completions"
        fake.script(
            route,
            openai_tool_call("web_fetch", {"url": f"{site}/page.html"}),
            openai_text_reply(["read"]),
            openai_tool_call("web_fetch", {"url": f"{site}/data.json"}, "call_2"),
            openai_text_reply(["declined"]),
        )
        provider = OpenAIProvider(api_key="sk-test", base_url=fake.openai_base_url)
        tools = [WebFetchTool(allow_private=True)]
        async with agent_run(tmp_path, provider, tools, answers=["accept", "decline"]) as run:
            items = await run.turn("fetch the page")
            await run.turn("fetch the data")
            asked = run.door.asked
        bodies = fake.bodies(route)
    assert [(a.approval_type, a.operation, a.target) for a in asked] == [
        ("network", "fetch", site)
    ] * 2
    assert asked[0].scope_key == f"network:fetch:{site}"
    result = next(item for item in items if item.type == "toolResult")
    assert result.payload["success"] is True and "# Hello" in result.payload["result"]
    assert "# Hello" in tool_messages(bodies[1])[0]["content"]
    assert tool_messages(bodies[3])[-1]["content"].startswith("Declined")
