"""Token guessing on the WebSocket listener, slowed down (:class:`TokenLockout`).

Two limits: per peer (:func:`peer_key`: one IPv4 address, one IPv6 /64, and
the whole loopback range as one peer), and a ceiling on failed upgrades per
second from everyone together, so a guesser with many addresses gains nothing
past it.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("appserver.websocket")

LOOPBACK = "loopback"  # the peer key of 127.0.0.0/8, ::1 and ::ffff:127.0.0.0/104
# Failed upgrades per second (all peers together) past which every upgrade is
# refused with 429, without its token being looked at, until the rate falls.
MAX_FAILURES_PER_SECOND = 20


def peer_key(remote_address: Any) -> str:
    """The address failed tokens are counted against.

    The IP for IPv4; the /64 network for IPv6, since one host usually holds a
    whole /64 and could otherwise take a fresh address for every guess. Every
    loopback address (``127.0.0.0/8``, ``::1``, ``::ffff:127.x.y.z``) is one
    peer, :data:`LOOPBACK`: a local process can connect from any of them.
    """
    host = str(remote_address[0]) if isinstance(remote_address, tuple) and remote_address else ""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])  # without an IPv6 zone
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback:
        return LOOPBACK
    if isinstance(address, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


@dataclass
class _Failures:
    """Wrong tokens from one address."""

    count: int = 0
    last: float = 0.0  # when the latest one came
    lockout: float = 0.0  # length of the latest lockout; 0 before the first
    locked_until: float = 0.0


class TokenLockout:
    """Slows down token guessing, per peer (see :func:`peer_key`) and overall.

    After ``max_failures`` wrong tokens (each within ``window`` seconds of the
    previous one) the address is refused for ``first_lockout`` seconds, without
    its token being looked at; each wrong token after a lockout expires starts
    the next one, twice as long, up to ``max_lockout``. A correct token forgets
    the address, and so does ``window`` seconds of quiet after its last failure
    or lockout. At most ``max_addresses`` addresses are remembered (the least
    recently failing is forgotten first), so a flood of them costs bounded
    memory.

    Overall: once ``max_failures_per_second`` wrong tokens came within one
    second (from any peers), every address is refused until the oldest of them
    is a second old, so at most that many tokens are compared and found wrong
    per second, however many addresses the guesser has.
    """

    def __init__(
        self,
        *,
        max_failures: int = 5,
        window: float = 60.0,
        first_lockout: float = 1.0,
        max_lockout: float = 60.0,
        max_addresses: int = 10_000,
        max_failures_per_second: int = MAX_FAILURES_PER_SECOND,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_failures = max_failures
        self.window = window
        self.first_lockout = first_lockout
        self.max_lockout = max_lockout
        self.max_addresses = max_addresses
        self._clock = clock
        self._records: OrderedDict[str, _Failures] = OrderedDict()
        # When the latest failures came (any peer); full and a second young: the ceiling.
        self._recent: deque[float] = deque(maxlen=max(1, max_failures_per_second))
        self._ceiling_logged = False

    def __len__(self) -> int:
        return len(self._records)

    def _overall_wait(self, now: float) -> float | None:
        recent = self._recent
        if len(recent) < (recent.maxlen or 1):
            return None
        remaining = recent[0] + 1.0 - now
        if remaining <= 0:
            self._ceiling_logged = False
            return None
        if not self._ceiling_logged:
            self._ceiling_logged = True
            log.warning(
                "over %d failed WebSocket upgrades per second: refusing every upgrade for now",
                recent.maxlen,
            )
        return remaining

    def retry_after(self, address: str) -> float | None:
        """Seconds until ``address`` may offer a token again; ``None`` if now."""
        now = self._clock()
        overall = self._overall_wait(now)
        record = self._records.get(address)
        remaining = record.locked_until - now if record is not None else 0.0
        if overall is not None and overall > remaining:
            return overall
        return remaining if remaining > 0 else None

    def failed(self, address: str) -> float | None:
        """Count a wrong token from ``address``; the lockout it starts, if any."""
        now = self._clock()
        self._recent.append(now)
        record = self._records.pop(address, None)
        if record is None or now - max(record.last, record.locked_until) > self.window:
            record = _Failures()
        record.count += 1
        record.last = now
        self._records[address] = record  # most recent last: eviction takes the front
        while len(self._records) > self.max_addresses:
            self._records.popitem(last=False)
        if record.count < self.max_failures:
            return None
        longer = 2 * record.lockout if record.lockout else self.first_lockout
        record.lockout = min(longer, self.max_lockout)
        record.locked_until = now + record.lockout
        return record.lockout

    def succeeded(self, address: str) -> None:
        """A correct token from ``address``: forget its failures."""
        self._records.pop(address, None)
