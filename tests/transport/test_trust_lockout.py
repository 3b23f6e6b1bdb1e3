"""Token guessing cannot be spread over addresses.

Every 127.0.0.0/8 address used to be a peer of its own: 150 loopback addresses
made 600 guesses in half a second without a 429. All of loopback is one peer
now, and failed upgrades from everyone together are capped per second.
"""

from __future__ import annotations

from websockets.datastructures import Headers
from websockets.http11 import Request

from appserver.transport.listen_options import ListenerOptions
from appserver.transport.lockout import LOOPBACK, MAX_FAILURES_PER_SECOND, TokenLockout, peer_key
from appserver.transport.websocket import Admission
from tests.transport.test_websocket_throttle import (
    TOKEN,
    FakeClock,
    attempt,
    from_address,
    listener,
)


async def test_every_loopback_address_is_one_peer() -> None:
    clock = FakeClock()  # frozen: no lockout expires during the test
    async with listener(clock) as url:
        port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
        statuses = []
        for last in range(2, 32):
            sock = from_address(f"127.0.0.{last}")
            sock.connect(("127.0.0.1", port))
            statuses.append((await attempt(url, "wrong", sock=sock))[0])
        assert statuses == [401] * 5 + [429] * 25
        # The right token from yet another loopback address is not even compared.
        sock = from_address("127.1.2.3")
        sock.connect(("127.0.0.1", port))
        assert await attempt(url, TOKEN, sock=sock) == (429, "1")
        clock.advance(1)
        assert await attempt(url, TOKEN) == (101, None)


def test_loopback_in_every_spelling_is_one_key() -> None:
    for host in ("127.0.0.1", "127.0.0.2", "127.255.255.254", "::1", "::ffff:127.0.0.9"):
        assert peer_key((host, 1)) == LOOPBACK, host
    assert peer_key(("192.0.2.1", 1)) == "192.0.2.1"
    assert peer_key(("::ffff:192.0.2.1", 1, 0, 0)) == "192.0.2.1"
    assert peer_key(("2001:db8::1", 1, 0, 0)) == "2001:db8::/64"  # IPv6: per /64, as before


def test_failures_from_many_peers_hit_the_overall_ceiling() -> None:
    clock = FakeClock()
    lockout = TokenLockout(clock=clock)
    for last in range(1, MAX_FAILURES_PER_SECOND + 1):
        assert lockout.retry_after(f"198.51.100.{last}") is None
        assert lockout.failed(f"198.51.100.{last}") is None  # one guess each: no lockout
    # A fresh address, never seen: refused until the rate falls.
    assert lockout.retry_after("203.0.113.7") == 1.0
    clock.advance(0.75)
    assert lockout.retry_after("203.0.113.7") == 0.25
    clock.advance(0.25)
    assert lockout.retry_after("203.0.113.7") is None
    # Spread evenly under the ceiling, guessing goes on (one peer at a time).
    for last in range(1, 41):
        clock.advance(1 / (MAX_FAILURES_PER_SECOND - 1))
        assert lockout.retry_after(f"203.0.113.{last}") is None
        lockout.failed(f"203.0.113.{last}")


class _Connection:
    """What :class:`Admission` reads of a connection: its peer address."""

    def __init__(self, host: str) -> None:
        self.remote_address = (host, 40000)


def _upgrade(token: str) -> Request:
    return Request(
        f"/ws?token={token}",
        Headers([("Host", "127.0.0.1:9100"), ("Upgrade", "websocket"), ("Connection", "Upgrade")]),
    )


def test_the_listener_answers_429_past_the_ceiling() -> None:
    clock = FakeClock()
    admission = Admission(ListenerOptions(token=TOKEN, web_client=False), lambda: True, clock)
    statuses = []
    for last in range(1, 31):
        response = admission(_Connection(f"198.51.100.{last}"), _upgrade("wrong"))  # type: ignore[arg-type]
        assert response is not None
        statuses.append(response.status_code)
    assert statuses == [401] * MAX_FAILURES_PER_SECOND + [429] * (30 - MAX_FAILURES_PER_SECOND)
    # The right token is refused too while the ceiling holds (it is not compared).
    refused = admission(_Connection("203.0.113.1"), _upgrade(TOKEN))  # type: ignore[arg-type]
    assert refused is not None and refused.status_code == 429
    assert refused.headers["Retry-After"] == "1"
    clock.advance(1)
    assert admission(_Connection("203.0.113.1"), _upgrade(TOKEN)) is None  # type: ignore[arg-type]
