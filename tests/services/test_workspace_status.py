"""``workspace/status``: the workspace, provider, model, approval default and trust in one
answer (what the web page's header and the chat's /status show)."""

from __future__ import annotations

import json
from pathlib import Path

from appserver import __version__
from appserver.storage.user_settings import workspace_home
from tests.support.servers import ServerUnderTest, running_server


async def test_status_on_the_embedded_defaults(server: ServerUnderTest, workspace: Path) -> None:
    async with server.connect() as client:
        status = await client.request("workspace/status")
    assert status == {
        "workspacePath": str(workspace.resolve()),
        "provider": "offline",
        "model": "offline",
        "defaultApprovalPolicy": "default",
        "trusted": status["trusted"],
        "version": __version__,
    }


async def test_status_names_the_configured_endpoint_and_model(workspace: Path) -> None:
    settings = workspace_home(workspace) / "config.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(
        json.dumps(
            {
                "Provider": "openai",
                "EndPoint": "http://127.0.0.1:9/v1",
                "ApiKey": "sk-test",
                "Model": "qwen2.5-coder",
                "Permissions": {"DefaultApprovalPolicy": "autoApprove"},
            }
        )
    )
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        status = await client.request("workspace/status")
    assert status["provider"] == "openai" and status["model"] == "qwen2.5-coder"
    assert status["endpoint"] == "http://127.0.0.1:9/v1"
    assert status["defaultApprovalPolicy"] == "autoApprove"
