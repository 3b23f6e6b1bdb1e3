"""A small HTTP/1.1 client for the model APIs: one request at a time per
connection, idle connections kept for the next turn, redirects followed for
https endpoints, HTTP proxies from the environment.

Why not ``httpx2`` (which the fetch tool and MCP keep using): a model's answer
is a stream of small server-sent events, each sent as one HTTP chunk. ``h11``
turns every chunk into an event object, and ``httpcore2`` and ``httpx2`` pass
each one up through two more async generators: on a 2,000-delta turn that was
~40 % of the server's CPU. Here each socket read is un-chunked in one loop
(:mod:`appserver.providers.http_body`) and handed up as one piece, however many
events it holds. TLS trust is the system's (:mod:`appserver.providers.http_tls`),
as for the fetch tool and MCP (docs/providers.md, "The HTTP client").
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
import time
import urllib.parse
import urllib.request
import zlib
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass

from appserver.providers.http_body import RemoteProtocolError, body_pieces, decoder

# A connection idle longer than this is closed rather than reused (httpx's
# default): servers drop idle keep-alive connections, often after 5-60 s.
KEEPALIVE_EXPIRY = 5.0
MAX_IDLE = 10
# The longest status line and headers accepted.
MAX_HEAD = 65536
MAX_REDIRECTS = 20
# What stays as it is in a request's path and query (RFC 3986, and "%" so an
# already encoded URL is not encoded twice).
PATH_SAFE = "/%:@!$&'()*+,;=-._~"
QUERY_SAFE = PATH_SAFE + "?"
REDIRECTS = frozenset({301, 302, 303, 307, 308})
IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS"})


class _ClosedUnanswered(Exception):
    """The connection ended (EOF or reset) before a byte of the answer."""


class InvalidUrl(ValueError):
    """A URL this client cannot request (not http or https, no host, a bad port)."""


@dataclass(frozen=True)
class Route:
    """Where a request's connection goes: the origin, and the proxy on the way."""

    scheme: str
    host: str
    port: int
    proxy: tuple[str, int, str | None] | None  # host, port, Proxy-Authorization

    @classmethod
    def of(cls, url: urllib.parse.SplitResult) -> Route:
        try:
            port = url.port
        except ValueError as exc:
            raise InvalidUrl(f"{url.geturl()}: {exc}") from None
        if url.scheme not in ("http", "https") or not url.hostname:
            raise InvalidUrl(f"not an http(s) URL: {url.geturl()}")
        default = 443 if url.scheme == "https" else 80
        return cls(url.scheme, url.hostname, port or default, _proxy(url))


def _proxy(url: urllib.parse.SplitResult) -> tuple[str, int, str | None] | None:
    """The proxy the environment names for ``url`` (``HTTPS_PROXY``,
    ``HTTP_PROXY``, ``ALL_PROXY``, less ``NO_PROXY``), as ``httpx2`` reads them."""
    proxies = urllib.request.getproxies()
    proxy = proxies.get(url.scheme) or proxies.get("all")
    # The host alone (so "::1" matches "[::1]:8080") or with its port (so an
    # entry with a port matches too).
    if (
        not proxy
        or urllib.request.proxy_bypass(url.hostname or "")
        or urllib.request.proxy_bypass(url.netloc.rpartition("@")[2])
    ):
        return None
    parsed = urllib.parse.urlsplit(proxy if "://" in proxy else "http://" + proxy)
    if parsed.scheme != "http" or not parsed.hostname:
        raise InvalidUrl(f"only http:// proxies are supported, not {proxy}")
    credentials = None
    if parsed.username is not None:
        user, password = parsed.username, parsed.password or ""
        pair = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}"
        credentials = "Basic " + base64.b64encode(pair.encode()).decode()
    return parsed.hostname, parsed.port or 80, credentials


class Connection:
    """One open HTTP/1.1 connection."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, route: Route
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.route = route
        self.idle_since = 0.0
        self.reused = False

    def reusable(self) -> bool:
        """Still open, nothing unread, not idle too long."""
        return (
            not self.writer.is_closing()
            and not self.reader.at_eof()
            # Bytes that came while it was idle belong to no request (httpcore
            # checks the same by asking whether the socket is readable; here
            # the event loop has already read them into the reader's buffer).
            and not getattr(self.reader, "_buffer", None)
            and time.monotonic() - self.idle_since < KEEPALIVE_EXPIRY
        )

    def close(self) -> None:
        self.writer.close()


class HttpResponse:
    """A response whose body is read on demand (``aiter_bytes`` or ``aread``)."""

    def __init__(
        self,
        client: HttpClient,
        connection: Connection,
        method: str,
        url: str,
        head: tuple[int, str, dict[str, str]],
    ) -> None:
        self.method = method
        self.url = url
        self.status_code, self.reason_phrase, self.headers = head
        self._client = client
        self._connection: Connection | None = connection
        self._content: bytes | None = None

    @property
    def bodiless(self) -> bool:
        """An answer that has no body whatever its headers say."""
        return self.status_code in (204, 304) or self.method == "HEAD"

    @property
    def keepable(self) -> bool:
        """Whether its connection can serve another request once the body is
        read: the body's end is known (not the connection's close), and the
        server did not say it closes."""
        framed = self.bodiless or "chunked" in self.headers.get("transfer-encoding", "").lower()
        framed = framed or "content-length" in self.headers
        return framed and self.headers.get("connection", "").lower() != "close"

    async def aiter_bytes(self) -> AsyncGenerator[bytes, None]:
        """The body, decoded, in the pieces the network delivers it."""
        if self._content is not None:
            yield self._content
            return
        connection = self._connection
        if connection is None:
            raise RemoteProtocolError("the response was closed before its body was read")
        if self.bodiless:
            self._end(connection)
            return
        pieces = body_pieces(connection.reader, self.headers, self._client.timeout)
        unpack = decoder(self.headers.get("content-encoding", ""))
        try:
            async for piece in pieces:
                if unpack is None:
                    yield piece
                elif data := unpack.decompress(piece):
                    yield data
            if unpack is not None and (rest := unpack.flush()):
                yield rest
            if unpack is not None and not unpack.eof:
                # The body ended inside the compressed stream (no gzip trailer).
                raise RemoteProtocolError("a compressed body that was cut short")
        except zlib.error as exc:
            raise RemoteProtocolError(f"a body that does not decompress: {exc}") from None
        self._end(connection)

    async def aread(self, limit: int | None = None) -> bytes:
        """The whole body (read once, then kept); with ``limit``, at most that
        many bytes of it (an error page of megabytes is not kept whole)."""
        if self._content is None:
            pieces: list[bytes] = []
            size = 0
            async with contextlib.aclosing(self.aiter_bytes()) as body:
                async for piece in body:
                    pieces.append(piece)
                    size += len(piece)
                    if limit is not None and size >= limit:
                        break  # the rest is never read: aclose() closes the connection
            self._content = b"".join(pieces)[:limit]
        return self._content

    @property
    def text(self) -> str:
        """The body read so far, as text."""
        return (self._content or b"").decode("utf-8", "replace")

    def json(self) -> object:
        """The body read so far, parsed (``ValueError`` if it is not JSON)."""
        import json

        return json.loads(self._content or b"")

    async def aclose(self) -> None:
        """Done with the response: a connection whose body was not read to its
        end is closed (its rest would be the next response's start)."""
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()

    def _end(self, connection: Connection) -> None:
        self._connection = None
        if self.keepable:
            self._client.release(connection)
        else:
            connection.close()


class HttpClient:
    """Pooled HTTP/1.1 connections for one API: fixed headers, a read/write
    ``timeout`` and a ``connect_timeout`` (seconds)."""

    def __init__(
        self,
        headers: Mapping[str, str],
        *,
        timeout: float,
        connect_timeout: float,
        tls: ssl.SSLContext | None,
        follow_redirects: bool,
        fuller_tls: Callable[[], ssl.SSLContext] | None = None,
    ) -> None:
        for name, value in headers.items():
            if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
                raise InvalidUrl(f"the header {name!r} has a line break in it")
        self.headers = {"accept-encoding": "gzip, deflate", **headers}
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.tls = tls
        # Builds the context to verify with once ``tls`` has failed to.
        self.fuller_tls = fuller_tls
        self._fuller_lock = asyncio.Lock()
        self.follow_redirects = follow_redirects
        self._idle: list[Connection] = []
        self._closed = False

    async def send(self, method: str, url: str, content: bytes | None) -> HttpResponse:
        """Send a request and return once its status and headers are in."""
        headers = dict(self.headers)
        for _hop in range(MAX_REDIRECTS + 1):
            parts = urllib.parse.urlsplit(url)
            response = await self._send_once(method, parts, headers, content)
            location = response.headers.get("location")
            if not (self.follow_redirects and response.status_code in REDIRECTS and location):
                return response
            try:
                await response.aread()
            finally:
                await response.aclose()
            target = urllib.parse.urlsplit(urllib.parse.urljoin(url, location))
            if target.scheme != "https":
                return response  # never from https to plain http
            if (target.hostname, target.port) != (parts.hostname, parts.port):
                headers.pop("authorization", None)
                headers.pop("x-api-key", None)
            if response.status_code == 303 or (
                response.status_code in (301, 302) and method == "POST"
            ):
                method, content = "GET", None
            url = target.geturl()
        raise RemoteProtocolError(f"more than {MAX_REDIRECTS} redirects from {url}")

    def release(self, connection: Connection) -> None:
        """Keep a connection whose response was read to its end for the next request."""
        if self._closed or len(self._idle) >= MAX_IDLE or connection.writer.is_closing():
            connection.close()
            return
        connection.idle_since = time.monotonic()
        connection.reused = True
        self._idle.append(connection)

    async def aclose(self) -> None:
        """Close the idle connections, and each busy one once its response ends."""
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    async def _send_once(
        self,
        method: str,
        url: urllib.parse.SplitResult,
        headers: dict[str, str],
        content: bytes | None,
    ) -> HttpResponse:
        route = Route.of(url)
        request = _request_bytes(method, url, route, headers, content)
        connection = self._take(route) or await self._connect(route)
        try:
            return await self._exchange(connection, method, url, request)
        except _ClosedUnanswered:
            if not connection.reused or method not in IDEMPOTENT:
                raise RemoteProtocolError("the server closed the connection unanswered") from None
        # A kept connection that the server closed as it went idle, just as the
        # request was sent: an idempotent request goes once more, on a new
        # connection, as Go's client does. A model call (a POST) is not sent
        # again here: the provider's retries decide, as they did with httpx2.
        connection = await self._connect(route)
        try:
            return await self._exchange(connection, method, url, request)
        except _ClosedUnanswered:
            raise RemoteProtocolError("the server closed the connection unanswered") from None

    async def _exchange(
        self, connection: Connection, method: str, url: urllib.parse.SplitResult, request: bytes
    ) -> HttpResponse:
        try:
            connection.writer.write(request)
            async with asyncio.timeout(self.timeout):
                await connection.writer.drain()
                head = await _read_head(connection.reader)
        except BaseException as exc:
            connection.close()
            nothing = isinstance(exc, asyncio.IncompleteReadError) and not exc.partial
            if nothing or isinstance(exc, ConnectionResetError | BrokenPipeError):
                raise _ClosedUnanswered from None
            if isinstance(exc, asyncio.IncompleteReadError):
                raise RemoteProtocolError("the server closed the connection mid-answer") from None
            raise
        return HttpResponse(self, connection, method, url.geturl(), head)

    def _take(self, route: Route) -> Connection | None:
        while self._idle:
            connection = self._idle.pop()
            if connection.route == route and connection.reusable():
                return connection
            connection.close()
        return None

    async def _connect(self, route: Route) -> Connection:
        tls = self.tls
        try:
            return await self._open(route, tls)
        except ssl.SSLCertVerificationError as failure:
            fuller = await self._fuller(tls, failure)
        return await self._open(route, fuller)

    async def _fuller(
        self, used: ssl.SSLContext | None, failure: ssl.SSLCertVerificationError
    ) -> ssl.SSLContext:
        """The context to try again with after ``used`` did not verify a server:
        the quick trust (providers/http_tls.py) gives way to the full one, which
        loads every root the system has, built once however many connects
        failed; ``failure`` is raised if there is nothing fuller."""
        async with self._fuller_lock:
            if self.tls is used:
                if self.fuller_tls is None:
                    raise failure
                try:
                    self.tls = await asyncio.to_thread(self.fuller_tls)
                except Exception as exc:
                    raise failure from exc
                self.fuller_tls = None
        assert self.tls is not None
        return self.tls

    async def _open(self, route: Route, tls: ssl.SSLContext | None) -> Connection:
        secure = route.scheme == "https"
        if secure and tls is None:
            raise InvalidUrl("an https URL on a client built for plain http")
        host, port = (route.proxy[0], route.proxy[1]) if route.proxy else (route.host, route.port)
        async with asyncio.timeout(self.connect_timeout):
            if route.proxy is None or not secure:
                reader, writer = await asyncio.open_connection(
                    host,
                    port,
                    ssl=tls if secure else None,
                    server_hostname=route.host if secure else None,
                    limit=MAX_HEAD,
                )
            else:
                reader, writer = await asyncio.open_connection(host, port, limit=MAX_HEAD)
                try:
                    await _tunnel(reader, writer, route)
                    await writer.start_tls(tls, server_hostname=route.host)  # type: ignore[arg-type]
                except BaseException:
                    writer.close()
                    raise
        return Connection(reader, writer, route)


async def _tunnel(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, route: Route) -> None:
    """Ask an HTTP proxy for a tunnel to the origin (``CONNECT``)."""
    assert route.proxy is not None
    host = route.host if route.host.isascii() else route.host.encode("idna").decode("ascii")
    authority = f"{_bracketed(host)}:{route.port}"
    lines = [f"CONNECT {authority} HTTP/1.1", f"host: {authority}"]
    if route.proxy[2]:
        lines.append(f"proxy-authorization: {route.proxy[2]}")
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    try:
        status, reason, _headers = await _read_head(reader)
    except asyncio.IncompleteReadError:
        raise RemoteProtocolError("the proxy closed the connection") from None
    if not 200 <= status < 300:
        writer.close()
        raise RemoteProtocolError(f"the proxy refused the tunnel: {status} {reason}")


def _digits(text: str) -> bool:
    """ASCII digits only (``str.isdigit`` also takes "²")."""
    return text.isascii() and text.isdigit()


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _request_bytes(
    method: str,
    url: urllib.parse.SplitResult,
    route: Route,
    headers: Mapping[str, str],
    content: bytes | None,
) -> bytes:
    # As httpx2 sends them: a path and query percent-encoded where they are not
    # ASCII or hold a space, an international host name in its IDNA form.
    path = urllib.parse.quote(url.path or "/", safe=PATH_SAFE) + (
        "?" + urllib.parse.quote(url.query, safe=QUERY_SAFE) if url.query else ""
    )
    authority = url.netloc.rpartition("@")[2]
    if not authority.isascii():
        authority = authority.encode("idna").decode("ascii")
    plain_proxy = route.proxy is not None and route.scheme == "http"
    target = f"http://{authority}{path}" if plain_proxy else path
    lines = [f"{method} {target} HTTP/1.1", f"host: {authority}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if plain_proxy and route.proxy is not None and route.proxy[2]:
        lines.append(f"proxy-authorization: {route.proxy[2]}")
    if content is not None:
        lines.append(f"content-length: {len(content)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (content or b"")


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, str, dict[str, str]]:
    """Status, reason and headers (names lower-cased, repeats joined with ", "),
    skipping informational (1xx) answers."""
    informed = False  # an informational answer came: the server has answered
    while True:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            raise RemoteProtocolError("the response's headers are too long") from None
        except asyncio.IncompleteReadError:
            if informed:
                raise RemoteProtocolError("the server closed the connection mid-answer") from None
            raise
        status_line, *lines = head[:-4].decode("latin-1").split("\r\n")
        version, _, rest = status_line.partition(" ")
        code, _, reason = rest.partition(" ")
        if not version.startswith("HTTP/1.") or not _digits(code) or len(code) != 3:
            raise RemoteProtocolError(f"not an HTTP/1.1 answer: {status_line[:80]!r}")
        status = int(code)
        if 100 <= status < 200:
            informed = True
            continue
        headers: dict[str, str] = {}
        for line in lines:
            name, colon, value = line.partition(":")
            if not colon or not name or name != name.strip():
                raise RemoteProtocolError(f"a bad header line: {line[:80]!r}")
            key, value = name.lower(), value.strip()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        if version == "HTTP/1.0" and headers.get("connection", "").lower() != "keep-alive":
            headers["connection"] = "close"
        return status, reason, headers


__all__ = ["HttpClient", "HttpResponse", "InvalidUrl", "RemoteProtocolError"]
