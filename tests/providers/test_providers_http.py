"""The providers' HTTP layer: retries as the official SDKs do them, error kinds."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from appserver.providers.http import (
    ApiError,
    ApiStatusError,
    HttpApi,
    api_message,
    retry_delay,
    status_kind,
)
from tests.support.fake_models import (
    FakeModelServer,
    Reply,
    closed_port,
    fake_model_server,
    openai_error,
)

CHAT = "POST /v1/chat/completions"


@pytest.fixture
async def fake() -> AsyncIterator[FakeModelServer]:
    async with fake_model_server() as server:
        yield server


def api(base_url: str, retries: int) -> HttpApi:
    return HttpApi(base_url, {"authorization": "Bearer k"}, timeout=5, max_retries=retries)


def busy(status: int, **headers: str) -> Reply:
    reply = openai_error(status, "try later", type_="server_error")
    reply.headers.update({"retry-after-ms": "1", **headers})
    return reply


async def test_statuses_worth_retrying_are_retried_up_to_the_limit(fake: FakeModelServer) -> None:
    fake.script(CHAT, busy(503), busy(409), busy(500))
    client = api(fake.openai_base_url, retries=2)
    with pytest.raises(ApiStatusError) as failure:
        async with client.stream("/chat/completions", {"stream": True}):
            pass
    await client.aclose()
    assert len(fake.requests) == 3
    assert (failure.value.status, failure.value.kind) == (500, "unavailable")
    tried = f"POST {fake.openai_base_url}/chat/completions"
    assert failure.value.message == f"HTTP 500 from {tried}: try later"


async def test_client_errors_and_a_refusal_to_retry_are_final(fake: FakeModelServer) -> None:
    fake.script(CHAT, openai_error(400, "bad body", type_="invalid_request_error"))
    fake.script(CHAT, busy(503, **{"x-should-retry": "false"}))
    client = api(fake.openai_base_url, retries=3)
    for expected in ("other", "unavailable"):
        with pytest.raises(ApiStatusError) as failure:
            async with client.stream("/chat/completions", {}):
                pass
        assert failure.value.kind == expected
    await client.aclose()
    assert len(fake.requests) == 2


async def test_connection_failures_are_retried_then_reported() -> None:
    client = api(f"http://127.0.0.1:{closed_port()}/v1", retries=1)
    with pytest.raises(ApiError) as failure:
        await client.get_json("/models")
    await client.aclose()
    assert failure.value.kind == "unavailable"
    assert "connection to the model API failed" in failure.value.message


def test_retry_delays_follow_the_server_then_back_off() -> None:
    assert retry_delay(1, {"retry-after-ms": "250"}) == 0.25
    assert retry_delay(1, {"retry-after": "2"}) == 2.0
    # Too long a wait is not honoured: back off instead.
    assert 0.375 <= retry_delay(1, {"retry-after": "3600"}) <= 0.5
    assert 0.75 <= retry_delay(2, {}) <= 1.0
    assert 6.0 <= retry_delay(10, None) <= 8.0


def test_status_kinds_and_messages() -> None:
    assert [status_kind(s) for s in (401, 403, 429, 408, 500, 529, 400)] == [
        "auth",
        "auth",
        "rate_limit",
        "timeout",
        "unavailable",
        "unavailable",
        "other",
    ]
    assert api_message({"error": {"message": "nope"}}) == "nope"
    assert api_message({"message": "top level"}) == "top level"
    assert api_message({"error": "plain"}) == "plain"
    assert api_message("text") is None


def test_a_plain_http_endpoint_never_loads_the_ca_bundle_nor_follows_redirects() -> None:
    plain = api("http://127.0.0.1:1/v1", retries=0).client()
    secure = api("https://example.invalid/v1", retries=0).client()
    assert not plain.follow_redirects and secure.follow_redirects
    assert plain.tls is None and secure.tls is not None


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_no_sdk_is_loaded_and_http_waits_for_warm(provider: str) -> None:
    """Building a network provider loads no HTTP library and no SDK; warm()
    (run by the server after start-up, or the first call) builds the client, and
    loads httpx2 (for its TLS context) only where neither SSL_CERT_FILE nor
    SSL_CERT_DIR chooses the roots and the system's CAs are not in a hashed
    directory (providers/http_tls.py)."""
    import subprocess
    import sys

    code = (
        "import sys, anyio\n"
        "from appserver.providers import ProviderSettings, make_provider\n"
        "import os\n"
        "from appserver.providers.http_tls import quick_context\n"
        f"provider = make_provider(ProviderSettings(provider={provider!r}, api_key='k'))\n"
        "print('httpx2' in sys.modules, 'appserver.providers.http_client' in sys.modules)\n"
        "anyio.run(provider.warm)\n"
        "print('httpx2' in sys.modules, 'appserver.providers.http_client' in sys.modules)\n"
        "chosen = os.environ.get('SSL_CERT_FILE') or os.environ.get('SSL_CERT_DIR')\n"
        f"print({provider!r} in sys.modules, not chosen and quick_context() is None)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    before, after, last = (line.split() for line in done.stdout.splitlines())
    assert before == ["False", "False"]
    assert last[0] == "False"  # no SDK
    assert after == [last[1], "True"]  # httpx2 only without the quick trust
