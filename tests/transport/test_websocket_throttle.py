"""Token guessing is slowed down per peer address (``TokenLockout``).

The listener tests run a real listener and real WebSocket clients, with a
fake clock so lockouts can expire without waiting.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from appserver.transport.listen_options import ListenerOptions
from appserver.transport.lockout import TokenLockout, peer_key
from appserver.transport.websocket import WebSocketTransport, bound_port, start_listener

TOKEN = "s3cret-Token_1.x"


class FakeClock:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@asynccontextmanager
async def listener(clock: FakeClock) -> AsyncIterator[str]:
    """A listener with a token; an admitted client is closed at once. Yields its URL."""

    async def on_connection(transport: WebSocketTransport) -> None:
        await transport.close()

    options = ListenerOptions(host="127.0.0.1", port=0, token=TOKEN)
    server = await start_listener(options, on_connection, lambda: True, clock=clock)
    try:
        yield f"ws://127.0.0.1:{bound_port(server)}/ws"
    finally:
        server.close()
        with anyio.fail_after(5):
            await server.wait_closed()


async def attempt(url: str, token: str, **connect_args: Any) -> tuple[int, str | None]:
    """Offer ``token``: the HTTP status (101 when admitted) and any Retry-After."""
    try:
        with anyio.fail_after(5):
            async with connect(f"{url}?token={token}", **connect_args):
                return 101, None
    except InvalidStatus as refused:
        response = refused.response
        return response.status_code, response.headers.get("Retry-After")


async def fail(url: str, times: int, **connect_args: Any) -> None:
    for _ in range(times):
        assert await attempt(url, "wrong", **connect_args) == (401, None)


def from_address(host: str) -> socket.socket:
    """A socket that connects from ``host`` (another loopback address)."""
    sock = socket.socket()
    try:
        sock.bind((host, 0))
    except OSError:
        sock.close()
        pytest.skip(f"cannot bind {host} on this machine")
    return sock


async def test_wrong_tokens_lock_the_address_out_until_the_lockout_expires() -> None:
    clock = FakeClock()
    async with listener(clock) as url:
        await fail(url, 5)
        assert await attempt(url, "wrong") == (429, "1")
        # Locked out means not compared at all: the right token is refused too.
        assert await attempt(url, TOKEN) == (429, "1")
        clock.advance(0.5)
        assert await attempt(url, TOKEN) == (429, "1")  # rounded up, never "0"
        clock.advance(0.5)
        assert await attempt(url, TOKEN) == (101, None)
        # The right token reset the count: five more wrong ones are compared.
        await fail(url, 5)
        assert await attempt(url, "wrong") == (429, "1")


async def test_the_lockout_doubles_on_each_wrong_token_up_to_a_minute() -> None:
    clock = FakeClock()
    async with listener(clock) as url:
        await fail(url, 5)
        for lockout in (1, 2, 4, 8, 16, 32, 60, 60):
            assert await attempt(url, TOKEN) == (429, str(lockout))
            clock.advance(lockout)
            await fail(url, 1)  # compared again, wrong again: the next, longer lockout
        clock.advance(60)
        assert await attempt(url, TOKEN) == (101, None)


async def test_failures_spread_out_are_forgotten() -> None:
    clock = FakeClock()
    async with listener(clock) as url:
        await fail(url, 4)
        clock.advance(61)  # a quiet minute
        await fail(url, 4)
        assert await attempt(url, TOKEN) == (101, None)


def test_a_locked_out_address_does_not_lock_out_others() -> None:
    # Every client of a test listener is loopback, one peer: other peers are
    # addresses given to the lockout itself.
    clock = FakeClock()
    lockout = TokenLockout(clock=clock)
    for _ in range(5):
        lockout.failed("192.0.2.1")
    assert lockout.retry_after("192.0.2.1") == 1.0
    assert lockout.retry_after("192.0.2.2") is None
    assert lockout.failed("192.0.2.2") is None


def test_tracked_addresses_are_bounded() -> None:
    clock = FakeClock()
    lockout = TokenLockout(max_addresses=3, clock=clock)
    for _ in range(5):
        lockout.failed("10.0.0.1")
    assert lockout.retry_after("10.0.0.1") == 1.0
    for address in ("10.0.0.2", "10.0.0.3", "10.0.0.4"):
        assert lockout.failed(address) is None
    # The least recently failing address was forgotten to make room.
    assert len(lockout) == 3
    assert lockout.retry_after("10.0.0.1") is None


def test_peers_are_counted_per_ip_and_per_ipv6_64() -> None:
    assert peer_key(("192.0.2.1", 50000)) == "192.0.2.1"
    assert peer_key(("::ffff:192.0.2.7", 1, 0, 0)) == "192.0.2.7"
    # One host usually owns a whole /64: its addresses count as one.
    assert peer_key(("2001:db8::1", 1, 0, 0)) == "2001:db8::/64"
    assert peer_key(("2001:db8::ffff:1", 2, 0, 0)) == "2001:db8::/64"
    assert peer_key(("2001:db8:0:1::1", 2, 0, 0)) == "2001:db8:0:1::/64"
    assert peer_key(("fe80::1%eth0", 1, 0, 2)) == "fe80::/64"
    assert peer_key(("::1", 1, 0, 0)) == "loopback"  # see tests/transport/test_trust_lockout.py
    assert peer_key(None) == ""
