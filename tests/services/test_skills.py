"""The skills family end to end (reference §3.7, §3.1 skillRef, §4 configChanged;
DotCraft's AppServerSkillsManagementTests): discovery and precedence,
availability, read/view, enable switches persisted in SQLite, uninstall,
restoreOriginal, plugin sources and skillRef turns."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import pytest

from appserver.protocol import errors as rpc_errors
from appserver.services.skills import SkillsService, skills_of
from appserver.services.skills.catalog import BUILTIN_ROOT
from tests.support.client import RpcClient
from tests.support.servers import ServerUnderTest, running_server
from tests.support.skills_files import (
    UserRoots,
    isolate_user_roots,
    workspace_skills,
    write_skill,
)
from tests.support.skills_provider import RecordingProvider
from tests.support.turns import new_thread, one_item, read_turn, run_turn

BUILTINS = {"code-review", "write-tests", "git-commit"}
MISSING_BIN = "appserver-test-no-such-binary"
MISSING_ENV = "APPSERVER_TEST_SKILL_TOKEN"


@pytest.fixture(autouse=True)
def user_roots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> UserRoots:
    monkeypatch.delenv(MISSING_ENV, raising=False)
    return isolate_user_roots(tmp_path, monkeypatch)


async def list_skills(client: RpcClient, **params: Any) -> dict[str, dict[str, Any]]:
    result = await client.request("skills/list", params)
    return {skill["name"]: skill for skill in result["skills"]}


def config_changes(client: RpcClient, mark: int) -> list[dict[str, Any]]:
    return [m["params"] for m in client.since(mark, "workspace/configChanged")]


def service(sut: ServerUnderTest) -> SkillsService:
    assert sut.app is not None
    found = skills_of(sut.app)
    assert found is not None
    return found


# --- capabilities -------------------------------------------------------------------


async def test_skills_management_is_advertised_without_variants(server: ServerUnderTest) -> None:
    async with server.connect(initialize=False) as client:
        capabilities = (await client.initialize())["capabilities"]
        assert capabilities["skillsManagement"] is True
        assert "skillVariants" not in capabilities


# --- skills/list --------------------------------------------------------------------


async def test_list_merges_sources_by_precedence(
    server: ServerUnderTest, user_roots: UserRoots
) -> None:
    ws = workspace_skills(server.workspace)
    write_skill(ws, "alpha", "description: workspace alpha\n")
    write_skill(ws, "Code-Review", "description: our own review rules\n")  # shadows the built-in
    write_skill(user_roots.skills, "ALPHA", "description: user alpha\n")  # shadowed by workspace
    write_skill(user_roots.skills, "beta", "description: user beta\n")
    (ws / "not-a-skill").mkdir()  # no SKILL.md: ignored
    write_skill(ws, ".hidden")  # hidden directories are ignored
    async with server.connect() as client:
        skills = await list_skills(client)
    assert set(skills) == {"alpha", "beta", "Code-Review", "write-tests", "git-commit"}
    assert list(skills) == sorted(skills, key=str.lower)
    alpha = skills["alpha"]
    assert alpha["source"] == "workspace"
    assert alpha["description"] == "workspace alpha"
    assert alpha["path"] == str(server.workspace.resolve() / ".craft/skills/alpha/SKILL.md")
    assert alpha["enabled"] is True and alpha["available"] is True
    assert alpha["hasVariant"] is False
    assert "unavailableReason" not in alpha and "pluginId" not in alpha
    assert skills["beta"]["source"] == "user"
    assert skills["beta"]["path"] == str(user_roots.skills / "beta" / "SKILL.md")
    assert skills["Code-Review"]["source"] == "workspace"
    assert skills["Code-Review"]["description"] == "our own review rules"
    assert skills["write-tests"]["source"] == "builtin"
    assert skills["write-tests"]["path"] == str(BUILTIN_ROOT / "write-tests" / "SKILL.md")


async def test_builtin_skills_ship_with_the_package(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        skills = await list_skills(client)
        for name in BUILTINS:
            skill = skills[name]
            assert skill["source"] == "builtin"
            assert len(skill["description"]) > 40, skill
            assert skill["metadata"]["name"] == name
            body = (await client.request("skills/view", {"name": name}))["content"]
            assert body.startswith("# "), body[:40]
            assert len(body) > 1000
    assert skills["git-commit"]["metadata"]["bins"] == "git"


async def test_skill_info_fields(multi_server: ServerUnderTest) -> None:
    ws = workspace_skills(multi_server.workspace)
    plain = write_skill(ws, "plain", None, body="# Plain\n\nNo front matter here.")
    fancy = write_skill(
        ws,
        "fancy",
        "description: Fancy things\ntags: [a, b]\nalways: true\nversion: 2\n"
        "nested:\n  key: value\n",
    )
    (fancy / "agents").mkdir()
    (fancy / "assets").mkdir()
    png = b"\x89PNG\r\n\x1a\n" + b"\0" * 16
    (fancy / "assets" / "icon.png").write_bytes(png)
    (multi_server.workspace / "secret.png").write_bytes(png)
    (fancy / "agents" / "openai.yaml").write_text(
        "interface:\n"
        '  display_name: "Fancy Skill"\n'
        "  short_description: Does fancy things\n"
        "  default_prompt: Use $fancy to do it.\n"
        "  icon_small: ./assets/icon.png\n"
        "  icon_large: ../../../secret.png\n",
        "utf-8",
    )
    async with multi_server.connect() as client:
        skills = await list_skills(client)
    assert skills["plain"]["description"] == "plain"  # falls back to the name
    assert skills["plain"]["metadata"] == {}
    assert skills["plain"]["path"] == str(plain / "SKILL.md")
    info = skills["fancy"]
    assert info["displayName"] == "Fancy Skill"
    assert info["shortDescription"] == "Does fancy things"
    assert info["defaultPrompt"] == "Use $fancy to do it."
    assert info["iconSmallDataUrl"] == "data:image/png;base64," + base64.b64encode(png).decode()
    assert "iconLargeDataUrl" not in info  # outside the skill directory: never read
    assert info["metadata"] == {
        "name": "fancy",
        "description": "Fancy things",
        "tags": "a, b",
        "always": "true",
        "version": "2",
        "nested": '{"key": "value"}',
    }


async def test_front_matter_that_is_not_valid_yaml_is_read_line_by_line(
    multi_server: ServerUnderTest,
) -> None:
    write_skill(
        workspace_skills(multi_server.workspace),
        "colons",
        "description: Use when: the user asks for it\nbins: sh, env\n",
    )
    async with multi_server.connect() as client:
        skill = (await list_skills(client))["colons"]
        assert skill["description"] == "Use when: the user asks for it"
        assert skill["available"] is True
        read = await client.request("skills/read", {"name": "colons"})
        assert read["metadata"]["bins"] == "sh, env"


async def test_availability_follows_bins_and_env(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = workspace_skills(workspace)
    write_skill(ws, "needs-bin", f"bins: [sh, {MISSING_BIN}]\n")
    write_skill(ws, "needs-env", f"requires:\n  env: [{MISSING_ENV}]\n")
    write_skill(ws, "needs-both", f"bins: {MISSING_BIN}\nenv: {MISSING_ENV}\n")
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        skills = await list_skills(client)
        assert skills["needs-bin"]["available"] is False
        assert skills["needs-bin"]["unavailableReason"] == (
            f"Missing requirements: Executable: {MISSING_BIN}"
        )
        assert skills["needs-env"]["unavailableReason"] == (
            f"Missing requirements: Environment variable: {MISSING_ENV}"
        )
        assert skills["needs-both"]["unavailableReason"] == (
            f"Missing requirements: Executable: {MISSING_BIN}, Environment variable: {MISSING_ENV}"
        )
        available = await list_skills(client, includeUnavailable=False)
        assert not {"needs-bin", "needs-env", "needs-both"} & set(available)
        assert {"code-review", "write-tests"} <= set(available)

        # Availability is computed per request: setting the variable is enough.
        monkeypatch.setenv(MISSING_ENV, "token")
        skills = await list_skills(client)
        assert skills["needs-env"]["available"] is True
        assert "unavailableReason" not in skills["needs-env"]
        assert skills["needs-both"]["unavailableReason"] == (
            f"Missing requirements: Executable: {MISSING_BIN}"
        )


# --- skills/read, skills/view --------------------------------------------------------


async def test_read_returns_the_raw_file_and_view_the_body(server: ServerUnderTest) -> None:
    directory = write_skill(
        workspace_skills(server.workspace),
        "deploy",
        "description: Ship it\nenv: [HOME]\n",
        body="# Deploy\n\nRun the pipeline.",
    )
    raw = (directory / "SKILL.md").read_text("utf-8")
    async with server.connect() as client:
        read = await client.request("skills/read", {"name": "deploy"})
        assert read == {
            "name": "deploy",
            "content": raw,
            "metadata": {"name": "deploy", "description": "Ship it", "env": "HOME"},
        }
        view = await client.request("skills/view", {"name": "DEPLOY"})  # case-insensitive
        assert view == {"name": "deploy", "content": "# Deploy\n\nRun the pipeline."}


async def test_read_without_front_matter_has_no_metadata(multi_server: ServerUnderTest) -> None:
    write_skill(workspace_skills(multi_server.workspace), "bare", None, body="Just text.")
    async with multi_server.connect() as client:
        read = await client.request("skills/read", {"name": "bare"})
        assert read == {"name": "bare", "content": "Just text.\n"}
        view = await client.request("skills/view", {"name": "bare"})
        assert view["content"] == "Just text."


NAMED_METHODS = (
    "skills/read",
    "skills/view",
    "skills/restoreOriginal",
    "skills/setEnabled",
    "skills/uninstall",
)


async def test_unknown_skill_is_32040(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        for method in NAMED_METHODS:
            params: dict[str, Any] = {"name": "no-such-skill"}
            if method == "skills/setEnabled":
                params["enabled"] = False
            failure = await client.fail(method, params)
            assert failure.code == rpc_errors.SKILL_NOT_FOUND, method
            assert failure.message == "Skill not found: no-such-skill"
            # A name is required and must not be blank.
            without_name = {key: value for key, value in params.items() if key != "name"}
            for bad in (without_name, {**params, "name": "   "}):
                failure = await client.fail(method, bad)
                assert failure.code == rpc_errors.INVALID_PARAMS, (method, bad)


# --- skills/restoreOriginal -----------------------------------------------------------


async def test_restore_original_reports_nothing_restored(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        mark = client.mark()
        result = await client.request("skills/restoreOriginal", {"name": "Code-Review"})
        assert result == {"name": "code-review", "restored": False}
        assert config_changes(client, mark) == []


# --- skills/setEnabled -------------------------------------------------------------------


async def test_set_enabled_switches_and_announces(multi_server: ServerUnderTest) -> None:
    write_skill(workspace_skills(multi_server.workspace), "lint")
    async with multi_server.connect("a") as client, multi_server.connect("b") as other:
        mark, other_mark = client.mark(), other.mark()
        result = await client.request("skills/setEnabled", {"name": "LINT", "enabled": False})
        skill = result["skill"]
        assert skill["name"] == "lint" and skill["enabled"] is False
        assert skill["source"] == "workspace"
        changed = await client.notification("workspace/configChanged", start=mark)
        assert changed["source"] == "skills/setEnabled"
        assert changed["regions"] == ["skills"]
        assert changed["changedAt"].endswith("Z")
        # The response comes before the notification.
        methods = [m.get("method", "response") for m in client.messages[mark:]]
        assert methods.index("response") < methods.index("workspace/configChanged")
        assert (await other.notification("workspace/configChanged", start=other_mark)) == changed
        assert (await list_skills(other))["lint"]["enabled"] is False

        # Already in that state: nothing changes, nothing is announced.
        mark = client.mark()
        again = await client.request("skills/setEnabled", {"name": "lint", "enabled": False})
        assert again["skill"]["enabled"] is False
        await client.quiet_after(mark)

        mark = client.mark()
        result = await client.request("skills/setEnabled", {"name": "lint", "enabled": True})
        assert result["skill"]["enabled"] is True
        changed = await client.notification("workspace/configChanged", start=mark)
        assert changed["source"] == "skills/setEnabled"
        assert (await list_skills(client))["lint"]["enabled"] is True


async def test_disabled_skills_survive_a_restart(workspace: Path) -> None:
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        await client.request("skills/setEnabled", {"name": "write-tests", "enabled": False})
        await client.request("skills/setEnabled", {"name": "code-review", "enabled": False})
        await client.request("skills/setEnabled", {"name": "code-review", "enabled": True})
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        skills = await list_skills(client)
        assert skills["write-tests"]["enabled"] is False
        assert skills["code-review"]["enabled"] is True


async def test_config_change_opt_out_is_respected(multi_server: ServerUnderTest) -> None:
    async with multi_server.connect(capabilities={"configChange": False}) as client:
        mark = client.mark()
        await client.request("skills/setEnabled", {"name": "write-tests", "enabled": False})
        await client.quiet_after(mark)


# --- skills/uninstall ----------------------------------------------------------------------


async def test_uninstall_workspace_skill_reveals_what_it_shadowed(
    multi_server: ServerUnderTest,
) -> None:
    ws = workspace_skills(multi_server.workspace)
    directory = write_skill(ws, "code-review", "description: local override\n")
    (directory / "scripts").mkdir()
    (directory / "scripts" / "run.sh").write_text("echo hi\n", "utf-8")
    async with multi_server.connect() as client:
        mark = client.mark()
        result = await client.request("skills/uninstall", {"name": "code-review"})
        assert result == {
            "name": "code-review",
            "uninstalled": True,
            "source": "workspace",
            "removedSourcePath": str(directory),
            "removedVariantCount": 0,
        }
        assert not directory.exists()
        assert ws.is_dir()  # only the skill's own directory went away
        changed = await client.notification("workspace/configChanged", start=mark)
        assert changed["source"] == "skills/uninstall" and changed["regions"] == ["skills"]
        skills = await list_skills(client)
        assert skills["code-review"]["source"] == "builtin"
        assert (BUILTIN_ROOT / "code-review" / "SKILL.md").is_file()


async def test_uninstall_user_skill(multi_server: ServerUnderTest, user_roots: UserRoots) -> None:
    directory = write_skill(user_roots.skills, "mine")
    async with multi_server.connect() as client:
        result = await client.request("skills/uninstall", {"name": "MINE"})
        assert result["source"] == "user" and result["name"] == "mine"
        assert result["removedSourcePath"] == str(directory)
        assert not directory.exists() and user_roots.skills.is_dir()
        assert "mine" not in await list_skills(client)
        failure = await client.fail("skills/uninstall", {"name": "mine"})
        assert failure.code == rpc_errors.SKILL_NOT_FOUND


async def test_uninstall_clears_the_disabled_switch(multi_server: ServerUnderTest) -> None:
    ws = workspace_skills(multi_server.workspace)
    write_skill(ws, "temp")
    async with multi_server.connect() as client:
        await client.request("skills/setEnabled", {"name": "temp", "enabled": False})
        await client.request("skills/uninstall", {"name": "temp"})
        write_skill(ws, "temp")  # installed again later: starts enabled
        assert (await list_skills(client))["temp"]["enabled"] is True


async def test_builtin_and_plugin_skills_cannot_be_uninstalled(
    workspace: Path, tmp_path: Path
) -> None:
    plugin_skills = tmp_path / "plugin" / "skills"
    plugin_dir = write_skill(plugin_skills, "from-plugin")
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        service(sut).add_source(root=plugin_skills, plugin_id="p1", plugin_display_name="P One")
        for name, source in (("write-tests", "builtin"), ("from-plugin", "plugin")):
            mark = client.mark()
            failure = await client.fail("skills/uninstall", {"name": name})
            assert failure.code == rpc_errors.INVALID_PARAMS
            assert failure.data == {
                "detail": f"Skill '{name}' is {source} and cannot be uninstalled directly."
            }
            await client.quiet_after(mark)
        assert (BUILTIN_ROOT / "write-tests" / "SKILL.md").is_file()
        assert (plugin_dir / "SKILL.md").is_file()


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
async def test_uninstall_of_a_linked_skill_removes_only_the_link(
    multi_server: ServerUnderTest, tmp_path: Path
) -> None:
    outside = write_skill(tmp_path / "elsewhere", "linked")
    ws = workspace_skills(multi_server.workspace)
    ws.mkdir(parents=True)
    (ws / "linked").symlink_to(outside, target_is_directory=True)
    async with multi_server.connect() as client:
        assert (await list_skills(client))["linked"]["source"] == "workspace"
        result = await client.request("skills/uninstall", {"name": "linked"})
        assert result["removedSourcePath"] == str(ws / "linked")
    assert not (ws / "linked").exists() and not (ws / "linked").is_symlink()
    assert (outside / "SKILL.md").is_file()  # nothing outside the root was touched


# --- plugin sources --------------------------------------------------------------------------


async def test_plugin_sources_rank_between_workspace_and_builtin(
    workspace: Path, tmp_path: Path, user_roots: UserRoots
) -> None:
    plugin_skills = tmp_path / "review-tools" / "skills"
    write_skill(plugin_skills, "pr-review", "description: from the plugin\n")
    write_skill(plugin_skills, "write-tests", "description: plugin tests\n")  # beats built-in
    write_skill(plugin_skills, "local", "description: plugin local\n")  # loses to workspace
    write_skill(workspace_skills(workspace), "local", "description: workspace local\n")
    write_skill(user_roots.skills, "pr-review", "description: user copy\n")  # loses to plugin
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        skills_service = service(sut)
        assert "pr-review" in await list_skills(client)  # the user copy, for now
        skills_service.add_source(
            root=plugin_skills, plugin_id="review-tools", plugin_display_name="Review Tools"
        )
        skills = await list_skills(client)
        assert skills["pr-review"]["source"] == "plugin"
        assert skills["pr-review"]["pluginId"] == "review-tools"
        assert skills["pr-review"]["pluginDisplayName"] == "Review Tools"
        assert skills["pr-review"]["description"] == "from the plugin"
        assert skills["write-tests"]["source"] == "plugin"
        assert skills["local"]["source"] == "workspace"
        view = await client.request("skills/view", {"name": "pr-review"})
        assert view["content"] == "Do it well."

        described = await skills_service.skills_under(plugin_skills, "review-tools")
        assert sorted(info.name for info in described) == ["local", "pr-review", "write-tests"]

        skills_service.remove_source("review-tools")
        skills = await list_skills(client)
        assert skills["pr-review"]["source"] == "user"
        assert skills["write-tests"]["source"] == "builtin"
        with pytest.raises(ValueError):
            skills_service.add_source(root=plugin_skills, plugin_id="x", kind="workspace")


# --- skillRef -----------------------------------------------------------------------------------


async def test_skill_ref_puts_the_body_into_the_system_prompt(workspace: Path) -> None:
    write_skill(
        workspace_skills(workspace),
        "haiku",
        "description: Answer in haiku\n",
        body="Always answer as a haiku of three lines.",
    )
    provider = RecordingProvider()
    async with (
        running_server("memory", workspace, provider=provider) as sut,
        sut.connect() as client,
    ):
        thread_id = await new_thread(client)
        parts = [
            {"type": "text", "text": "describe the sea"},
            {"type": "skillRef", "name": "$haiku"},
        ]
        turn_id, terminal = await run_turn(client, thread_id, parts)
        assert terminal["method"] == "turn/completed"
        system = provider.requests[0].system or ""
        assert "Always answer as a haiku of three lines." in system
        assert 'The user invoked the skill "haiku" (Answer in haiku)' in system
        assert provider.requests[0].messages[-1].content == "describe the sea\n\n[skill: haiku]"
        message = one_item(client, turn_id, "userMessage")["payload"]
        assert message["nativeInputParts"][1] == {"type": "skillRef", "name": "$haiku"}
        assert message["materializedInputParts"] == [
            {"type": "text", "text": "describe the sea"},
            {"type": "text", "text": "[skill: haiku]"},
        ]
        stored = await read_turn(client, thread_id, turn_id)
        assert stored["items"][0]["payload"]["materializedInputParts"][1]["text"] == (
            "[skill: haiku]"
        )

        # The skill applies to that turn only.
        await run_turn(client, thread_id, "and the sky?")
        assert "haiku of three lines" not in (provider.requests[-1].system or "")


async def test_skill_ref_turn_over_every_transport(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        thread_id = await new_thread(client)
        parts = [
            {"type": "text", "text": "check this"},
            {"type": "skillRef", "name": "code-review"},
        ]
        turn_id, terminal = await run_turn(client, thread_id, parts)
        assert terminal["method"] == "turn/completed"
        answer = one_item(client, turn_id, "agentMessage")["payload"]["text"]
        assert answer == "You said: check this [skill: code-review]"


async def test_skill_ref_refusals_submit_nothing(
    server: ServerUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = workspace_skills(server.workspace)
    write_skill(ws, "off")
    write_skill(ws, "needs-env", f"env: [{MISSING_ENV}]\n")
    async with server.connect() as client:
        await client.request("skills/setEnabled", {"name": "off", "enabled": False})
        thread_id = await new_thread(client)
        cases = [
            ("ghost", rpc_errors.SKILL_NOT_FOUND, "Skill not found: ghost"),
            ("off", rpc_errors.INVALID_PARAMS, "Skill 'off' is disabled in this workspace."),
            (
                "needs-env",
                rpc_errors.INVALID_PARAMS,
                f"Skill 'needs-env' is unavailable: Missing requirements: "
                f"Environment variable: {MISSING_ENV}",
            ),
            ("  $ ", rpc_errors.INVALID_PARAMS, "skillRef: 'name' must not be empty"),
        ]
        for name, code, text in cases:
            mark = client.mark()
            parts = [{"type": "text", "text": "hi"}, {"type": "skillRef", "name": name}]
            failure = await client.fail("turn/start", {"threadId": thread_id, "input": parts})
            assert failure.code == code, failure
            if code == rpc_errors.SKILL_NOT_FOUND:
                assert failure.message == text
            else:
                assert failure.data == {"detail": text}
            await client.quiet_after(mark)  # no turn/started, nothing else
        thread = await client.request("thread/read", {"threadId": thread_id, "includeTurns": True})
        assert thread["thread"]["turns"] == []
