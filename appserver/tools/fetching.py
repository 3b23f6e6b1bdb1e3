"""SSRF-safe fetching of http(s) URLs, for ``image`` input parts
(``runtime.inputs``) and the ``web_fetch`` tool: http(s) only, public
addresses only (checked at connect time, so DNS rebinding cannot get past;
redirects are checked the same way), a timeout and a size cap.

It lives with the tools because both the tools and the runtime use it (the
layers let the runtime import the tools, not the other way round).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import anyio
import httpcore2 as httpcore
import httpx2 as httpx


class FetchRefused(Exception):
    """The URL was not fetched (scheme, address, status, size or timeout)."""


class CrossOriginRedirect(FetchRefused):
    """A redirect led to another origin, and the fetch was limited to its own."""

    def __init__(self, location: str) -> None:
        super().__init__(f"redirected to another origin: {location}")
        self.location = location


@dataclass(frozen=True)
class Fetched:
    """What a GET brought back."""

    url: str  # after redirects
    content_type: str  # the media type, lower-cased, without parameters ("" if none)
    charset: str | None  # from the Content-Type header
    data: bytes
    cut: bool  # the body was longer than the cap; ``data`` is its start


def _is_public(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


class _PublicOnlyBackend(httpcore.AsyncNetworkBackend):
    """Resolves the host itself and connects only to public addresses."""

    def __init__(self) -> None:
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        addresses = [str(info[4][0]) for info in infos]
        if not addresses or not all(_is_public(address) for address in addresses):
            raise httpcore.ConnectError(f"refusing non-public address for {host}")
        return await self._inner.connect_tcp(
            addresses[0], port, timeout, local_address, socket_options
        )

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are not allowed")

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


def check_url(url: str) -> httpx.URL:
    """``url`` parsed; :class:`FetchRefused` unless it is an http(s) URL with a host."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise FetchRefused(f"not a valid URL: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise FetchRefused("only http and https URLs are fetched")
    return parsed


async def fetch_public(
    url: str,
    *,
    timeout: float,
    max_bytes: int,
    allow_private: bool = False,
    cut_at_cap: bool = False,
    same_origin: bool = False,
    headers: dict[str, str] | None = None,
) -> Fetched:
    """GET ``url`` (http/https) within ``timeout`` seconds and ``max_bytes``.

    No private, loopback or link-local targets unless ``allow_private`` (a
    seam for tests with a local server, set by a constructor argument, never
    read from the environment). A body past ``max_bytes`` is refused, or with
    ``cut_at_cap`` kept up to the cap with ``cut`` set. With ``same_origin``
    a redirect to another scheme, host or port raises
    :class:`CrossOriginRedirect` instead of being followed (what was
    approved was the URL's origin)."""
    origin = check_url(url).origin
    hooks: dict[str, list[Any]] = {}
    if same_origin:

        async def check_origin(request: httpx.Request) -> None:
            if request.url.origin != origin:
                raise CrossOriginRedirect(str(request.url))

        hooks["request"] = [check_origin]
    transport = httpx.AsyncHTTPTransport() if allow_private else _PublicTransport()
    try:
        async with httpx.AsyncClient(
            transport=transport,
            timeout=timeout,
            follow_redirects=True,
            max_redirects=3,
            headers=headers,
            event_hooks=hooks,
        ) as client:
            with anyio.fail_after(timeout):
                async with client.stream("GET", url) as response:
                    if response.status_code != 200:
                        raise FetchRefused(f"HTTP {response.status_code}")
                    data = bytearray()
                    cut = False
                    async for chunk in response.aiter_bytes():
                        data += chunk
                        if len(data) > max_bytes:
                            if not cut_at_cap:
                                raise FetchRefused(f"larger than the size cap ({max_bytes} bytes)")
                            del data[max_bytes:]
                            cut = True
                            break
                    media_type = response.headers.get("content-type", "").split(";")[0]
                    return Fetched(
                        url=str(response.url),
                        content_type=media_type.strip().lower(),
                        charset=response.charset_encoding,
                        data=bytes(data),
                        cut=cut,
                    )
    except (httpx.HTTPError, TimeoutError, OSError) as exc:
        raise FetchRefused(str(exc) or type(exc).__name__) from exc


class _PublicTransport(httpx.AsyncHTTPTransport):
    def __init__(self) -> None:
        super().__init__()
        self._pool = httpcore.AsyncConnectionPool(network_backend=_PublicOnlyBackend())
