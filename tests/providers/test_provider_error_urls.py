"""Provider errors name the URL they tried, and a 404 from an OpenAI-compatible
base URL without ``/v1`` says so (issue 27: most first failures are a wrong
``--base-url``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from appserver.providers.base import Message, ModelRequest, ProviderError
from appserver.providers.openai_compat import OpenAIProvider
from tests.support.fake_models import (
    FakeModelServer,
    closed_port,
    collect,
    fake_model_server,
    openai_error,
)

HELLO = ModelRequest(model="m", messages=[Message("user", "hello")])


@pytest.fixture
async def fake() -> AsyncIterator[FakeModelServer]:
    async with fake_model_server() as server:
        yield server


async def failure_of(base_url: str) -> ProviderError:
    provider = OpenAIProvider(api_key="k", base_url=base_url, max_retries=0, timeout=5)
    try:
        events = await collect(provider.stream(HELLO))
    finally:
        await provider.aclose()
    assert len(events) == 1 and isinstance(events[0], ProviderError)
    return events[0]


async def test_a_404_without_v1_names_the_url_and_hints_at_v1(fake: FakeModelServer) -> None:
    fake.script(
        "POST /chat/completions",
        openai_error(404, "no route /chat/completions", type_="not_found"),
    )
    error = await failure_of(fake.base_url)
    assert error.message == (
        f"HTTP 404 from POST {fake.base_url}/chat/completions: no route /chat/completions "
        f"(OpenAI-compatible servers usually serve under /v1: try --base-url {fake.base_url}/v1)"
    )


async def test_a_404_under_v1_gets_no_v1_hint(fake: FakeModelServer) -> None:
    fake.script("POST /v1/chat/completions", openai_error(404, "no such model", type_="not_found"))
    error = await failure_of(fake.openai_base_url)
    assert error.message == (
        f"HTTP 404 from POST {fake.openai_base_url}/chat/completions: no such model"
    )


async def test_a_refused_connection_names_the_url() -> None:
    base_url = f"http://127.0.0.1:{closed_port()}/v1"
    error = await failure_of(base_url)
    assert error.kind == "unavailable"
    assert error.message.startswith(
        f"connection to the model API failed: POST {base_url}/chat/completions ("
    )
