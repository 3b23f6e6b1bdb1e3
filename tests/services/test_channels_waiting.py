"""The channels family waiting for its first use (services/channels_waiting.py):
an adapter that is a fresh server's first client installs it and is served, and
one is rejected as usual when the family cannot load."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.services.test_channels import TELEGRAM, upsert, wait_closed, wait_running
from tests.support.channels_adapter import websocket_adapter
from tests.support.families import fail_install
from tests.support.servers import running_server


async def test_an_adapter_first_after_a_restart_is_admitted(tmp_path: Path) -> None:
    """The channels family waits; the first client is an adapter of a saved
    channel: it installs the family and is admitted, its turn attributed and
    its reply delivered."""
    async with running_server("memory", tmp_path) as sut, sut.connect() as client:
        await upsert(client, TELEGRAM)
    with anyio.fail_after(20):
        async with running_server("websocket", tmp_path) as sut:
            assert sut.app is not None and sut.url is not None
            assert "channel/status" not in sut.app.router.handlers
            async with websocket_adapter(sut.url, "Telegram") as adapter:
                await adapter.initialize()
                turn = await adapter.handle_message("u-42", "Alice", "c-7", "hello")
                assert turn["originChannel"] == "telegram"
                delivery = await adapter.next_delivery()
                assert delivery.message == {"kind": "text", "text": "You said: hello"}
                async with sut.connect("admin") as admin:
                    await wait_running(admin, "telegram", True)


async def test_an_adapter_is_rejected_when_channels_cannot_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fail_install(monkeypatch, "appserver.services.channels", "broken install")
    with anyio.fail_after(15):
        async with (
            running_server("memory", tmp_path) as sut,
            sut.connect("adapter", initialize=False) as adapter,
        ):
            await adapter.request(
                "initialize",
                {
                    "clientInfo": {"name": "adapter", "version": "1"},
                    "capabilities": {"channelAdapter": {"channelName": "telegram"}},
                },
            )
            event = await adapter.notification("system/event")
            assert event["kind"] == "channelRejected"
            assert event["channelName"] == "telegram"
            assert "broken install" in event["message"]
            await wait_closed(adapter)
