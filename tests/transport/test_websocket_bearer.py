"""The listener takes the token from an ``Authorization: Bearer`` header as well as
from ``?token=`` (Codex clients send the header), under the same lockout."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.transport.test_websocket_security import TOKEN, listening, refused_status, rpc


@pytest.mark.anyio
async def test_a_bearer_header_carries_the_token(workspace: Path) -> None:
    async with listening(workspace, token=TOKEN) as (_, url):
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        async with rpc(url, additional_headers=bearer) as client:
            assert client is not None  # admitted and initialized
        assert await refused_status(url, additional_headers={"Authorization": "Bearer nope"}) == 401
        basic = {"Authorization": f"Basic {TOKEN}"}  # only the Bearer scheme counts
        assert await refused_status(url, additional_headers=basic) == 401
        twice = [("Authorization", f"Bearer {TOKEN}")] * 2  # ambiguous: refused
        assert await refused_status(url, additional_headers=twice) == 401
