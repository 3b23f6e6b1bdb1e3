"""SubAgent profile management (``subagent/profiles/*``, ``subagent/settings/update``):
what DotCraft's SubAgentProfileManagementTests assert, every error code, the
file on disk and ``workspace/configChanged``, over every transport.

Profiles live in ``.craft/config.json`` only (never the database), so the
default store is enough here.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from tests.support.client import RpcClient, RpcFailure
from tests.support.servers import ServerUnderTest

CLI_PROFILE = {"runtime": "cli-oneshot", "bin": "my-agent", "timeout": 42}


def config_file(workspace: Path) -> dict[str, Any]:
    return dict(json.loads((workspace / ".craft" / "config.json").read_text("utf-8")))


def by_name(listed: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {profile["name"]: profile for profile in listed["profiles"]}


async def refused(client: RpcClient, method: str, params: dict[str, Any]) -> RpcFailure:
    with pytest.raises(RpcFailure) as failure:
        await client.request(method, params)
    return failure.value


async def test_list_shows_the_built_in_profiles(server: ServerUnderTest) -> None:
    async with server.connect(initialize=False) as client:
        capabilities = (await client.initialize())["capabilities"]
        assert capabilities["subAgentManagement"] is True
        listed = await client.request("subagent/profiles/list")
    assert listed["defaultName"] == "native"
    assert listed["settings"] == {"externalCliSessionResumeEnabled": False}
    names = [profile["name"] for profile in listed["profiles"]]
    assert names[0] == "native" and names[1:] == sorted(names[1:], key=str.lower)
    assert {"codex-cli", "cursor-cli", "custom-cli-oneshot", "appserver-codex"} <= set(names)
    profiles = by_name(listed)
    native = profiles["native"]
    assert native["isBuiltIn"] and native["isDefault"] and native["enabled"]
    assert not native["hasWorkspaceOverride"] and not native["isTemplate"]
    assert native["definition"] == {
        "runtime": "native",
        "workingDirectoryMode": "workspace",
        "trustLevel": "trusted",
    }
    assert native["builtInDefaults"] == native["definition"]
    assert native["diagnostic"] == {
        "enabled": True,
        "binaryResolved": False,
        "hiddenFromPrompt": False,
        "warnings": [],
    }
    template = profiles["custom-cli-oneshot"]
    assert template["isBuiltIn"] and template["isTemplate"]
    assert not template["hasWorkspaceOverride"] and not template["isDefault"]
    assert template["definition"]["timeout"] == 120 and "bin" not in template["definition"]
    # Its missing bin is no warning while it is a template, but it is never offered.
    assert template["diagnostic"]["warnings"] == []
    assert template["diagnostic"]["hiddenFromPrompt"] is True
    assert template["diagnostic"]["hiddenReason"] == (
        "template profile; missing required field 'bin'"
    )
    codex = profiles["codex-cli"]["definition"]
    assert codex["bin"] == "codex" and codex["timeout"] == 300
    assert profiles["cursor-cli"]["definition"]["outputJsonPath"] == "result"


async def test_binary_resolution_on_path(server: ServerUnderTest, workspace: Path) -> None:
    tool = workspace / "bin" / "my-agent"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    async with server.connect() as client:
        missing = {**CLI_PROFILE, "bin": "surely-not-installed-anywhere"}
        result = await client.request(
            "subagent/profiles/upsert", {"name": "gone", "definition": missing}
        )
        assert result["profile"]["diagnostic"] == {
            "enabled": True,
            "binaryResolved": False,
            "hiddenFromPrompt": True,
            "hiddenReason": "binary 'surely-not-installed-anywhere' was not found on PATH",
            "warnings": [],
        }
        present = {**CLI_PROFILE, "bin": str(tool)}  # an absolute path resolves too
        result = await client.request(
            "subagent/profiles/upsert", {"name": "here", "definition": present}
        )
        assert result["profile"]["diagnostic"]["binaryResolved"] is True
        assert result["profile"]["diagnostic"]["hiddenFromPrompt"] is False
        assert not result["profile"]["isBuiltIn"] and "builtInDefaults" not in result["profile"]


async def test_upsert_overrides_a_built_in_and_remove_restores_it(
    server: ServerUnderTest, workspace: Path
) -> None:
    craft = workspace / ".craft"
    craft.mkdir(exist_ok=True)
    (craft / "config.json").write_text(json.dumps({"Model": "kept", "Other": {"A": 1}}))
    async with server.connect() as client:
        mark = client.mark()
        definition = {"runtime": "cli-oneshot", "bin": " codex ", "timeout": 600, "env": {}}
        result = await client.request(
            "subagent/profiles/upsert", {"name": "codex-cli", "definition": definition}
        )
        changed = await client.notification("workspace/configChanged", start=mark)
        assert changed["source"] == "subagent/profiles/upsert"
        assert changed["regions"] == ["subagent"] and changed["changedAt"]
        profile = result["profile"]
        assert profile["hasWorkspaceOverride"] and profile["isBuiltIn"]
        assert profile["definition"] == {
            "runtime": "cli-oneshot",
            "bin": "codex",
            "env": {},
            "workingDirectoryMode": "workspace",
            "timeout": 600,
        }  # a whole replace: nothing merged from the built-in
        assert profile["builtInDefaults"]["timeout"] == 300

        on_disk = config_file(workspace)
        assert on_disk["SubAgentProfiles"]["codex-cli"]["Timeout"] == 600
        assert on_disk["SubAgentProfiles"]["codex-cli"]["Bin"] == "codex"
        assert on_disk["Model"] == "kept" and on_disk["Other"] == {"A": 1}
        listed = by_name(await client.request("subagent/profiles/list"))
        assert listed["codex-cli"]["hasWorkspaceOverride"] is True
        assert listed["codex-cli"]["definition"]["timeout"] == 600

        mark = client.mark()
        removed = await client.request("subagent/profiles/remove", {"name": "codex-cli"})
        assert removed == {"removed": True}
        changed = await client.notification("workspace/configChanged", start=mark)
        assert changed["source"] == "subagent/profiles/remove"
        listed = by_name(await client.request("subagent/profiles/list"))
        assert listed["codex-cli"]["hasWorkspaceOverride"] is False
        assert listed["codex-cli"]["definition"]["timeout"] == 300
        assert config_file(workspace) == {"Model": "kept", "Other": {"A": 1}}

        # Only what the workspace defines can be removed.
        for name in ("codex-cli", "no-such-profile"):
            failure = await refused(client, "subagent/profiles/remove", {"name": name})
            assert failure.code == -32083
            assert failure.message == f"SubAgent profile not found: {name}"


async def test_set_enabled(server: ServerUnderTest, workspace: Path) -> None:
    async with server.connect() as client:
        failure = await refused(
            client, "subagent/profiles/setEnabled", {"name": "native", "enabled": False}
        )
        assert failure.code == -32085 and failure.message == "SubAgent profile is protected"
        assert "native" in failure.data["detail"]

        mark = client.mark()
        result = await client.request(
            "subagent/profiles/setEnabled", {"name": "cursor-cli", "enabled": False}
        )
        changed = await client.notification("workspace/configChanged", start=mark)
        assert changed["source"] == "subagent/profiles/setEnabled"
        assert changed["regions"] == ["subagent"]
        profile = result["profile"]
        assert profile["enabled"] is False and profile["diagnostic"]["enabled"] is False
        assert profile["diagnostic"]["hiddenFromPrompt"] is True
        assert profile["diagnostic"]["hiddenReason"].startswith(
            "disabled by workspace configuration"
        )
        await client.request(
            "subagent/profiles/setEnabled", {"name": "Codex-CLI", "enabled": False}
        )
        assert config_file(workspace)["SubAgent"]["DisabledProfiles"] == ["codex-cli", "cursor-cli"]
        listed = by_name(await client.request("subagent/profiles/list"))
        assert listed["cursor-cli"]["enabled"] is False
        assert listed["cursor-cli"]["diagnostic"]["hiddenFromPrompt"] is True

        for name in ("cursor-cli", "codex-cli"):
            result = await client.request(
                "subagent/profiles/setEnabled", {"name": name, "enabled": True}
            )
            assert result["profile"]["enabled"] is True
        assert "SubAgent" not in config_file(workspace)  # the empty section is removed
        # Enabling native is allowed (it always is).
        result = await client.request(
            "subagent/profiles/setEnabled", {"name": "native", "enabled": True}
        )
        assert result["profile"]["enabled"] is True

        failure = await refused(
            client, "subagent/profiles/setEnabled", {"name": "nope", "enabled": False}
        )
        assert failure.code == -32083 and failure.message == "SubAgent profile not found: nope"
        for blank in ({"name": "  ", "enabled": True}, {}):
            failure = await refused(client, "subagent/profiles/setEnabled", blank)
            assert failure.code == -32602


async def test_removing_a_custom_profile_forgets_its_disabled_state(
    server: ServerUnderTest, workspace: Path
) -> None:
    async with server.connect() as client:
        await client.request(
            "subagent/profiles/upsert", {"name": "mine", "definition": CLI_PROFILE}
        )
        for name in ("mine", "cursor-cli"):
            await client.request("subagent/profiles/setEnabled", {"name": name, "enabled": False})
        await client.request(
            "subagent/profiles/upsert", {"name": "cursor-cli", "definition": CLI_PROFILE}
        )
        await client.request("subagent/profiles/remove", {"name": "MINE"})
        await client.request("subagent/profiles/remove", {"name": "cursor-cli"})
        # A built-in keeps its disabled state when its override goes.
        assert config_file(workspace) == {"SubAgent": {"DisabledProfiles": ["cursor-cli"]}}
        listed = by_name(await client.request("subagent/profiles/list"))
        assert "mine" not in listed and listed["cursor-cli"]["enabled"] is False


async def test_upsert_validation(server: ServerUnderTest, workspace: Path) -> None:
    async with server.connect() as client:
        cases = {
            "missing a runtime": {"runtime": " "},
            "references unknown runtime 'wasm'": {"runtime": "wasm"},
            "is missing required field 'bin' for cli-oneshot": {"runtime": "cli-oneshot"},
            "does not define inputArgTemplate": {**CLI_PROFILE, "inputMode": "arg-template"},
            "does not define inputEnvKey": {**CLI_PROFILE, "inputMode": "env"},
            "does not define outputJsonPath": {**CLI_PROFILE, "outputFormat": "json"},
            "does not define outputFileArgTemplate": {**CLI_PROFILE, "readOutputFile": True},
            "does not define resumeArgTemplate": {
                **CLI_PROFILE,
                "supportsResume": True,
                "resumeSessionIdRegex": "id=(\\w+)",
            },
            "neither resumeSessionIdJsonPath nor resumeSessionIdRegex": {
                "supportsResume": True,
                "resumeArgTemplate": "--resume {sessionId}",
            },
        }
        for warning, definition in cases.items():
            failure = await refused(
                client, "subagent/profiles/upsert", {"name": "bad", "definition": definition}
            )
            assert failure.code == -32084, warning
            assert failure.message == "SubAgent profile validation failed"
            assert warning in failure.data["detail"] and "'bad'" in failure.data["detail"]
        # Several warnings are joined by spaces.
        failure = await refused(
            client,
            "subagent/profiles/upsert",
            {"name": "bad", "definition": {"runtime": "cli-oneshot", "outputFormat": "json"}},
        )
        assert failure.data["detail"] == (
            "SubAgent profile 'bad' is missing required field 'bin' for cli-oneshot. "
            "SubAgent profile 'bad' uses outputFormat 'json' but does not define outputJsonPath."
        )
        for params in ({"name": " ", "definition": CLI_PROFILE}, {"definition": CLI_PROFILE}):
            assert (await refused(client, "subagent/profiles/upsert", params)).code == -32602
        for bad in (
            {"name": "x", "definition": {"timeout": "soon"}},
            {"name": "x", "definition": {"timeout": 2**40}},
            {"name": "x" * 300, "definition": CLI_PROFILE},
            {"name": "x", "definition": {**CLI_PROFILE, "args": ["a" * 70_000]}},
        ):
            assert (await refused(client, "subagent/profiles/upsert", bad)).code == -32602
        assert not (workspace / ".craft" / "config.json").exists()  # nothing was written

        # Blank strings are absent, a blank workingDirectoryMode is `workspace`; the
        # template is a profile like any other once the workspace defines it.
        definition = {**CLI_PROFILE, "workingDirectoryMode": " ", "inputMode": "", "bin": "x"}
        result = await client.request(
            "subagent/profiles/upsert", {"name": "custom-cli-oneshot", "definition": definition}
        )
        profile = result["profile"]
        assert profile["isBuiltIn"] and not profile["isTemplate"]
        assert profile["definition"] == {
            "runtime": "cli-oneshot",
            "bin": "x",
            "workingDirectoryMode": "workspace",
            "timeout": 42,
        }
        assert config_file(workspace)["SubAgentProfiles"] == {
            "custom-cli-oneshot": {
                "Runtime": "cli-oneshot",
                "Bin": "x",
                "WorkingDirectoryMode": "workspace",
                "Timeout": 42,
            }
        }


async def test_settings_update(server: ServerUnderTest, workspace: Path) -> None:
    async with server.connect() as client:
        failure = await refused(client, "subagent/settings/update", {})
        assert failure.code == -32602

        mark = client.mark()
        result = await client.request("subagent/settings/update", {"model": " gpt-child "})
        assert result == {
            "settings": {"externalCliSessionResumeEnabled": False, "model": "gpt-child"}
        }
        changed = await client.notification("workspace/configChanged", start=mark)
        assert changed["source"] == "subagent/settings/update"
        assert changed["regions"] == ["subagent"]
        assert config_file(workspace) == {"SubAgent": {"Model": "gpt-child"}}
        listed = await client.request("subagent/profiles/list")
        assert listed["settings"]["model"] == "gpt-child"

        result = await client.request(
            "subagent/settings/update", {"externalCliSessionResumeEnabled": True}
        )
        assert result["settings"] == {"externalCliSessionResumeEnabled": True, "model": "gpt-child"}
        assert config_file(workspace)["SubAgent"] == {
            "Model": "gpt-child",
            "EnableExternalCliSessionResume": True,
        }

        # `model: null` clears it (the key's presence counts); `false` is not written.
        result = await client.request(
            "subagent/settings/update", {"model": None, "externalCliSessionResumeEnabled": False}
        )
        assert result == {"settings": {"externalCliSessionResumeEnabled": False}}
        assert "SubAgent" not in config_file(workspace)
        await client.request("subagent/settings/update", {"model": "m"})
        result = await client.request("subagent/settings/update", {"model": "  "})
        assert "model" not in result["settings"]


async def test_hand_edited_file_is_read_leniently(server: ServerUnderTest, workspace: Path) -> None:
    craft = workspace / ".craft"
    craft.mkdir(exist_ok=True)
    stored = {
        "subagent": {"disabledprofiles": ["Mine", 7], "model": 5},
        "subAgentProfiles": {
            "mine": {"runtime": "native", "timeout": "junk"},
            "MINE": {"Runtime": "cli-oneshot", "Bin": "ls", "Timeout": 9},
            "broken": "not an object",
        },
    }
    (craft / "config.json").write_text(json.dumps(stored))
    async with server.connect() as client:
        listed = by_name(await client.request("subagent/profiles/list"))
        # Case-insensitive duplicates: the last one wins.
        assert listed["MINE"]["definition"]["timeout"] == 9 and "mine" not in listed
        assert listed["MINE"]["enabled"] is False
        assert listed["broken"]["definition"]["runtime"] == "native"
        assert "model" not in (await client.request("subagent/profiles/list"))["settings"]

        (craft / "config.json").write_text("{not json")
        failure = await refused(client, "subagent/settings/update", {"model": "m"})
        assert failure.code == -32603
        assert (craft / "config.json").read_text() == "{not json"  # never clobbered


async def test_written_file_is_private(server: ServerUnderTest, workspace: Path) -> None:
    async with server.connect() as client:
        await client.request("subagent/settings/update", {"model": "m"})
    mode = os.stat(workspace / ".craft" / "config.json").st_mode
    assert stat.S_IMODE(mode) == 0o600
