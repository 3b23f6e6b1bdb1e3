"""The WebSocket listener's options and the checks made before anything is
bound: light to import (no ``websockets``, no event loop), so the command line
and the early answer (:mod:`appserver.transport.early_ws`) use them before the
WebSocket library loads."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from appserver.transport.base import ListenerError

DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024
# How long a peer has to read our close frame and answer it before its TCP
# connection is dropped. Long enough for a client that merely paused (or lags
# a few MB behind) to still learn why it was closed; short enough that a peer
# that never reads again holds a socket only briefly.
DEFAULT_CLOSE_TIMEOUT = 5.0
WS_PATH = "/ws"
# Upgrades are accepted on both: clients and READMEs write ws://HOST:PORT.
WS_PATHS = frozenset({WS_PATH, "/"})


def names_this_machine(authority: str | None, listen_host: str = "") -> bool:
    """Whether a ``Host`` header (``HOST[:PORT]``) names this machine as a
    browser cannot be tricked into naming it: ``localhost``, an IP literal or
    the address listened on; any other name may have been re-pointed here
    (DNS rebinding)."""
    try:
        name = urlsplit(f"http://{authority}").hostname if authority else None
    except ValueError:
        return False
    if not name:
        return False
    if name in ("localhost", listen_host.lower().strip("[]")):
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class ListenerOptions:
    """How the WebSocket listener admits connections."""

    host: str = "127.0.0.1"
    port: int = 9100
    token: str | None = None
    allowed_origins: Sequence[str] = field(default_factory=tuple)
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    ping_interval: float = 30.0
    ping_timeout: float = 10.0
    close_timeout: float = DEFAULT_CLOSE_TIMEOUT
    # Serve the browser client (appserver/web/) on plain GETs of / and /assets/.
    web_client: bool = True

    @property
    def ip_literal(self) -> bool:
        """Whether ``host`` is one address (not a name that may resolve to several)."""
        try:
            ipaddress.ip_address(self.host)
        except ValueError:
            return False
        return True


def endpoint(options: ListenerOptions, port: int) -> str:
    """The listener's URL, as the server announces it (``port``: the one bound;
    an IPv6 address in brackets, as URLs write it)."""
    host = f"[{options.host}]" if ":" in options.host else options.host
    return f"ws://{host}:{port}{WS_PATH}"


# A token that guards a listener other hosts can reach: at least this long (the
# lockout lets ~20 guesses a second through; secrets.token_urlsafe(32) gives 43).
MIN_NETWORK_TOKEN = 16


def check_options(options: ListenerOptions) -> None:
    """Raise :class:`ListenerError` for options the listener refuses: a token
    that is empty (``--token ''`` would otherwise mean none at all), one shorter
    than :data:`MIN_NETWORK_TOKEN` on a non-loopback address or none there, and
    ``null`` as an allowed origin (every sandboxed frame and ``data:`` page sends it)."""
    if options.token is not None and not options.token.strip():
        raise ListenerError("the token is empty: give one, or no --token at all")
    if not is_loopback(options.host):
        if not options.token:
            raise ListenerError(
                f"refusing to listen on non-loopback address {options.host!r} without a token "
                "(pass --token or set APPSERVER_TOKEN)"
            )
        if len(options.token) < MIN_NETWORK_TOKEN:
            raise ListenerError(
                f"refusing a token of {len(options.token)} characters on non-loopback address "
                f"{options.host!r}: use at least {MIN_NETWORK_TOKEN} (docs/websocket.md shows "
                "how to make one)"
            )
    if any(origin.strip().lower() == "null" for origin in options.allowed_origins):
        raise ListenerError(
            "refusing --allow-origin null: every sandboxed frame and data: page sends that origin"
        )
