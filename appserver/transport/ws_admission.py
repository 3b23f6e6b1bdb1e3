"""The pre-upgrade HTTP checks of the WebSocket listener (:class:`Admission`):
health, path, ``Origin``, the token and its lockout, and the web client's
files for plain GETs. :mod:`appserver.transport.websocket` runs them before
every upgrade."""

from __future__ import annotations

import hmac
import json
import logging
import math
import re
import time
from collections.abc import Callable, Sequence
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from appserver.transport.listen_options import (
    WS_PATH,
    WS_PATHS,
    ListenerOptions,
    is_loopback,
    names_this_machine,
)
from appserver.transport.lockout import TokenLockout, peer_key
from appserver.transport.webclient import WebClient

log = logging.getLogger("appserver.websocket")

# What a Host header may hold to be repeated in a hint: a host name or an
# IP literal, and a port.
_AUTHORITY = re.compile(r"[A-Za-z0-9.\-]+(:[0-9]{1,5})?|\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?")


def _json_response(
    status: HTTPStatus, body: dict[str, Any], extra_headers: Sequence[tuple[str, str]] = ()
) -> Response:
    data = (json.dumps(body) + "\n").encode()
    headers = Headers(
        [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(data))),
            ("Cache-Control", "no-store"),
            *extra_headers,
        ]
    )
    return Response(status.value, status.phrase, headers, data)


def _text_response(status: HTTPStatus, text: str) -> Response:
    data = text.encode()
    headers = Headers(
        [
            ("Content-Type", "text/plain; charset=utf-8"),
            ("Content-Length", str(len(data))),
            ("Cache-Control", "no-store"),
        ]
    )
    return Response(status.value, status.phrase, headers, data)


class Admission:
    """The pre-upgrade HTTP checks (health, path, Origin, token, lockout), and the
    web client's files for plain GETs (:mod:`appserver.transport.webclient`)."""

    def __init__(
        self,
        options: ListenerOptions,
        is_ready: Callable[[], bool],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.options = options
        self.is_ready = is_ready
        self._token = options.token.encode() if options.token else None
        self._origins = {origin.rstrip("/").lower() for origin in options.allowed_origins}
        # The hosts those origins name: a page there addresses us by that name.
        self._hosts = {urlsplit(origin).hostname or "" for origin in self._origins} - {""}
        self.lockout = TokenLockout(clock=clock)
        self.web = (
            WebClient.load(token_required=self._token is not None)
            if options.web_client
            else WebClient({})
        )

    def __call__(self, connection: ServerConnection, request: Request) -> Response | None:
        if getattr(request, "method", "GET") != "GET":
            # Only GETs are served (pages, health, upgrades); a HEAD would get a body.
            return _json_response(
                HTTPStatus.METHOD_NOT_ALLOWED,
                {"error": "only GET is served"},
                (("Allow", "GET"),),
            )
        if len(request.headers.get_all("Host")) != 1:  # HTTP/1.1 answers 400 (RFC 9112 3.2)
            return _json_response(HTTPStatus.BAD_REQUEST, {"error": "one Host header is required"})
        if not self.host_allowed(request):
            return _json_response(HTTPStatus.MISDIRECTED_REQUEST, {"error": "host not served"})
        url = urlsplit(request.path)
        origins = request.headers.get_all("Origin")
        if len(origins) > 1:  # a browser sends one; two is not a page we can trust
            return _json_response(HTTPStatus.FORBIDDEN, {"error": "origin not allowed"})
        origin = origins[0] if origins else None
        if origin is not None and not self.origin_allowed(origin, request):
            return _json_response(HTTPStatus.FORBIDDEN, {"error": "origin not allowed"})
        if url.path == "/healthz":
            return _json_response(HTTPStatus.OK, {"status": "ok"})
        if url.path == "/readyz":
            if self.is_ready():
                return _json_response(HTTPStatus.OK, {"status": "ok"})
            return _json_response(HTTPStatus.SERVICE_UNAVAILABLE, {"status": "starting"})
        upgrade = any("websocket" in value.lower() for value in request.headers.get_all("Upgrade"))
        if url.path == "/" and not upgrade:
            return self.root_page(request)
        if not upgrade and (page := self.web.response(url.path, request, self._host(request))):
            return page
        if url.path not in WS_PATHS:
            return self._not_found(request)
        if not upgrade:
            # Only a real upgrade is a token attempt: a plain GET (what an
            # <img src> on any web page sends) must not count towards a lockout.
            return _json_response(HTTPStatus.UPGRADE_REQUIRED, {"error": "upgrade required"})
        if self._token is not None:
            offered = parse_qs(url.query).get("token", [""])[0] or _bearer(request)
            return self._check_token(self._token, peer_key(connection.remote_address), offered)
        return None

    def host_allowed(self, request: Request) -> bool:
        """Whether a request names this machine in its ``Host``, on a loopback
        listener: ``localhost``, an IP literal, the address we listen on or a
        host named by ``--allow-origin``. A page of ``evil.example`` whose name
        was re-pointed at 127.0.0.1 (DNS rebinding) sends ``Host: evil.example``
        and would otherwise read every plain GET (``/healthz``, the page's
        files) as if it were ours. A listener on another address is reached by
        whatever name its users give it, and needs a token."""
        if not is_loopback(self.options.host):
            return True
        host = self._host(request)
        if host is not None and urlsplit(f"http://{host}").hostname in self._hosts:
            return True
        return names_this_machine(host, self.options.host)

    def origin_allowed(self, origin: str, request: Request) -> bool:
        """Whether a browser page at ``origin`` may use this listener.

        Allowed: the origins given with ``--allow-origin``, and the page this
        listener served itself, ``http://`` + the request's ``Host`` when that
        host is an IP literal, ``localhost`` or the address we listen on. A
        name that merely resolves here is not enough (DNS rebinding: a page of
        ``evil.example`` re-pointed at 127.0.0.1 has a matching ``Host`` and
        ``Origin``); allow such a name explicitly with ``--allow-origin``.
        """
        wanted = origin.rstrip("/").lower()
        if wanted in self._origins:
            return True
        host = self._host(request)
        if host is None or wanted != f"http://{host}".lower():
            return False
        return names_this_machine(host, self.options.host)

    def root_page(self, request: Request) -> Response:
        """A plain GET of ``/`` (a browser, ``curl``): the web client, or where
        the WebSocket endpoint is when it is not served.

        The one place that answers it (WebSocket upgrades of ``/`` are accepted
        like ``/ws``): a page served at ``/`` goes here.
        """
        page = self.web.response("/", request, self._host(request))
        if page is not None:
            return page
        return _text_response(HTTPStatus.UPGRADE_REQUIRED, self._hint(request))

    def _not_found(self, request: Request) -> Response:
        return _text_response(HTTPStatus.NOT_FOUND, f"not found. {self._hint(request)}")

    def _hint(self, request: Request) -> str:
        return (
            "This is an appserver JSON-RPC endpoint: connect a WebSocket client to "
            f"ws://{self._authority(request)}{WS_PATH}\n"
        )

    def _authority(self, request: Request) -> str:
        """``HOST:PORT`` as the client addressed us (its ``Host`` header, when sane)."""
        return self._host(request) or f"{self.options.host}:{self.options.port or 'PORT'}"

    @staticmethod
    def _host(request: Request) -> str | None:
        """The request's ``Host`` header, when it is a sane ``HOST[:PORT]``."""
        hosts = request.headers.get_all("Host")
        host = hosts[0] if len(hosts) == 1 else ""  # none, or an ambiguous pair
        if host and len(host) <= 255 and _AUTHORITY.fullmatch(host):
            return host
        return None

    def _check_token(self, token: bytes, address: str, offered_text: str) -> Response | None:
        # Loopback peers are counted too (all as one): the guesser may be a local process.
        wait = self.lockout.retry_after(address)
        if wait is not None:
            # Refused without a compare: answering a locked-out guess on its
            # merits would let the guessing go on at full speed.
            retry = ("Retry-After", str(max(1, math.ceil(wait))))
            body = {"error": "too many failed token attempts; retry later"}
            return _json_response(HTTPStatus.TOO_MANY_REQUESTS, body, [retry])
        offered = offered_text.encode()
        if hmac.compare_digest(offered, token):
            self.lockout.succeeded(address)
            return None
        lockout = self.lockout.failed(address)
        if lockout is not None:
            log.warning("refusing %s for %gs after repeated wrong tokens", address, lockout)
        return _json_response(HTTPStatus.UNAUTHORIZED, {"error": "unauthorized"})


def _bearer(request: Request) -> str:
    """The token of a single ``Authorization: Bearer TOKEN`` header (what Codex
    clients send), else ``""``."""
    values = request.headers.get_all("Authorization")
    if len(values) != 1:
        return ""
    scheme, _, credentials = values[0].strip().partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" else ""
