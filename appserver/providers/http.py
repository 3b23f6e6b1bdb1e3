"""The HTTP side of the network providers: one pooled client per provider
(:mod:`appserver.providers.http_client`), requests retried the way the
official SDKs retry them, and HTTP failures turned into error kinds.

Why not the SDKs themselves: ``import openai`` takes ~400 ms and ``import
anthropic`` ~900 ms, which every first turn and every one-shot face would
wait for, and their per-chunk typed objects cost more CPU than the rest of the
server's work on a delta. What the providers used from them is here, in
the SDKs' terms (docs/providers.md):

* retries: up to ``max_retries`` more attempts on connection errors, timeouts
  and HTTP 408, 409, 429 and 5xx (and whenever the answer says
  ``x-should-retry: true``; never when it says ``false``), waiting what
  ``retry-after-ms`` / ``retry-after`` ask for (up to 60 s) or else 0.5 s
  doubling up to 8 s, minus up to 25 % jitter;
* error kinds: 401/403 ``auth``, 429 ``rate_limit``, 408 ``timeout``, 5xx
  ``unavailable``, other statuses ``other``, with the API's own error message
  and the URL tried;
* the TLS context is built once per client, only for an ``https`` endpoint,
  and shared by every connection (providers/http_tls.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import threading
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any

import anyio

from appserver.providers._common import transport_error
from appserver.providers.base import ErrorKind

if TYPE_CHECKING:
    from appserver.providers.http_client import HttpClient, HttpResponse

INITIAL_RETRY_DELAY = 0.5
# How long the end of a body may take once its answer is complete (finish_body).
BODY_END_GRACE = 0.05
MAX_RETRY_DELAY = 8.0
MAX_RETRY_AFTER = 60.0
RETRY_STATUSES = frozenset({408, 409, 429})

# ``error.type`` values (Anthropic's; OpenAI's where they differ) and their kinds.
ERROR_TYPES: dict[str, ErrorKind] = {
    "authentication_error": "auth",
    "permission_error": "auth",
    "invalid_api_key": "auth",
    "rate_limit_error": "rate_limit",
    "rate_limit_exceeded": "rate_limit",
    "insufficient_quota": "rate_limit",
    "overloaded_error": "unavailable",
    "api_error": "unavailable",
    "server_error": "unavailable",
    "service_unavailable": "unavailable",
    "timeout_error": "timeout",
}


# An error answer's body is read up to this many bytes, and its message cut to
# this many characters: it ends up in a turn's error (sent and stored, maybe
# several times), and a proxy's error page can be megabytes of HTML.
ERROR_BODY_BYTES = 64 * 1024
ERROR_MESSAGE_CHARS = 2000


class ApiError(Exception):
    """A model API call that failed; ``kind`` is what turns and faces report."""

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind
        self.message = message


class ApiStatusError(ApiError):
    """The API answered with an HTTP error status."""

    def __init__(self, status: int, body: Any, kind: ErrorKind, message: str) -> None:
        super().__init__(kind, message)
        self.status = status
        self.body = body


def status_kind(status: int) -> ErrorKind:
    """The error kind of an HTTP error status."""
    if status in (401, 403):
        return "auth"
    if status == 429:
        return "rate_limit"
    if status == 408:
        return "timeout"
    if status >= 500:
        return "unavailable"
    return "other"


def api_message(body: Any) -> str | None:
    """The human message in an error body (``{"error": {"message": ...}}`` for
    both APIs; some compatible servers put ``message`` at the top level)."""
    if not isinstance(body, dict):
        return None
    error = body.get("error")
    for holder in (error, body):
        if isinstance(holder, dict) and isinstance(holder.get("message"), str):
            return str(holder["message"])
    return error if isinstance(error, str) else None


def retry_delay(attempt: int, headers: Mapping[str, str] | None) -> float:
    """Seconds to wait before retry number ``attempt`` (1-based)."""
    if headers is not None:
        asked = _retry_after(headers)
        if asked is not None and 0 <= asked <= MAX_RETRY_AFTER:
            return asked
    delay: float = min(INITIAL_RETRY_DELAY * 2.0 ** (attempt - 1), MAX_RETRY_DELAY)
    return delay * (1 - 0.25 * random.random())


def _retry_after(headers: Mapping[str, str]) -> float | None:
    milliseconds = headers.get("retry-after-ms")
    if milliseconds is not None:
        try:
            return float(milliseconds) / 1000
        except ValueError:
            pass
    seconds = headers.get("retry-after")
    if seconds is None:
        return None
    try:
        return float(seconds)
    except ValueError:
        pass
    try:
        import time

        return parsedate_to_datetime(seconds).timestamp() - time.time()
    except (TypeError, ValueError):
        return None


class HttpApi:
    """One API endpoint: ``base_url``, fixed ``headers`` (auth and version),
    per-request ``timeout`` (seconds) and ``max_retries``."""

    def __init__(
        self, base_url: str, headers: Mapping[str, str], *, timeout: float, max_retries: int
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = dict(headers)
        self.timeout = timeout
        self.max_retries = max_retries
        self._client: HttpClient | None = None
        self._client_lock = threading.Lock()

    async def warm(self) -> None:
        """Build the client (and an https endpoint's TLS context) off the
        event loop, ahead of the first call."""
        from appserver.providers.http_client import InvalidUrl

        with contextlib.suppress(InvalidUrl, OSError):  # the first call reports it
            await anyio.to_thread.run_sync(self.client)

    def client(self) -> HttpClient:
        """The pooled client, built on first use."""
        with self._client_lock:  # warm() builds it in a worker thread
            if self._client is None:
                from appserver.providers.http_client import HttpClient
                from appserver.providers.http_tls import verifying_context

                # Only an https endpoint needs a TLS context. A plain-http endpoint
                # follows no redirect, so it can never be led to an https host,
                # nor to another host with its key.
                secure = self.base_url.startswith("https:")
                tls, fuller = verifying_context() if secure else (None, None)
                self._client = HttpClient(
                    {"content-type": "application/json", **self.headers},
                    timeout=self.timeout,
                    connect_timeout=min(self.timeout, 10.0),
                    tls=tls,
                    follow_redirects=secure,
                    fuller_tls=fuller,
                )
            return self._client

    async def aclose(self) -> None:
        """Close pooled connections (the API can be used again afterwards)."""
        with self._client_lock:
            client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    @asynccontextmanager
    async def stream(self, path: str, body: Any) -> AsyncIterator[HttpResponse]:
        """POST ``body`` as JSON and yield the successful response unread
        (retried as described above); raises :class:`ApiError` otherwise."""
        async with self._request("POST", path, json.dumps(body).encode()) as response:
            yield response

    async def get_json(self, path: str) -> Any:
        """GET ``path`` (retried the same way) and return its JSON body."""
        async with self._request("GET", path, None) as response:
            await response.aread()
            try:
                return response.json()
            except ValueError as exc:
                raise ApiError(
                    "other", f"the model API answered with invalid JSON: {exc}"
                ) from None

    @asynccontextmanager
    async def _request(
        self, method: str, path: str, content: bytes | None
    ) -> AsyncIterator[HttpResponse]:
        from appserver.providers.http_client import InvalidUrl

        try:
            client = self.client()
        except (InvalidUrl, OSError) as exc:  # OSError: SSL_CERT_FILE names no file
            message = f"cannot call the model API at {self.base_url}: {exc}"
            raise ApiError("other", message) from None
        url = self.base_url + path
        attempt = 0
        while True:
            response = await self._send(client, method, url, content, attempt)
            if response is None:
                attempt += 1
                continue
            try:
                if response.status_code < 300:
                    yield response
                    return
                await response.aread(ERROR_BODY_BYTES)
                if not self._should_retry(response, attempt):
                    raise _status_error(response)
            finally:
                await response.aclose()
            attempt += 1
            await anyio.sleep(retry_delay(attempt, response.headers))

    async def _send(
        self, client: HttpClient, method: str, url: str, content: bytes | None, attempt: int
    ) -> HttpResponse | None:
        """Send once; ``None`` means "a network failure worth retrying, already
        waited for"; the last failure raises :class:`ApiError`."""
        from appserver.providers.http_client import InvalidUrl

        try:
            return await client.send(method, url, content)
        except TimeoutError as exc:
            failure = ApiError(
                "timeout",
                f"the model API at {url} did not answer in time ({type(exc).__name__})",
            )
        except InvalidUrl as exc:
            raise ApiError("other", f"cannot request {method} {url}: {exc}") from None
        except OSError as exc:  # ssl.SSLError and RemoteProtocolError too
            failure = ApiError(
                "unavailable",
                f"connection to the model API failed: {method} {url} ({type(exc).__name__}: {exc})",
            )
        if attempt >= self.max_retries:
            raise failure
        await anyio.sleep(retry_delay(attempt + 1, None))
        return None

    def _should_retry(self, response: HttpResponse, attempt: int) -> bool:
        if attempt >= self.max_retries:
            return False
        forced = response.headers.get("x-should-retry")
        if forced in ("true", "false"):
            return forced == "true"
        return response.status_code in RETRY_STATUSES or response.status_code >= 500


async def finish_body(response: HttpResponse, rest: AsyncIterator[object]) -> None:
    """Read the rest of a streamed body whose answer is complete (OpenAI's
    ``[DONE]``), normally just the chunked body's end, so its connection can
    serve the next turn. A server that does not end the body at once has its
    connection closed instead, and so has one that can never be kept."""
    if not response.keepable:
        return
    with contextlib.suppress(Exception):
        async with asyncio.timeout(BODY_END_GRACE):
            async for _ignored in rest:
                pass


# What a streamed answer may say it is: servers that send events without the
# name (or under a generic one) are read as a stream, as before.
_STREAM_TYPES = frozenset(("", "text/event-stream", "text/plain", "application/octet-stream"))


async def check_stream(response: HttpResponse) -> None:
    """Raise :class:`ApiError` when a successful answer is plainly not an event
    stream (a whole completion, a proxy's page, an error in a 200): read as one
    it was an empty, successful answer."""
    kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind in _STREAM_TYPES:
        return
    body = (await response.aread(ERROR_BODY_BYTES)).decode("utf-8", "replace")
    try:
        said = api_message(json.loads(body))
    except ValueError:
        said = None
    detail = said or body.strip()[:ERROR_MESSAGE_CHARS] or "no body"
    raise ApiError("other", f"the model API answered {kind}, not an event stream: {detail}")


def _status_error(response: HttpResponse) -> ApiStatusError:
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text
    status = response.status_code
    message = api_message(body) or (body if isinstance(body, str) and body else None)
    if message is not None and len(message) > ERROR_MESSAGE_CHARS:
        message = message[:ERROR_MESSAGE_CHARS] + " … (cut)"
    # The URL tried: most failures of a new setup are a wrong --base-url.
    text = (
        f"HTTP {status} from {response.method} {response.url}: "
        f"{message or response.reason_phrase or 'error'}"
    )
    kind = status_kind(status)
    if kind == "other":
        # An unusual status: the error type in the body may still say what happened.
        kind = ERROR_TYPES.get(_error_type(body), "other")
    return ApiStatusError(status, body, kind, text)


def _error_type(body: Any) -> str:
    error = body.get("error") if isinstance(body, dict) else None
    kind = error.get("type") if isinstance(error, dict) else None
    return kind if isinstance(kind, str) else ""


def classify_error(exc: BaseException) -> tuple[ErrorKind, str]:
    """The error kind and message of anything a provider call raised."""
    if isinstance(exc, ApiError):
        return exc.kind, exc.message
    network = transport_error(exc)
    if network is not None:
        return network
    if isinstance(exc, ValueError):  # a chunk that is not JSON
        return "other", f"the model API sent an unreadable stream ({exc})"
    return "other", f"{type(exc).__name__}: {exc}"
