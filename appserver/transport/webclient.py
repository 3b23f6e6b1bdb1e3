"""The browser client's static files (``appserver/web/``), served by the WebSocket listener.

Plain ``GET /`` answers ``index.html`` and ``GET /assets/NAME`` a file of
``appserver/web/assets/``; nothing else is served. The files are read once, at
start-up, into a table keyed by URL path: a request names a key or gets
nothing, so no path from a request ever reaches the file system (no directory
traversal, no symlink games). Every answer carries a strict
``Content-Security-Policy`` (scripts, styles and connections only from the
page's own origin), ``nosniff`` and no framing; files are revalidated with
their ``ETag`` (``304`` when unchanged), so an upgraded server is picked up at
the next load.

The page holds no secret: the token is typed in, or taken from the page URL's
``#token=`` fragment (never sent to any server), and offered on the WebSocket
upgrade (docs/web.md). The only per-server fact in ``index.html`` is whether a
token is needed, which a refused upgrade reveals anyway.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path

from websockets.datastructures import Headers
from websockets.http11 import Request, Response

WEB_ROOT = Path(__file__).resolve().parent.parent / "web"
INDEX = "index.html"
ASSETS = "assets"
# The placeholder in index.html that says whether the page must ask for a token.
AUTH_PLACEHOLDER = b'name="appserver-auth" content="none"'
AUTH_REQUIRED = b'name="appserver-auth" content="token"'

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".txt": "text/plain; charset=utf-8",
}


@dataclass(frozen=True)
class Asset:
    body: bytes
    content_type: str
    etag: str


def _asset(body: bytes, suffix: str) -> Asset:
    digest = hashlib.sha256(body).hexdigest()[:32]
    return Asset(body, CONTENT_TYPES[suffix], f'"{digest}"')


def load_assets(root: Path = WEB_ROOT, *, token_required: bool = False) -> dict[str, Asset]:
    """URL path -> file, for ``/`` and every ``/assets/NAME`` (regular files only)."""
    assets: dict[str, Asset] = {}
    index = root / INDEX
    if not index.is_file():
        return assets  # a build without the web client: GET / keeps its hint
    page = index.read_bytes()
    if token_required:
        page = page.replace(AUTH_PLACEHOLDER, AUTH_REQUIRED)
    assets["/"] = _asset(page, ".html")
    folder = root / ASSETS
    if folder.is_dir():
        for path in sorted(folder.iterdir()):
            if path.is_file() and not path.is_symlink() and path.suffix in CONTENT_TYPES:
                assets[f"/{ASSETS}/{path.name}"] = _asset(path.read_bytes(), path.suffix)
    return assets


def content_security_policy(authority: str | None) -> str:
    """Only the page's own origin: its scripts, styles and WebSocket."""
    # CSP3 lets 'self' cover ws:// on the same host and port; the explicit
    # source is for browsers that do not.
    sockets = f"'self' ws://{authority}" if authority else "'self'"
    return "; ".join(
        (
            "default-src 'none'",
            "script-src 'self'",
            "style-src 'self'",
            "img-src 'self' data:",
            "font-src 'self'",
            f"connect-src {sockets}",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        )
    )


class WebClient:
    """Answers plain GETs of the browser client's files (``None``: not one of them)."""

    def __init__(self, assets: dict[str, Asset]) -> None:
        self.assets = assets

    @classmethod
    def load(cls, *, token_required: bool) -> WebClient:
        return cls(load_assets(token_required=token_required))

    def __bool__(self) -> bool:
        return bool(self.assets)

    def response(self, path: str, request: Request, authority: str | None) -> Response | None:
        asset = self.assets.get(path)
        if asset is None:
            return None
        headers = Headers(
            [
                ("Cache-Control", "no-cache"),
                ("ETag", asset.etag),
                ("Content-Security-Policy", content_security_policy(authority)),
                ("X-Content-Type-Options", "nosniff"),
                ("X-Frame-Options", "DENY"),
                ("Referrer-Policy", "no-referrer"),
                ("Cross-Origin-Opener-Policy", "same-origin"),
                ("Cross-Origin-Resource-Policy", "same-origin"),
            ]
        )
        if any(
            asset.etag in value or value.strip() == "*"
            for value in request.headers.get_all("If-None-Match")
        ):
            # No body; a Content-Length must be the 200's (RFC 9110 8.6).
            headers["Content-Length"] = str(len(asset.body))
            status = HTTPStatus.NOT_MODIFIED
            return Response(status.value, status.phrase, headers, b"")
        headers["Content-Type"] = asset.content_type
        headers["Content-Length"] = str(len(asset.body))
        return Response(HTTPStatus.OK.value, HTTPStatus.OK.phrase, headers, asset.body)
