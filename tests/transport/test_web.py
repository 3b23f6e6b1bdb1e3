"""The web client's serving, its headers, and the Origin and token rules around it (docs/web.md).

The browser itself is driven in tests/transport/test_web_browser.py; these are the HTTP facts.
"""

from __future__ import annotations

import http.client
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlsplit

import pytest
from websockets.datastructures import Headers
from websockets.http11 import Request

from appserver.transport.listen_options import ListenerOptions, names_this_machine
from appserver.transport.webclient import WEB_ROOT, WebClient, load_assets
from appserver.transport.ws_admission import Admission
from tests.support.helpers import IDENTITY
from tests.transport.test_websocket_security import TOKEN, listening, refused_status, rpc

ASSETS = (
    "/assets/app.js",
    "/assets/page.js",
    "/assets/thread-view.js",
    "/assets/threads.js",
    "/assets/composer.js",
    "/assets/approvals.js",
    "/assets/app.css",
    "/assets/client.js",
    "/assets/markdown.js",
    "/assets/exact-text.js",
    "/assets/approval-view.js",
    "/assets/settings-view.js",
    "/assets/subagents-view.js",
    "/assets/words.js",
    "/assets/welcome-view.js",
    "/assets/tasks-view.js",
)


def get(
    url: str, path: str, headers: dict[str, str] | None = None
) -> tuple[int, http.client.HTTPMessage, bytes]:
    """A raw GET (``http.client`` sends the path as written: no ``..`` folding)."""
    parts = urlsplit(url)
    assert parts.hostname is not None
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=5)
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.headers, response.read()
    finally:
        connection.close()


async def fetch(
    url: str, path: str, headers: dict[str, str] | None = None
) -> tuple[int, http.client.HTTPMessage, bytes]:
    import anyio

    return await anyio.to_thread.run_sync(lambda: get(url, path, headers))


async def test_the_page_and_its_assets_are_served_with_a_strict_policy(workspace: Path) -> None:
    async with listening(workspace) as (_, url):
        authority = urlsplit(url).netloc
        status, headers, body = await fetch(url, "/")
        assert status == 200
        assert headers["Content-Type"] == "text/html; charset=utf-8"
        assert b'<script type="module" src="/assets/app.js">' in body
        assert b'name="appserver-auth" content="none"' in body  # no token needed here
        policy = headers["Content-Security-Policy"]
        assert "default-src 'none'" in policy
        assert "script-src 'self'" in policy and "'unsafe-inline'" not in policy
        assert f"connect-src 'self' ws://{authority}" in policy
        assert "frame-ancestors 'none'" in policy
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert headers["Cache-Control"] == "no-cache"
        for path in ASSETS:
            status, headers, body = await fetch(url, path)
            assert status == 200, path
            kind = "text/css" if path.endswith(".css") else "text/javascript"
            assert headers["Content-Type"] == f"{kind}; charset=utf-8"
            assert body
            # Revalidation: the same ETag (or *) answers 304 with no body; its
            # Content-Length, if any, must be the 200's (RFC 9110 8.6).
            length = headers["Content-Length"]
            for condition in (headers["ETag"], "*"):
                status, revalidated, body = await fetch(url, path, {"If-None-Match": condition})
                assert (status, body) == (304, b"")
                assert revalidated["Content-Length"] in (None, length)


async def test_nothing_but_the_listed_files_is_served(workspace: Path) -> None:
    async with listening(workspace) as (_, url):
        for path in (
            "/assets/",
            "/assets/../index.html",
            "/assets/%2e%2e/index.html",
            "/assets/..%2Findex.html",
            "/assets//app.js",
            "/index.html",
            "/web/index.html",
            "/assets/app.js/",
            "/../pyproject.toml",
        ):
            status, headers, _ = await fetch(url, path)
            assert status == 404, path
            assert headers["Content-Type"].startswith("text/plain")


async def test_upgrades_on_the_root_and_ws_still_work(workspace: Path) -> None:
    async with listening(workspace) as (_, url):
        for address in (url, url.removesuffix("/ws"), url.removesuffix("ws")):
            async with rpc(address) as client:
                assert (await client.request("thread/list", {"identity": IDENTITY}))["data"] == []


async def test_the_pages_own_origin_is_allowed_and_no_other(workspace: Path) -> None:
    async with listening(workspace, token=TOKEN) as (_, url):
        authority = urlsplit(url).netloc  # 127.0.0.1:PORT
        good = f"{url}?token={TOKEN}"
        # The page this listener served connects back with its own origin.
        async with rpc(good, origin=f"http://{authority}") as client:
            assert (await client.request("thread/list", {"identity": IDENTITY}))["data"] == []
        # ... but still needs the token.
        assert await refused_status(url, origin=f"http://{authority}") == 401
        port = authority.rsplit(":", 1)[1]
        for origin in (
            "https://evil.example",
            f"http://localhost:{port}",  # another name than the one the page was loaded from
            f"https://{authority}",  # the listener serves no https page
            "http://127.0.0.1:1",  # another port, another origin
            "null",
        ):
            assert await refused_status(good, origin=origin) == 403, origin
        # Plain GETs follow the same rule.
        status, _, _ = await fetch(url, "/", {"Origin": "https://evil.example"})
        assert status == 403
        status, _, _ = await fetch(url, "/assets/app.js", {"Origin": f"http://{authority}"})
        assert status == 200


def admission(**options: object) -> Admission:
    return Admission(ListenerOptions(**options), lambda: True)  # type: ignore[arg-type]


def request(host: str, origin: str) -> Request:
    return Request("/ws", Headers([("Host", host), ("Origin", origin)]))


def test_a_rebound_name_is_not_the_pages_origin() -> None:
    """DNS rebinding: evil.example re-pointed at 127.0.0.1 sends a Host that
    matches its Origin. Only IP literals, localhost and the listen address
    count as the page's own origin; other names need --allow-origin."""
    gate = admission(host="127.0.0.1", port=9100)
    assert not gate.origin_allowed("http://evil.example:9100", request("evil.example:9100", "x"))
    assert gate.origin_allowed("http://127.0.0.1:9100", request("127.0.0.1:9100", "x"))
    assert gate.origin_allowed("http://localhost:9100", request("localhost:9100", "x"))
    assert gate.origin_allowed("http://[::1]:9100", request("[::1]:9100", "x"))
    assert not gate.origin_allowed("http://127.0.0.1:9100", request("localhost:9100", "x"))
    assert not gate.origin_allowed("http://127.0.0.1:9100", request("bad host", "x"))
    named = admission(host="devbox.lan", port=9100, token="t")
    assert named.origin_allowed("http://devbox.lan:9100", request("devbox.lan:9100", "x"))
    allowed = admission(allowed_origins=["https://agent.example"])
    assert allowed.origin_allowed("https://agent.example", request("127.0.0.1:9100", "x"))


def test_a_rebound_name_reads_nothing_on_loopback() -> None:
    """DNS rebinding without a WebSocket: a page of evil.example re-pointed at
    127.0.0.1 fetches plain GETs with ``Host: evil.example``; a loopback
    listener answers them 421 (the health checks and the page's files too)."""
    gate = admission(host="127.0.0.1", port=9100, allowed_origins=["http://devbox.test:9100"])
    connection = SimpleNamespace(remote_address=("127.0.0.1", 5555))
    for path in ("/healthz", "/readyz", "/", "/assets/app.js", "/ws"):
        for host in ("evil.example:9100", "attacker.com", "127.0.0.1.nip.io:9100"):
            answer = gate(connection, Request(path, Headers([("Host", host)])))  # type: ignore[arg-type]
            assert answer is not None and answer.status_code == 421, (path, host)
    for host in ("127.0.0.1:9100", "localhost:9100", "[::1]:9100", "devbox.test:9100"):
        answer = gate(connection, Request("/healthz", Headers([("Host", host)])))  # type: ignore[arg-type]
        assert answer is not None and answer.status_code == 200, host
    # A listener other hosts reach is addressed by whatever name they give it.
    network = admission(host="0.0.0.0", port=9100, token="x" * 16)
    answer = network(connection, Request("/healthz", Headers([("Host", "agent.example")])))  # type: ignore[arg-type]
    assert answer is not None and answer.status_code == 200


def test_only_get_is_served() -> None:
    gate = admission(host="127.0.0.1", port=9100)
    connection = SimpleNamespace(remote_address=("127.0.0.1", 5555))
    for method in ("HEAD", "POST", "OPTIONS"):
        asked = Request("/", Headers([("Host", "127.0.0.1:9100")]))
        asked.method = method
        answer = gate(connection, asked)  # type: ignore[arg-type]
        assert answer is not None and answer.status_code == 405
        assert answer.headers["Allow"] == "GET"


def test_repeated_host_or_origin_headers_are_refused_not_crashed() -> None:
    gate = admission(host="127.0.0.1", port=9100)
    connection = SimpleNamespace(remote_address=("127.0.0.1", 5555))
    two_origins = Request(
        "/ws",
        Headers(
            [
                ("Host", "127.0.0.1:9100"),
                ("Origin", "http://127.0.0.1:9100"),
                ("Origin", "http://evil.example"),
            ]
        ),
    )
    answer = gate(connection, two_origins)  # type: ignore[arg-type]
    assert answer is not None and answer.status_code == 403
    two_hosts = Request("/", Headers([("Host", "127.0.0.1:9100"), ("Host", "evil.example:9100")]))
    page = gate(connection, two_hosts)  # type: ignore[arg-type]
    assert page is not None and page.status_code == 400
    upgrade = Request(
        "/ws",
        Headers(
            [
                ("Host", "127.0.0.1:9100"),
                ("Host", "evil.example:9100"),
                ("Upgrade", "websocket"),
                ("Connection", "Upgrade"),
            ]
        ),
    )
    refused = gate(connection, upgrade)  # type: ignore[arg-type]
    assert refused is not None and refused.status_code == 400
    no_host = Request("/", Headers([]))
    page = gate(connection, no_host)  # type: ignore[arg-type]
    assert page is not None and page.status_code == 400


async def test_with_a_token_the_page_asks_for_it_and_holds_no_secret(workspace: Path) -> None:
    async with listening(workspace, token=TOKEN) as (_, url):
        # The page itself is public (no token in it, none needed to load it) ...
        status, _, body = await fetch(url, "/")
        assert status == 200
        assert b'name="appserver-auth" content="token"' in body
        assert TOKEN.encode() not in body
        for path in ASSETS:
            status, _, body = await fetch(url, path)
            assert status == 200 and TOKEN.encode() not in body
        # ... and the WebSocket is not.
        assert await refused_status(url) == 401


async def test_without_the_web_client_the_root_names_the_websocket_url(workspace: Path) -> None:
    async with listening(workspace, web_client=False) as (_, url):
        status, headers, body = await fetch(url, "/")
        assert status == 426
        assert headers["Content-Type"].startswith("text/plain")
        assert url.encode() in body
        status, _, _ = await fetch(url, "/assets/app.js")
        assert status == 404


def test_a_missing_web_folder_serves_nothing(tmp_path: Path) -> None:
    assert load_assets(tmp_path) == {}
    assert not WebClient(load_assets(tmp_path))


def test_the_page_loads_nothing_from_elsewhere_and_nothing_inline() -> None:
    assets = load_assets()
    assert set(assets) == {"/", *ASSETS}
    page = assets["/"].body.decode()
    # Offline by construction: every src and href is the server's own (or data:).
    for reference in re.findall(r'(?:src|href)="([^"]*)"', page):
        assert reference.startswith(("/assets/", "#", "data:")), reference
    assert "<script>" not in page and "style=" not in page  # the CSP forbids inline code
    for path in ASSETS:
        text = assets[path].body.decode()
        assert not re.search(r"""import\s*\(?\s*["']https?:""", text), path
        assert not re.search(r"""from\s+["'](?!\./)""", text), path  # only ./ modules


@pytest.mark.skipif(sys.platform != "linux", reason="builds a wheel with the local toolchain")
def test_the_web_client_ships_in_the_wheel(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            tmp_path,
            root,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0 and "hatchling" in done.stderr:
        pytest.skip("hatchling is not installed in this environment")
    assert done.returncode == 0, done.stderr
    (wheel,) = tmp_path.glob("appserver-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for path in WEB_ROOT.rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            assert f"appserver/web/{path.relative_to(WEB_ROOT).as_posix()}" in names


def test_the_docs_name_tests_that_exist() -> None:
    """docs/web.md lists the browser tests: each one must exist, and each must be listed."""
    root = Path(__file__).resolve().parents[2]
    doc = (root / "docs" / "web.md").read_text("utf-8")
    source = "".join(
        (root / "tests" / "transport" / name).read_text("utf-8")
        for name in (
            "test_web_browser.py",
            "test_web_workspace.py",
            "test_web_desktop.py",
            "test_web_subagents.py",
            "test_web_suggestions.py",
            "test_web_tasks.py",
        )
    )
    listed = set(re.findall(r"^\| `(test_\w+)` \|", doc, re.M))
    defined = set(re.findall(r"^def (test_\w+)\(", source, re.M))
    assert listed == defined
    assert (root / "docs" / "web.png").is_file() and "(web.png)" in doc
    assert "(docs/web.png)" in (root / "README.md").read_text("utf-8")
    # Each screenshot docs/web.md shows is in the repository (the browser tests write them).
    for picture in re.findall(r"\]\((web/[\w-]+\.png)\)", doc):
        assert (root / "docs" / picture).is_file(), picture


def test_what_names_this_machine() -> None:
    """The one rule the Host check, the page's origin and the early upgrade share."""
    for host in ("localhost:9100", "127.0.0.1", "[::1]:80", "10.0.0.7:1", "devbox:9", None):
        expected = host not in ("devbox:9", None)
        assert names_this_machine(host) is expected, host
    assert names_this_machine("devbox:9", "devbox")  # the name listened on
    assert not names_this_machine("evil.example:9100", "127.0.0.1")
