"""``model/list`` and ``workspace/config/*`` (reference §3.4, §3.12; DotCraft's
AppServerModelCatalogRuntimeConfigTests, WorkspaceConfigSchemaTests,
WorkspaceConfigChangedTests)."""

from __future__ import annotations

import json
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from appserver.protocol import errors as rpc_errors
from appserver.storage.user_settings import workspace_home
from tests.support.client import RpcClient
from tests.support.fake_models import (
    fake_model_server,
    openai_error,
    openai_models,
    openai_text_reply,
)
from tests.support.servers import ServerUnderTest, running_server
from tests.support.turns import Approver, items_completed, new_thread, run_turn

KEY = "sk-test-0123456789abcdefghijklmnop"
MASKED = "sk-…mnop"
UPDATE = "workspace/config/update"

_PROVIDER_ENV = (
    "APPSERVER_PROVIDER",
    "APPSERVER_MODEL",
    "APPSERVER_BASE_URL",
    "APPSERVER_API_KEY",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "DASHSCOPE_API_KEY",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
)


@pytest.fixture(autouse=True)
def clean_provider_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the workspace file may choose the provider in these tests."""
    for name in _PROVIDER_ENV:
        monkeypatch.delenv(name, raising=False)


def config_path(workspace: Path) -> Path:
    """The user's settings for ``workspace``: where workspace/config/update writes,
    outside the workspace (appserver/storage/user_settings.py)."""
    return workspace_home(workspace) / "config.json"


def write_config(workspace: Path, config: dict[str, Any]) -> None:
    path = config_path(workspace)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config))


def read_config(workspace: Path) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(config_path(workspace).read_text())
    return value


@pytest.fixture
def open_umask() -> Iterator[None]:
    """umask 0: a file created with default permissions would be world-readable."""
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


async def changed_events(client: RpcClient, mark: int) -> list[dict[str, Any]]:
    """Every ``workspace/configChanged`` since ``mark`` (waits for the first)."""
    await client.notification("workspace/configChanged", start=mark)
    return [m["params"] for m in client.since(mark, "workspace/configChanged")]


async def agent_text(client: RpcClient, thread_id: str, text: str) -> str:
    _, terminal = await run_turn(client, thread_id, text)
    assert terminal["method"] == "turn/completed", terminal
    items = terminal["params"]["turn"]["items"]
    return "".join(i["payload"]["text"] for i in items if i["type"] == "agentMessage")


# --- model/list ----------------------------------------------------------------------


async def test_offline_model_list_and_capabilities(server: ServerUnderTest) -> None:
    async with server.connect(initialize=False) as client:
        caps = (await client.initialize())["capabilities"]
        assert caps["modelCatalogManagement"] is True
        assert caps["workspaceConfigManagement"] is True
        result = await client.request("model/list", {})
        assert result == {"success": True, "models": [{"id": "offline", "ownedBy": "appserver"}]}


async def test_model_list_asks_the_configured_openai_endpoint(workspace: Path) -> None:
    async with fake_model_server() as fake:
        fake.script("GET /v1/models", openai_models("gpt-b", "GPT-a", "gpt-c"))
        write_config(
            workspace, {"Provider": "openai", "EndPoint": fake.openai_base_url, "ApiKey": KEY}
        )
        async with running_server("memory", workspace) as sut, sut.connect() as client:
            result = await client.request("model/list")
        assert result["success"] is True
        assert [m["id"] for m in result["models"]] == ["GPT-a", "gpt-b", "gpt-c"]
        assert all(m["ownedBy"] == "fake" for m in result["models"])
        assert all(m["createdAt"].startswith("2023-11-14T22:13:20") for m in result["models"])
        assert "errorCode" not in result and "errorMessage" not in result
        assert fake.requests[-1].headers["authorization"] == f"Bearer {KEY}"


async def test_model_list_failures_are_in_band(workspace: Path) -> None:
    async with fake_model_server() as fake:
        url = fake.openai_base_url
        write_config(workspace, {"Provider": "openai", "EndPoint": url})
        async with running_server("memory", workspace) as sut, sut.connect() as client:
            # Another endpoint than the vendor's is asked without a key (a local
            # server needs none); one that wants a key says where it comes from.
            fake.script("GET /v1/models", openai_error(401, "no key", type_="invalid_request"))
            missing = await client.request("model/list")
            assert missing == {
                "success": False,
                "models": [],
                "errorCode": "Unauthorized",
                "errorMessage": missing["errorMessage"],
            }
            assert "OPENAI_API_KEY" in missing["errorMessage"]
            assert missing["errorMessage"].endswith(f" Endpoint: {url}")
            assert "authorization" not in fake.requests[0].headers

            await client.request(UPDATE, {"apiKey": KEY})
            fake.script("GET /v1/models", openai_error(401, "bad key", type_="invalid_request"))
            unauthorized = await client.request("model/list")
            assert unauthorized["success"] is False
            assert unauthorized["errorCode"] == "Unauthorized"
            assert unauthorized["errorMessage"].endswith(f" Endpoint: {url}")
            assert KEY not in json.dumps(unauthorized)


# --- workspace/config/schema -----------------------------------------------------------------


async def test_schema_describes_the_settings_without_values(workspace: Path) -> None:
    write_config(workspace, {"ApiKey": KEY, "Model": "secret-model-name"})
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        result = await client.request("workspace/config/schema", {})
    text = json.dumps(result)
    assert KEY not in text and "secret-model-name" not in text
    sections = {s["section"]: s for s in result["sections"]}
    assert [s["section"] for s in result["sections"]] == ["Core", "Permissions"]
    core = sections["Core"]
    assert core["order"] == 0 and "path" not in core
    fields = {f["key"]: f for f in core["fields"]}
    assert set(fields) == {"Provider", "ApiKey", "Model", "EndPoint"}
    assert fields["ApiKey"]["type"] == "password" and fields["ApiKey"]["sensitive"] is True
    assert fields["Model"]["type"] == "text" and fields["Model"]["sensitive"] is False
    assert fields["Provider"]["options"] == ["offline", "openai", "anthropic"]
    permissions = sections["Permissions"]
    assert permissions["path"] == ["Permissions"]
    (policy,) = permissions["fields"]
    assert policy["key"] == "DefaultApprovalPolicy"
    assert policy["type"] == "select" and policy["options"] == ["default", "autoApprove"]
    assert policy["defaultValue"] == "default"
    for section in result["sections"]:
        assert all(f["reload"] == "hot" for f in section["fields"])


# --- workspace/config/update -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "detail"),
    [
        ({}, "At least one of"),
        ({"futureSetting": 1}, "At least one of"),
        ({"defaultApprovalPolicy": "sometimes"}, "'defaultApprovalPolicy' must be"),
        ({"defaultApprovalPolicy": "interrupt"}, "'defaultApprovalPolicy' must be"),
        ({"endPoint": "ftp://models.example/v1"}, "'endPoint' must be an absolute http(s) URL"),
        ({"endPoint": "not a url"}, "'endPoint' must be an absolute http(s) URL"),
        ({"provider": "nonsense"}, "unknown provider"),
        ({"model": 5}, "'model'"),
    ],
)
async def test_update_rejects_bad_params_and_writes_nothing(
    workspace: Path, params: dict[str, Any], detail: str
) -> None:
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        mark = client.mark()
        failure = await client.fail(UPDATE, params)
        assert failure.code == rpc_errors.INVALID_PARAMS
        assert detail in failure.data["detail"]
        await client.quiet_after(mark)
    assert not config_path(workspace).exists()


async def test_update_writes_a_private_file_and_masks_the_key(
    workspace: Path, open_umask: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    path = config_path(workspace)
    write_config(
        workspace,
        {
            "model": "old-model",
            "permissions": {"defaultApprovalPolicy": "default"},
            "Skills": {"DisabledSkills": ["kept"]},
        },
    )
    path.chmod(0o644)
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        mark = client.mark()
        result = await client.request(
            UPDATE,
            {
                "model": "gpt-x",
                "apiKey": KEY,
                "endPoint": "https://models.example/v1",
                "defaultApprovalPolicy": "AutoApprove",
            },
        )
        assert result == {
            "model": "gpt-x",
            "apiKey": MASKED,
            "endPoint": "https://models.example/v1",
            "defaultApprovalPolicy": "autoApprove",
        }
        (event,) = await changed_events(client, mark)
        assert event["source"] == UPDATE
        assert event["regions"] == [
            "workspace.model",
            "workspace.apiKey",
            "workspace.endpoint",
            "workspace.defaultApprovalPolicy",
        ]
        assert event["changedAt"].endswith("Z") or "+" in event["changedAt"]
        assert sut.app is not None
        # Hot: the running server follows the file at once.
        assert sut.app.user_settings == read_config(workspace)
        assert sut.app.provider.name == "openai"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # Existing keys keep their spelling; unrelated settings survive.
    assert read_config(workspace) == {
        "model": "gpt-x",
        "permissions": {"defaultApprovalPolicy": "autoApprove"},
        "Skills": {"DisabledSkills": ["kept"]},
        "ApiKey": KEY,
        "EndPoint": "https://models.example/v1",
    }
    assert sorted(p.name for p in path.parent.iterdir() if p.name.startswith(".config")) == []
    assert KEY not in caplog.text


async def test_new_file_is_private_too(workspace: Path, open_umask: None) -> None:
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        await client.request(UPDATE, {"defaultApprovalPolicy": "autoApprove"})
    path = config_path(workspace)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_config(workspace) == {"Permissions": {"DefaultApprovalPolicy": "autoApprove"}}


async def test_only_real_changes_are_written_and_announced(workspace: Path) -> None:
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        first = await client.request(UPDATE, {"model": "m1", "apiKey": "short-key"})
        assert first == {"model": "m1", "apiKey": "********"}
        await client.settle()

        # The same values again, and the masked key sent back: nothing changes.
        mark = client.mark()
        again = await client.request(UPDATE, {"model": " m1 ", "apiKey": "********"})
        assert again == first
        await client.quiet_after(mark)
        assert read_config(workspace)["ApiKey"] == "short-key"

        # null, "" and "Default" remove; an emptied section disappears.
        await client.request(UPDATE, {"defaultApprovalPolicy": "autoApprove"})
        await client.settle()
        mark = client.mark()
        result = await client.request(
            UPDATE, {"model": "Default", "apiKey": None, "defaultApprovalPolicy": ""}
        )
        assert result == {}
        (event,) = await changed_events(client, mark)
        assert event["regions"] == [
            "workspace.model",
            "workspace.apiKey",
            "workspace.defaultApprovalPolicy",
        ]
    assert read_config(workspace) == {}


async def test_config_changed_goes_to_every_client_that_wants_it(workspace: Path) -> None:
    async with (
        running_server("memory", workspace) as sut,
        sut.connect("a") as a,
        sut.connect("b") as b,
        sut.connect("quiet", capabilities={"configChange": False}) as quiet,
    ):
        marks = (a.mark(), b.mark(), quiet.mark())
        await a.request(UPDATE, {"provider": "offline"})
        for client, mark in zip((a, b), marks[:2], strict=True):
            (event,) = await changed_events(client, mark)
            assert event["regions"] == ["workspace.provider"]
        await quiet.quiet_after(marks[2])


async def test_update_switches_the_provider_of_new_turns(workspace: Path) -> None:
    async with fake_model_server() as fake, running_server("memory", workspace) as sut:
        fake.script("POST /v1/chat/completions", openai_text_reply(["Hi ", "from ", "fake"]))
        async with sut.connect() as client:
            thread_id = await new_thread(client)
            assert await agent_text(client, thread_id, "hello") == "You said: hello"

            await client.request(
                UPDATE,
                {
                    "provider": "openai",
                    "endPoint": fake.openai_base_url,
                    "apiKey": KEY,
                    "model": "fake-model",
                },
            )
            assert await agent_text(client, thread_id, "hello again") == "Hi from fake"
            (body,) = fake.bodies("POST /v1/chat/completions")
            assert body["model"] == "fake-model"

            await client.request(UPDATE, {"provider": "offline"})
            assert await agent_text(client, thread_id, "back") == "You said: back"


async def test_default_approval_policy_applies_at_once(
    server: ServerUnderTest, workspace: Path
) -> None:
    with anyio.fail_after(20):
        async with server.connect() as client:
            approver = Approver(client, "decline")
            thread_id = await new_thread(client)
            await client.request(UPDATE, {"defaultApprovalPolicy": "autoApprove"})
            mark = client.mark()
            turn_id, terminal = await run_turn(client, thread_id, "!touch auto.txt")
            assert terminal["method"] == "turn/completed"
            assert approver.requests == []
            assert (workspace / "auto.txt").exists()
            assert not items_completed(client, turn_id, "approvalRequest", mark)

            await client.request(UPDATE, {"defaultApprovalPolicy": "default"})
            _, terminal = await run_turn(client, thread_id, "!touch asked.txt")
            assert terminal["method"] == "turn/completed"
            assert len(approver.requests) == 1
            assert not (workspace / "asked.txt").exists()


async def test_settings_survive_a_restart(workspace: Path) -> None:
    async with fake_model_server() as fake:
        fake.script("GET /v1/models", openai_models("persisted"))
        settings = {"provider": "openai", "endPoint": fake.openai_base_url, "apiKey": KEY}
        async with running_server("memory", workspace) as sut, sut.connect() as client:
            await client.request(UPDATE, settings)
        async with running_server("memory", workspace) as sut, sut.connect() as client:
            result = await client.request("model/list")
            assert [m["id"] for m in result["models"]] == ["persisted"]
            # Reading back (an update of nothing new) shows the stored values, masked.
            echoed = await client.request(UPDATE, {"provider": "openai"})
            assert echoed == {**settings, "apiKey": MASKED}


async def test_broken_config_file_is_left_alone(workspace: Path) -> None:
    path = config_path(workspace)
    path.parent.mkdir(parents=True)
    path.write_text("{ not json")
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        mark = client.mark()
        failure = await client.fail(UPDATE, {"model": "m"})
        assert failure.code == rpc_errors.INTERNAL_ERROR
        assert "not valid JSON" in failure.data["detail"]
        await client.quiet_after(mark)
    assert path.read_text() == "{ not json"
