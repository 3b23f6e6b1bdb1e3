"""SSRF-safe fetching of ``image`` input URLs: http(s) only, public addresses
only (checked at connect time, so DNS rebinding cannot get past), a timeout
and a size cap."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from typing import Any

import anyio
import httpcore2 as httpcore
import httpx2 as httpx


class FetchRefused(Exception):
    """The URL was not fetched (scheme, address, status, size or timeout)."""


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


async def fetch_public(
    url: str, *, timeout: float, max_bytes: int, allow_private: bool = False
) -> bytes:
    """GET ``url`` (http/https) within ``timeout`` seconds and ``max_bytes``;
    no private targets unless ``allow_private``."""
    parsed = httpx.URL(url)
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise FetchRefused("only http and https URLs are fetched")
    transport = httpx.AsyncHTTPTransport() if allow_private else _PublicTransport()
    try:
        async with httpx.AsyncClient(
            transport=transport, timeout=timeout, follow_redirects=True, max_redirects=3
        ) as client:
            with anyio.fail_after(timeout):
                async with client.stream("GET", url) as response:
                    if response.status_code != 200:
                        raise FetchRefused(f"HTTP {response.status_code}")
                    data = bytearray()
                    async for chunk in response.aiter_bytes():
                        data += chunk
                        if len(data) > max_bytes:
                            raise FetchRefused("image larger than the size cap")
                    return bytes(data)
    except (httpx.HTTPError, TimeoutError, OSError) as exc:
        raise FetchRefused(str(exc) or type(exc).__name__) from exc


class _PublicTransport(httpx.AsyncHTTPTransport):
    def __init__(self) -> None:
        super().__init__()
        self._pool = httpcore.AsyncConnectionPool(network_backend=_PublicOnlyBackend())
