"""The ``web_fetch`` tool: the text of a web page.

The URL is fetched with the SSRF-safe fetcher (``tools.fetching``): http(s)
only, public addresses only (checked at connect time, redirects too), a
timeout and a cap on what is downloaded. HTML becomes readable text
(``tools.html_text``); other text (plain, JSON, XML, ...) is returned as it
is; anything else is refused. The text kept is capped too, with a marker.

Approval: fetching is network access, asked like it (``kind`` ``network``,
``operation`` ``fetch``, ``target`` the URL's origin, e.g.
``https://example.com``), so ``acceptForSession`` covers that one origin for
the thread and the ``autoApprove`` policy lets every fetch through. A
redirect to another origin is not followed: the model is told where it
leads and may fetch that URL, which asks for its own origin.

``allow_private`` lets a test fetch from its local server; production never
sets it (nothing reads it from the environment).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from appserver import __version__
from appserver.tools.args import check_keys, require_str
from appserver.tools.base import ApprovalNeed, ToolContext, ToolError, ToolOutcome, ToolPlan

FETCH_MAX_BYTES = 2 * 1024 * 1024  # downloaded
TEXT_MAX_BYTES = 256 * 1024  # kept (the model reads less: runtime.tool_output)
FETCH_TIMEOUT_S = 20.0

_HTML = ("text/html", "application/xhtml+xml")
_TEXT_APPLICATIONS = ("application/json", "application/xml", "application/javascript")


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of an http(s) URL; :class:`ToolError` otherwise."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ToolError(f"not a valid URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ToolError("url must be an http:// or https:// URL with a host")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")


def _is_text(content_type: str) -> bool:
    return (
        content_type.startswith("text/")
        or content_type in _TEXT_APPLICATIONS
        or content_type.endswith(("+json", "+xml"))
    )


def _looks_like_html(data: bytes) -> bool:
    start = data[:512].lstrip().lower()
    return start.startswith((b"<!doctype html", b"<html"))


def _cap_text(text: str, max_bytes: int) -> tuple[str, bool]:
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text, False
    return data[:max_bytes].decode("utf-8", errors="ignore"), True


class WebFetchTool:
    """``web_fetch``: GET a URL and return its text."""

    name = "web_fetch"
    description = (
        "Fetch an http(s) URL and return its text: HTML pages as readable text (links shown "
        "as 'text (url)'), plain text, JSON and XML as they are. Public addresses only. "
        "A redirect to another site is reported, not followed."
    )
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "url": {"type": "string", "description": "The http:// or https:// URL to fetch."},
        },
        "required": ["url"],
        "additionalProperties": False,
    }

    def __init__(
        self,
        *,
        allow_private: bool = False,
        timeout: float = FETCH_TIMEOUT_S,
        max_bytes: int = FETCH_MAX_BYTES,
        max_text_bytes: int = TEXT_MAX_BYTES,
    ) -> None:
        self.allow_private = allow_private  # tests with a local server only
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.max_text_bytes = max_text_bytes

    def plan(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolPlan:
        """Check the URL; the fetch is asked as network access to its origin."""
        check_keys(arguments, ("url",))
        url = require_str(arguments, "url", allow_empty=False).strip()
        origin = origin_of(url)
        approval = ApprovalNeed(
            kind="network", operation="fetch", target=origin, reason=f"Fetch {url}"
        )
        return ToolPlan(self.name, arguments, approval, {"url": url, "origin": origin})

    async def run(self, plan: ToolPlan, ctx: ToolContext) -> ToolOutcome:
        """Fetch and extract; every failure is an outcome, never an exception."""
        # Imported on first use: the HTTP stack costs start-up time.
        from appserver.tools.fetching import CrossOriginRedirect, FetchRefused, fetch_public

        url: str = plan.resolved["url"]
        try:
            fetched = await fetch_public(
                url,
                timeout=self.timeout,
                max_bytes=self.max_bytes,
                allow_private=self.allow_private,
                cut_at_cap=True,
                same_origin=True,
                headers={"User-Agent": f"appserver/{__version__} (web_fetch)"},
            )
        except CrossOriginRedirect as exc:
            return ToolOutcome(
                success=False,
                output=f"{url} redirects to {exc.location} (another site); "
                "call web_fetch with that URL to fetch it.",
                details={"url": url, "redirect": exc.location},
            )
        except FetchRefused as exc:
            return ToolOutcome(False, f"cannot fetch {url}: {exc}", {"url": url})
        kind = fetched.content_type
        html = kind in _HTML or (not kind and _looks_like_html(fetched.data))
        if not html and kind and not _is_text(kind):
            return ToolOutcome(
                False,
                f"{fetched.url} is {kind} ({len(fetched.data)} bytes), not text; "
                "web_fetch returns text only",
                {"url": fetched.url, "content_type": kind},
            )
        try:
            decoded = fetched.data.decode(fetched.charset or "utf-8", errors="replace")
        except LookupError:  # a charset Python does not know
            decoded = fetched.data.decode("utf-8", errors="replace")
        title = ""
        text = decoded
        if html:
            from appserver.tools.html_text import html_to_text  # html.parser: at first use

            title, text = html_to_text(decoded, fetched.url)
        text, text_cut = _cap_text(text, self.max_text_bytes)
        lines = [f"URL: {fetched.url}"]
        if title:
            lines.append(f"Title: {title}")
        lines += ["", text or "(no text)"]
        if fetched.cut:
            lines.append(
                f"[the page is longer than {self.max_bytes} bytes; only its start was read]"
            )
        elif text_cut:
            lines.append(f"[the text is longer than {self.max_text_bytes} bytes; the rest is cut]")
        return ToolOutcome(
            success=True,
            output="\n".join(lines),
            details={
                "url": fetched.url,
                "content_type": kind,
                "bytes": len(fetched.data),
                "truncated": fetched.cut or text_cut,
            },
        )
