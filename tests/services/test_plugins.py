"""The plugin family (reference §3.8): the built-in catalog, install/remove with
the ``.builtin`` marker, enable switches, diagnostics for bad manifests, and
what an enabled plugin contributes: skills and read-only MCP servers."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from appserver import __version__
from appserver.protocol import errors as rpc_errors
from tests.support.client import RpcClient
from tests.support.mcp_helpers import ECHO_TOOLS, call, current_status, echo_config, wait_status
from tests.support.plugins_helpers import (
    BUILTIN_ID,
    BUILTIN_SERVER,
    codes,
    echo_mcp_file,
    manifest,
    plugin_list,
    plugins_dir,
    skill_file,
    view,
    write_plugin,
)
from tests.support.servers import ServerUnderTest, running_server

REGIONS = ["plugins", "skills", "mcp"]
AUTHORING_ID = "plugin-authoring"
CATALOG_ROOT = Path(__file__).resolve().parents[2] / "appserver" / "builtin" / "plugins"
SEARCH = "mcp__workspace-tools_files__search_text"


async def skill_names(client: RpcClient) -> dict[str, dict[str, Any]]:
    skills = (await client.request("skills/list"))["skills"]
    return {skill["name"]: skill for skill in skills}


async def install(client: RpcClient, plugin_id: str = BUILTIN_ID) -> dict[str, Any]:
    plugin: dict[str, Any] = (await client.request("plugin/install", {"id": plugin_id}))["plugin"]
    return plugin


async def test_catalog_entry_before_install(server: ServerUnderTest) -> None:
    async with server.connect(initialize=False) as client:
        assert (await client.initialize())["capabilities"]["pluginManagement"] is True
        listed = await plugin_list(client)
        assert listed["diagnostics"] == []
        # Sorted by display name: "Plugin Authoring", "Workspace Tools".
        authoring, plugin = listed["plugins"]
        assert authoring["id"] == AUTHORING_ID and authoring["mcpServers"] == []
        assert [skill["name"] for skill in authoring["skills"]] == ["create-plugin"]
        assert (authoring["installed"], authoring["installable"]) == (False, True)
        interface = plugin.pop("interface")
        assert plugin == {
            "id": BUILTIN_ID,
            "displayName": "Workspace Tools",
            "description": "Find files and search text across the workspace.",
            "version": "1.0.0",
            "enabled": False,
            "installed": False,
            "installable": True,
            "removable": False,
            "source": "builtin",
            "rootPath": str(CATALOG_ROOT / "workspace_tools"),
            "functions": [],
            "skills": [
                {
                    "name": "workspace-search",
                    "description": plugin["skills"][0]["description"],
                    "enabled": False,
                }
            ],
            "mcpServers": [
                {
                    "name": "files",
                    "runtimeName": BUILTIN_SERVER,
                    "transport": "stdio",
                    "enabled": True,
                    "active": False,
                }
            ],
            "diagnostics": [],
        }
        assert interface["shortDescription"] and interface["capabilities"] == ["Skill", "MCP"]
        assert interface["logoDataUrl"].startswith("data:image/svg+xml;base64,")
        assert "logo" not in interface
        assert await view(client, "WORKSPACE-TOOLS") == {**plugin, "interface": interface}
        # Nothing is active before installation.
        assert await client.request("mcp/list") == {"servers": []}
        assert "workspace-search" not in await skill_names(client)


async def test_install_and_remove_the_builtin_plugin(workspace: Path) -> None:
    root = plugins_dir(workspace) / BUILTIN_ID
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        mark = client.mark()
        plugin = await install(client)
        assert (plugin["installed"], plugin["installable"], plugin["removable"]) == (
            True,
            False,
            True,
        )
        assert plugin["enabled"] is True and plugin["source"] == "workspace"
        assert plugin["rootPath"] == str(root)
        assert plugin["mcpServers"][0]["active"] is True
        assert plugin["skills"][0]["enabled"] is True
        assert (root / ".builtin").read_text().strip() == __version__
        for relative in (".craft-plugin/plugin.json", ".mcp.json", "server.py"):
            assert (root / relative).is_file(), relative
        assert not list(root.rglob("__pycache__"))
        changed = await client.notification("workspace/configChanged", start=mark)
        assert changed["source"] == "plugin/install" and changed["regions"] == REGIONS

        status = await wait_status(client, BUILTIN_SERVER, start=mark)
        assert status["startupState"] == "ready" and status["toolCount"] == 3
        origin = {
            "kind": "plugin",
            "pluginId": BUILTIN_ID,
            "pluginDisplayName": "Workspace Tools",
            "declaredName": "files",
        }
        assert status["origin"] == origin and status["readOnly"] is True
        [server] = (await client.request("mcp/list"))["servers"]
        assert server == {
            "name": BUILTIN_SERVER,
            "enabled": True,
            "transport": "stdio",
            "command": sys.executable,
            "args": [str(root / "server.py"), "--root", str(workspace)],
            "toolTimeoutSec": 30.0,
            "origin": origin,
            "readOnly": True,
        }
        skill = (await skill_names(client))["workspace-search"]
        assert skill["source"] == "plugin" and skill["pluginId"] == BUILTIN_ID

        # Installing again changes nothing.
        assert await install(client) == await view(client, BUILTIN_ID)
        await client.settle()
        assert len(client.notifications("workspace/configChanged")) == 1

        mark = client.mark()
        removed = (await client.request("plugin/remove", {"id": BUILTIN_ID}))["plugin"]
        assert (removed["installed"], removed["installable"], removed["source"]) == (
            False,
            True,
            "builtin",
        )
        assert not root.exists()
        changed = await client.notification("workspace/configChanged", start=mark)
        assert changed["source"] == "plugin/remove" and changed["regions"] == REGIONS
        assert await client.request("mcp/list") == {"servers": []}
        assert await client.request("mcp/status/list") == {"servers": []}
        assert "workspace-search" not in await skill_names(client)
        assert sut.app is not None
        assert not [name for name in sut.app.engine.tools.names() if name.startswith("mcp__")]
        # Removing what is not installed returns it unchanged.
        again = await client.request("plugin/remove", {"id": BUILTIN_ID})
        assert again == {"plugin": removed}


async def test_builtin_plugin_tools_search_the_workspace(workspace: Path) -> None:
    (workspace / "notes.txt").write_text("The Needle is here\nnothing\n")
    (workspace / "src").mkdir()
    (workspace / "src" / "app.py").write_text("x = 1  # needle\n")
    (workspace / "node_modules").mkdir()
    (workspace / "node_modules" / "dep.js").write_text("needle\n")
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        mark = client.mark()
        await install(client)
        assert (await wait_status(client, BUILTIN_SERVER, start=mark))["startupState"] == "ready"
        found = await call(client, SEARCH, {"query": "needle"})
        assert found["success"] is True
        assert found["result"].splitlines() == [
            "notes.txt:1: The Needle is here",
            "src/app.py:1: x = 1  # needle",
        ]
        files = await call(client, "mcp__workspace-tools_files__find_files", {"pattern": "**/*.py"})
        assert files["result"] == "src/app.py"
        summary = await call(client, "mcp__workspace-tools_files__workspace_summary")
        assert "Files: 2" in summary["result"]
        bad = await call(client, SEARCH, {"query": "(", "regex": True})
        assert bad["success"] is False and "invalid regular expression" in bad["result"]


async def test_set_enabled_switches_contributions_and_persists(workspace: Path) -> None:
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        mark = client.mark()
        await install(client)
        await wait_status(client, BUILTIN_SERVER, start=mark)
        mark = client.mark()
        result = await client.request("plugin/setEnabled", {"id": BUILTIN_ID, "enabled": False})
        plugin = result["plugin"]
        assert plugin["enabled"] is False and plugin["installed"] is True
        assert plugin["mcpServers"][0]["active"] is False
        assert plugin["skills"][0]["enabled"] is False
        changed = await client.notification("workspace/configChanged", start=mark)
        assert changed["source"] == "plugin/setEnabled" and changed["regions"] == REGIONS
        assert await client.request("mcp/list") == {"servers": []}
        assert "workspace-search" not in await skill_names(client)
        assert sut.app is not None
        assert not [name for name in sut.app.engine.tools.names() if name.startswith("mcp__")]
        listed = await plugin_list(client)
        assert ("PluginDisabled", "info") in codes(listed["diagnostics"])
        assert (await plugin_list(client, includeDisabled=False))["plugins"] == []
        # Already off: no change, no notification.
        mark = client.mark()
        await client.request("plugin/setEnabled", {"id": BUILTIN_ID, "enabled": False})
        await client.settle()
        assert client.since(mark, "workspace/configChanged") == []
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        assert (await view(client, BUILTIN_ID))["enabled"] is False
        assert await client.request("mcp/list") == {"servers": []}
        mark = client.mark()
        result = await client.request("plugin/setEnabled", {"id": BUILTIN_ID, "enabled": True})
        assert result["plugin"]["enabled"] is True
        assert (await wait_status(client, BUILTIN_SERVER, start=mark))["startupState"] == "ready"
        assert "workspace-search" in await skill_names(client)
        assert [p["id"] for p in (await plugin_list(client, includeDisabled=False))["plugins"]] == [
            BUILTIN_ID
        ]


async def test_user_owned_plugin(workspace: Path) -> None:
    write_plugin(
        workspace,
        "mine",
        manifest("my-plugin", version="2.1"),
        {**skill_file("my-skill", "Does my thing."), **echo_mcp_file()},
    )
    # The user's own plugins (a checkout's would wait for trust: test_trust_workspace.py).
    async with (
        running_server("memory", workspace, trust_workspace=True) as sut,
        sut.connect() as client,
    ):
        # Found on disk, not installed by this server: off until a client enables it,
        # so starting the server never runs a cloned repository's MCP commands.
        first = await plugin_list(client)
        assert first["plugins"][0]["enabled"] is False
        assert ("PluginNotEnabled", "info") in codes(first["diagnostics"])
        assert (await client.request("mcp/status/list"))["servers"] == []
        await client.request("plugin/setEnabled", {"id": "my-plugin", "enabled": True})
        listed = await plugin_list(client)
        assert [p["id"] for p in listed["plugins"]] == ["my-plugin", AUTHORING_ID, BUILTIN_ID]
        plugin = listed["plugins"][0]
        assert (plugin["installed"], plugin["removable"], plugin["installable"]) == (
            True,
            False,
            False,
        )
        assert (plugin["source"], plugin["enabled"], plugin["version"]) == (
            "workspace",
            True,
            "2.1",
        )
        assert plugin["skills"] == [
            {"name": "my-skill", "description": "Does my thing.", "enabled": True}
        ]
        # Its MCP server started with the server.
        status = await current_status(client, "my-plugin:echo")
        assert status["startupState"] == "ready" and status["toolCount"] == ECHO_TOOLS
        server = (await client.request("mcp/get", {"name": "MY-PLUGIN:ECHO"}))["server"]
        assert server["origin"] == {
            "kind": "plugin",
            "pluginId": "my-plugin",
            "pluginDisplayName": "My Plugin",
            "declaredName": "echo",
        }
        assert server["readOnly"] is True
        echoed = await call(client, "mcp__my-plugin_echo__echo", {"text": "from a plugin"})
        assert echoed["result"] == "from a plugin"
        # Plugin servers are read-only here.
        for method, params in (
            ("mcp/upsert", {"server": echo_config("my-plugin:echo")}),
            ("mcp/remove", {"name": "my-plugin:echo"}),
        ):
            failure = await client.fail(method, params)
            assert failure.code == rpc_errors.MCP_SERVER_READ_ONLY
            assert failure.message == "MCP server is read-only: my-plugin:echo"
        # The server never deletes or installs over user-owned plugins.
        failure = await client.fail("plugin/remove", {"id": "my-plugin"})
        assert failure.code == rpc_errors.INVALID_PARAMS and "user-owned" in failure.data["detail"]
        assert (plugins_dir(workspace) / "mine").is_dir()
        failure = await client.fail("plugin/install", {"id": "my-plugin"})
        assert failure.data == {"detail": "Plugin 'my-plugin' is not in the built-in catalog."}
        # But they can be switched off.
        result = await client.request("plugin/setEnabled", {"id": "My-Plugin", "enabled": False})
        assert result["plugin"]["enabled"] is False
        assert await client.request("mcp/list") == {"servers": []}


async def test_workspace_server_shadows_a_plugin_server(workspace: Path) -> None:
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        shadow = echo_config("my-plugin:echo", enabled=False)
        await client.request("mcp/upsert", {"server": shadow})
        write_plugin(
            workspace, "mine", manifest("my-plugin"), {**skill_file("s", "S."), **echo_mcp_file()}
        )
        await client.request("plugin/setEnabled", {"id": "my-plugin", "enabled": True})
        plugin = await view(client, "my-plugin")
        assert plugin["mcpServers"] == [
            {
                "name": "echo",
                "runtimeName": "my-plugin:echo",
                "transport": "stdio",
                "enabled": True,
                "active": False,
                "shadowedBy": "workspace",
            }
        ]
        [server] = (await client.request("mcp/list"))["servers"]
        assert server["origin"] == {"kind": "workspace"} and server["enabled"] is False
        # The workspace entry stays editable; removing it unshadows the plugin's.
        await client.request("mcp/upsert", {"server": {**shadow, "toolTimeoutSec": 9}})
        mark = client.mark()
        await client.request("mcp/remove", {"name": "my-plugin:echo"})
        status = await wait_status(client, "my-plugin:echo", ("ready", "error"), start=mark)
        assert status["startupState"] == "ready" and status["origin"]["kind"] == "plugin"
        assert (await view(client, "my-plugin"))["mcpServers"][0]["active"] is True


async def test_bad_manifests_become_diagnostics(workspace: Path) -> None:
    good_mcp = {".mcp.json": json.dumps({"mcpServers": {"x": {"transport": "stdio"}}})}
    skills = skill_file("s", "A skill.")
    write_plugin(workspace, "broken-json", "{not json")
    write_plugin(workspace, "not-object", "[1, 2]")
    write_plugin(workspace, "no-id", {**manifest("x"), "id": None}, skills)
    write_plugin(workspace, "bad-id", manifest("../evil"), skills)
    write_plugin(workspace, "no-name", manifest("no-name", displayName=" "), skills)
    write_plugin(workspace, "v2", manifest("v2", schemaVersion=2), skills)
    write_plugin(workspace, "escape", manifest("escape", skills="../outside"), skills)
    write_plugin(workspace, "dotdot", manifest("dotdot", skills="./skills/../../x"), skills)
    write_plugin(workspace, "nothing", {**manifest("nothing"), "skills": None})
    write_plugin(workspace, "legacy", manifest("legacy", tools=[{"name": "T"}]), skills)
    write_plugin(workspace, "dup-a", manifest("dup"), skills)
    write_plugin(workspace, "dup-b", manifest("dup"), skills)
    write_plugin(workspace, "empty-dir", None, {"README.md": "no manifest"})
    write_plugin(workspace, "bad-mcp", manifest("bad-mcp"), {**skills, **good_mcp})
    write_plugin(
        workspace, "bad-icon", manifest("bad-icon", interface={"logo": "./missing.png"}), skills
    )
    # The user's own plugins (a checkout's would wait for trust: test_trust_workspace.py).
    async with (
        running_server("memory", workspace, trust_workspace=True) as sut,
        sut.connect() as client,
    ):
        await client.request("plugin/setEnabled", {"id": "bad-mcp", "enabled": True})
        listed = await plugin_list(client)
        found = codes(listed["diagnostics"])
        assert {
            ("InvalidPluginManifestJson", "error"),
            ("InvalidPluginManifest", "error"),
            ("InvalidPluginId", "error"),
            ("MissingPluginDisplayName", "error"),
            ("UnsupportedPluginManifestVersion", "error"),
            ("InvalidPluginManifestPath", "error"),
            ("MissingPluginCapabilities", "error"),
            ("UnsupportedPluginNativeTools", "warning"),
            ("DuplicatePluginId", "warning"),
            ("PluginManifestMissing", "warning"),
            ("InvalidPluginMcpServer", "warning"),
            ("InvalidPluginInterfaceAsset", "warning"),
        } <= found
        for diagnostic in listed["diagnostics"]:
            assert diagnostic["path"].startswith(str(plugins_dir(workspace)))
            assert diagnostic["message"]
        loaded = {p["id"] for p in listed["plugins"]}
        assert loaded == {"legacy", "dup", "bad-mcp", "bad-icon", AUTHORING_ID, BUILTIN_ID}
        [dup] = [p for p in listed["plugins"] if p["id"] == "dup"]
        assert dup["rootPath"] == str(plugins_dir(workspace) / "dup-a")
        legacy = await view(client, "legacy")
        own = {c for c in codes(legacy["diagnostics"]) if c[0] != "PluginNotEnabled"}
        assert own == {("UnsupportedPluginNativeTools", "warning")}
        assert legacy["functions"] == []
        bad_mcp = await view(client, "bad-mcp")
        [problem] = bad_mcp["diagnostics"]
        assert problem["message"] == (
            "MCP server 'x': 'command' is required for the stdio transport."
        )
        assert bad_mcp["mcpServers"] == []
        paths = [
            d["message"] for d in listed["diagnostics"] if d["code"] == "InvalidPluginManifestPath"
        ]
        assert sorted(paths) == [
            "Manifest path 'skills' is invalid: it must not contain '..'.",
            "Manifest path 'skills' is invalid: it must start with './'.",
        ]
        assert await client.request("mcp/list") == {"servers": []}


async def test_unknown_ids_and_catalog_only_entries(multi_server: ServerUnderTest) -> None:
    async with multi_server.connect() as client:
        for method, params in (
            ("plugin/view", {"id": "nope"}),
            ("plugin/install", {"id": "nope"}),
            ("plugin/remove", {"id": "nope"}),
            ("plugin/setEnabled", {"id": "nope", "enabled": True}),
        ):
            failure = await client.fail(method, params)
            assert failure.code == rpc_errors.INVALID_PARAMS
            assert failure.data == {"detail": "Plugin 'nope' was not found."}
        failure = await client.fail("plugin/setEnabled", {"id": BUILTIN_ID, "enabled": True})
        assert failure.data == {"detail": f"Plugin '{BUILTIN_ID}' is not installed."}
        for method, params in (
            ("plugin/view", {"id": "  "}),
            ("plugin/view", {}),
            ("plugin/setEnabled", {"id": BUILTIN_ID}),
            ("plugin/list", {"includeDisabled": "maybe"}),
        ):
            assert (await client.fail(method, params)).code == rpc_errors.INVALID_PARAMS


async def test_install_never_overwrites_a_user_owned_directory(workspace: Path) -> None:
    target = write_plugin(workspace, BUILTIN_ID, None, {"README.md": "mine"})
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        failure = await client.fail("plugin/install", {"id": BUILTIN_ID})
        assert failure.code == rpc_errors.INVALID_PARAMS
        assert "user-owned" in failure.data["detail"]
        assert (target / "README.md").read_text() == "mine"
        assert not (target / ".builtin").exists()


async def test_a_user_copy_of_a_catalog_plugin_counts_as_installed(workspace: Path) -> None:
    copy = write_plugin(workspace, "my-copy", manifest(BUILTIN_ID), skill_file("s", "S."))
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        plugin = await install(client)
        assert plugin["rootPath"] == str(copy) and plugin["removable"] is False
        assert not (plugins_dir(workspace) / BUILTIN_ID).exists()
        assert client.notifications("workspace/configChanged") == []


async def test_install_refreshes_a_copy_from_another_version(workspace: Path) -> None:
    root = plugins_dir(workspace) / BUILTIN_ID
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        await install(client)
        (root / ".builtin").write_text("0.0.1\n")
        skill = root / "skills" / "workspace-search" / "SKILL.md"
        skill.unlink()
        mark = client.mark()
        plugin = await install(client)
        assert plugin["skills"][0]["name"] == "workspace-search" and skill.is_file()
        assert (root / ".builtin").read_text().strip() == __version__
        changed = await client.notification("workspace/configChanged", start=mark)
        assert changed["source"] == "plugin/install"
        assert not [p for p in plugins_dir(workspace).iterdir() if p.name.startswith(".")]


async def test_skill_only_catalog_plugin(workspace: Path) -> None:
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        plugin = await install(client, AUTHORING_ID)
        assert plugin["enabled"] is True and plugin["mcpServers"] == []
        skill = (await skill_names(client))["create-plugin"]
        assert (skill["source"], skill["pluginId"], skill["pluginDisplayName"]) == (
            "plugin",
            AUTHORING_ID,
            "Plugin Authoring",
        )
        view_result = (await client.request("skills/view", {"name": "create-plugin"}))["content"]
        assert view_result.startswith("# Creating a plugin")
        # The skill's own switch shows in the plugin's skill list.
        await client.request("skills/setEnabled", {"name": "create-plugin", "enabled": False})
        assert (await view(client, AUTHORING_ID))["skills"][0]["enabled"] is False
        await client.request("plugin/remove", {"id": AUTHORING_ID})
        assert "create-plugin" not in await skill_names(client)
        assert await client.request("mcp/list") == {"servers": []}
