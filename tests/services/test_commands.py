"""The commands family end to end (reference §3.4, §3.1 commandRef; DotCraft's
AppServerTurnTests for commandRef): command/list, command/execute with the
built-ins and custom Markdown commands, and commandRef expansion in turns."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from appserver.protocol import errors as rpc_errors
from appserver.services.commands.catalog import expand
from tests.support.client import RpcClient
from tests.support.helpers import IDENTITY, identity, start_thread
from tests.support.servers import ServerUnderTest, running_server
from tests.support.skills_files import UserRoots, isolate_user_roots, write_command
from tests.support.turns import new_thread, one_item, run_turn, start_turn, wait_terminal

SLOW = "?stream 400\n?delay 20"
ALWAYS_BUILTINS = ["/new", "/stop", "/help"]
GATED = {"/cron": "cronManagement", "/heartbeat": "heartbeatManagement"}


@pytest.fixture(autouse=True)
def user_roots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> UserRoots:
    return isolate_user_roots(tmp_path, monkeypatch)


def commands_dir(workspace: Path) -> Path:
    return workspace / ".craft" / "commands"


async def list_commands(client: RpcClient, **params: Any) -> dict[str, dict[str, Any]]:
    result = await client.request("command/list", params)
    return {command["name"]: command for command in result["commands"]}


async def execute(
    client: RpcClient, thread_id: str, command: str, timeout: float = 10, **params: Any
) -> Any:
    return await client.request(
        "command/execute", {"threadId": thread_id, "command": command, **params}, timeout
    )


async def capabilities(sut: ServerUnderTest) -> dict[str, Any]:
    async with sut.connect(initialize=False) as client:
        result: dict[str, Any] = (await client.initialize())["capabilities"]
        return result


REVIEW = """---
description: Review a file
argument-hint: <path> [focus]
---
Review $1 with a focus on $2.

Full request: $ARGUMENTS ($3)
"""


# --- command/list --------------------------------------------------------------------


async def test_list_builtins_then_custom_commands(
    server: ServerUnderTest, user_roots: UserRoots
) -> None:
    root = commands_dir(server.workspace)
    write_command(root, "review.md", REVIEW)
    write_command(root, "Frontend/Component.md", "# Make a component\n\nBuild $ARGUMENTS.")
    write_command(root, "admin-only.md", "---\nrequiresAdmin: true\n---\nDangerous.")
    write_command(root, "new.md", "A custom /new never shadows the built-in.")
    write_command(root, "notes.txt", "not a command")
    write_command(root, ".hidden.md", "hidden")
    write_command(root, "two words.md", "not invocable")
    write_command(user_roots.commands, "review.md", "---\ndescription: user copy\n---\nX")
    write_command(user_roots.commands, "mine.md", "")
    async with server.connect(initialize=False) as client:
        caps = (await client.initialize())["capabilities"]
        assert caps["commandManagement"] is True
        commands = await list_commands(client)
    builtins = [name for name, info in commands.items() if info["category"] == "builtin"]
    expected = ALWAYS_BUILTINS + [name for name, flag in GATED.items() if caps.get(flag)]
    assert builtins == expected
    assert list(commands)[len(builtins) :] == [
        "/admin-only",
        "/frontend:component",
        "/mine",
        "/review",
    ]
    assert commands["/new"] == {
        "name": "/new",
        "aliases": [],
        "description": "Start a new conversation (a fresh thread with the same identity)",
        "category": "builtin",
        "requiresAdmin": False,
    }
    assert commands["/review"] == {
        "name": "/review",
        "aliases": [],
        "description": "Review a file",  # the workspace file wins over the user's
        "category": "custom",
        "requiresAdmin": False,
        "argumentHint": "<path> [focus]",
    }
    assert commands["/frontend:component"]["description"] == "Make a component"
    assert commands["/admin-only"]["requiresAdmin"] is True
    assert commands["/mine"]["description"] == "(no description)"


async def test_list_options(multi_server: ServerUnderTest) -> None:
    write_command(commands_dir(multi_server.workspace), "review.md", REVIEW)
    async with multi_server.connect() as client:
        custom_only = await list_commands(client, includeBuiltins=False)
        assert list(custom_only) == ["/review"]
        chinese = await list_commands(client, language="zh")
        assert chinese["/help"]["description"] == "列出可用命令"
        assert chinese["/review"]["description"] == "Review a file"
        unknown_language = await list_commands(client, language="xx")
        assert unknown_language["/help"]["description"] == "List the available commands"


async def test_gated_builtins_follow_their_services(workspace: Path) -> None:
    # Cron can be switched off in the workspace config; while a service is off its
    # command is hidden and answers -32062.
    craft = workspace / ".craft"
    craft.mkdir()
    (craft / "config.json").write_text(json.dumps({"Cron": {"Enabled": False}}), "utf-8")
    async with running_server("memory", workspace) as sut:
        caps = await capabilities(sut)
        if caps.get("cronManagement"):
            pytest.skip("the cron family ignores Cron.Enabled=false")
        async with sut.connect() as client:
            commands = await list_commands(client)
            thread_id = await new_thread(client)
            for name, flag in GATED.items():
                if caps.get(flag):
                    assert name in commands
                    continue
                assert name not in commands
                failure = await client.fail(
                    "command/execute", {"threadId": thread_id, "command": name}
                )
                assert failure.code == rpc_errors.COMMAND_SERVICE_UNAVAILABLE
                assert failure.message == f"Service unavailable for command: {name}"


# --- command/execute: errors ------------------------------------------------------------


async def test_execute_errors(server: ServerUnderTest) -> None:
    write_command(commands_dir(server.workspace), "secret.md", "---\nrequiresAdmin: true\n---\nS")
    async with server.connect() as client:
        thread_id = await new_thread(client)
        failure = await client.fail("command/execute", {"threadId": thread_id, "command": "/nope"})
        assert failure.code == rpc_errors.COMMAND_NOT_FOUND
        assert failure.message == "Command not found: /nope"

        failure = await client.fail(
            "command/execute", {"threadId": thread_id, "command": "/secret"}
        )
        assert failure.code == rpc_errors.COMMAND_PERMISSION_DENIED
        assert failure.message == "Permission denied for command: /secret"
        member = {"senderId": "u1", "senderRole": "member"}
        failure = await client.fail(
            "command/execute", {"threadId": thread_id, "command": "/secret", "sender": member}
        )
        assert failure.code == rpc_errors.COMMAND_PERMISSION_DENIED
        admin = {"senderId": "u1", "senderRole": "Admin"}
        result = await execute(client, thread_id, "/secret", sender=admin)
        assert result == {"handled": True, "isMarkdown": False, "expandedPrompt": "S"}

        for command in ("/help", "/secret"):
            failure = await client.fail(
                "command/execute",
                {"threadId": "thread_19700101_zzzzzz", "command": command, "sender": admin},
            )
            assert failure.code == rpc_errors.THREAD_NOT_FOUND
        for params in (
            {"threadId": thread_id},
            {"threadId": thread_id, "command": "  "},
            {"threadId": thread_id, "command": "/"},
            {"command": "/help"},
        ):
            failure = await client.fail("command/execute", params)
            assert failure.code == rpc_errors.INVALID_PARAMS, params


# --- custom commands ------------------------------------------------------------------------


async def test_custom_command_expands_arguments(multi_server: ServerUnderTest) -> None:
    write_command(commands_dir(multi_server.workspace), "review.md", REVIEW)
    write_command(commands_dir(multi_server.workspace), "plain.md", "Summarise the repository.")
    async with multi_server.connect() as client:
        thread_id = await new_thread(client)
        mark = client.mark()
        result = await execute(client, thread_id, "/review", arguments=["src/a.py", "errors"])
        assert result == {
            "handled": True,
            "isMarkdown": False,
            "expandedPrompt": "Review src/a.py with a focus on errors.\n\n"
            "Full request: src/a.py errors ()",
        }
        # Arguments may also follow the name; the slash and case do not matter.
        same = await execute(client, thread_id, "REVIEW src/a.py", arguments=["errors"])
        assert same == result
        # A body without placeholders keeps the arguments.
        plain = await execute(client, thread_id, "/plain", arguments=["briefly"])
        assert plain["expandedPrompt"] == "Summarise the repository.\n\nbriefly"
        await client.quiet_after(mark)  # nothing submitted, nothing announced
        thread = await client.request("thread/read", {"threadId": thread_id, "includeTurns": True})
        assert thread["thread"]["turns"] == []


def test_expand_substitutes_in_one_pass() -> None:
    assert expand("Fix $1 then $2 ($ARGUMENTS)", "a.py $1") == "Fix a.py then $1 (a.py $1)"
    assert expand("$1$10$2", "x") == "x"
    assert expand("No placeholders.", "") == "No placeholders."
    assert expand("  Use $ARGUMENTS  ", "  spaced   words ") == "Use spaced   words"


# --- built-ins ---------------------------------------------------------------------------------


async def test_new_starts_a_thread_with_the_same_identity(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        who = identity(channelName="telegram", userId="u42", channelContext="chat:7")
        config = {"mode": "plan", "model": "m-1"}
        old = await start_thread(client, identity=who, config=config, displayName="Old")
        await client.notification("thread/started")
        mark = client.mark()
        result = await execute(client, old["id"], "/new")
        assert result["handled"] is True and result["sessionReset"] is True
        assert result["createdLazily"] is False and result["archivedThreadIds"] == []
        assert result["isMarkdown"] is False and result["message"]
        fresh = result["thread"]
        assert fresh["id"] != old["id"] and fresh["status"] == "active"
        for key in ("originChannel", "userId", "channelContext", "workspacePath", "historyMode"):
            assert fresh[key] == old[key], key
        assert fresh["configuration"] == config
        assert "displayName" not in fresh and fresh["turns"] == []
        # thread/started follows the response.
        started = await client.notification("thread/started", start=mark)
        assert started["thread"]["id"] == fresh["id"]
        methods = [m.get("method", "response") for m in client.messages[mark:]]
        assert methods.index("response") < methods.index("thread/started")
        # The old thread is left alone (not archived).
        read = await client.request("thread/read", {"threadId": old["id"]})
        assert read["thread"]["status"] == "active"
        listed = await client.request("thread/list", {"identity": who})
        assert {summary["id"] for summary in listed["data"]} == {fresh["id"], old["id"]}


async def test_stop_interrupts_the_running_turn(server: ServerUnderTest) -> None:
    with anyio.fail_after(20):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            mark = client.mark()
            turn_id = await start_turn(client, thread_id, SLOW)
            await client.notification("item/agentMessage/delta", start=mark)
            result = await execute(client, thread_id, "/stop")
            assert result == {
                "handled": True,
                "message": f"Stopped the running turn ({turn_id}).",
                "isMarkdown": False,
            }
            terminal = await wait_terminal(client, turn_id, start=mark)
            assert terminal["method"] == "turn/cancelled"
            assert terminal["params"]["reason"] == "interrupted"

            idle = await new_thread(client)
            result = await execute(client, idle, "/stop")
            assert result == {
                "handled": True,
                "message": "No turn is running.",
                "isMarkdown": False,
            }


async def test_help_lists_the_commands_as_markdown(server: ServerUnderTest) -> None:
    write_command(commands_dir(server.workspace), "review.md", REVIEW)
    async with server.connect() as client:
        thread_id = await new_thread(client)
        result = await execute(client, thread_id, "help")
        assert result["handled"] is True and result["isMarkdown"] is True
        text = result["message"]
        assert text.startswith("**Commands**")
        assert "- `/new` — Start a new conversation" in text
        assert "- `/stop` — Stop the turn" in text
        assert "**Custom commands**" in text
        assert "- `/review <path> [focus]` — Review a file" in text
        assert text.index("/help") < text.index("**Custom commands**") < text.index("/review")


async def test_cron_and_heartbeat_delegate_to_their_services(workspace: Path) -> None:
    async with running_server("memory", workspace) as sut:
        caps = await capabilities(sut)
        async with sut.connect() as client:
            thread_id = await new_thread(client)
            if caps.get("cronManagement"):
                result = await execute(client, thread_id, "/cron")
                assert result["handled"] is True and result["isMarkdown"] is True
                assert result["message"] == "No cron jobs."
                usage = await execute(client, thread_id, "/cron", arguments=["frobnicate"])
                assert usage["message"] == "Usage: /cron [list]"
            if caps.get("heartbeatManagement"):
                # No HEARTBEAT.md: nothing to do, no turn.
                result = await execute(client, thread_id, "/heartbeat")
                assert result == {
                    "handled": True,
                    "message": "Heartbeat finished: nothing to report.",
                    "isMarkdown": False,
                }
                (workspace / ".craft" / "HEARTBEAT.md").write_text(
                    "# Tasks\n\n- check the build\n", "utf-8"
                )
                result = await execute(client, thread_id, "/heartbeat", timeout=20)
                assert result["handled"] is True
                assert result["message"].startswith(("Heartbeat result:", "Heartbeat failed:"))
            if not caps.get("cronManagement") and not caps.get("heartbeatManagement"):
                pytest.skip("neither the cron nor the heartbeat service is installed")


# --- commandRef in turn/start ----------------------------------------------------------------


async def test_command_ref_expands_into_the_prompt(server: ServerUnderTest) -> None:
    write_command(commands_dir(server.workspace), "review.md", REVIEW)
    async with server.connect() as client:
        thread_id = await new_thread(client)
        parts = [
            {"type": "commandRef", "name": "/review", "argsText": "src/a.py errors"},
            {"type": "text", "text": "please"},
        ]
        turn_id, terminal = await run_turn(client, thread_id, parts)
        assert terminal["method"] == "turn/completed"
        expanded = "Review src/a.py with a focus on errors.\n\nFull request: src/a.py errors ()"
        message = one_item(client, turn_id, "userMessage")["payload"]
        assert message["nativeInputParts"][0] == parts[0]
        assert message["materializedInputParts"] == [
            {"type": "text", "text": expanded},
            {"type": "text", "text": "please"},
        ]
        answer = one_item(client, turn_id, "agentMessage")["payload"]["text"]
        assert answer == (
            "You said: Review src/a.py with a focus on errors. "
            "Full request: src/a.py errors () please"
        )


async def test_command_ref_from_raw_text(multi_server: ServerUnderTest) -> None:
    write_command(commands_dir(multi_server.workspace), "echo.md", "Echo: $ARGUMENTS")
    async with multi_server.connect() as client:
        thread_id = await new_thread(client)
        parts = [{"type": "commandRef", "name": "", "rawText": "/echo hello world"}]
        turn_id, _ = await run_turn(client, thread_id, parts)
        message = one_item(client, turn_id, "userMessage")["payload"]
        assert message["materializedInputParts"] == [{"type": "text", "text": "Echo: hello world"}]


@pytest.mark.parametrize("name", ["/new", "stop", "/HELP", "/cron", "/heartbeat"])
async def test_builtin_command_ref_is_refused_and_nothing_is_submitted(
    multi_server: ServerUnderTest, name: str
) -> None:
    async with multi_server.connect() as client:
        thread_id = await new_thread(client)
        for parts in (
            [{"type": "commandRef", "name": name}],
            [{"type": "text", "text": "hello"}, {"type": "commandRef", "name": name}],
        ):
            mark = client.mark()
            failure = await client.fail("turn/start", {"threadId": thread_id, "input": parts})
            assert failure.code == rpc_errors.INVALID_PARAMS
            canonical = "/" + name.lstrip("/").lower()
            assert failure.data == {
                "detail": f"Built-in slash command '{canonical}' cannot be sent as "
                "'commandRef' in 'turn/start'. Use 'command/execute' instead."
            }
            await client.quiet_after(mark)
        thread = await client.request("thread/read", {"threadId": thread_id, "includeTurns": True})
        assert thread["thread"]["turns"] == []


async def test_unknown_and_admin_command_refs_are_refused(multi_server: ServerUnderTest) -> None:
    write_command(
        commands_dir(multi_server.workspace), "secret.md", "---\nrequiresAdmin: true\n---\nS"
    )
    async with multi_server.connect() as client:
        thread_id = await new_thread(client)
        admin = {"senderId": "u1", "senderRole": "admin"}
        for name, code in (
            ("/ghost", rpc_errors.COMMAND_NOT_FOUND),
            ("/secret", rpc_errors.COMMAND_PERMISSION_DENIED),
            ("", rpc_errors.INVALID_PARAMS),
        ):
            mark = client.mark()
            parts = [{"type": "commandRef", "name": name}]
            failure = await client.fail(
                "turn/start", {"threadId": thread_id, "input": parts, "sender": admin}
            )
            assert failure.code == code, name
            await client.quiet_after(mark)


async def test_user_commands_are_used_when_the_workspace_has_none(
    workspace: Path, user_roots: UserRoots
) -> None:
    write_command(user_roots.commands, "standup.md", "Write my standup for $1.")
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        thread_id = await new_thread(client)
        result = await execute(client, thread_id, "/standup", arguments=["monday"])
        assert result["expandedPrompt"] == "Write my standup for monday."
        write_command(commands_dir(workspace), "standup.md", "Workspace standup ($1).")
        result = await execute(client, thread_id, "/standup", arguments=["monday"])
        assert result["expandedPrompt"] == "Workspace standup (monday)."


async def test_new_keeps_the_default_cli_identity(multi_server: ServerUnderTest) -> None:
    async with multi_server.connect() as client:
        old = await new_thread(client)
        fresh = (await execute(client, old, "/new"))["thread"]
        assert fresh["originChannel"] == IDENTITY["channelName"]
        assert fresh["userId"] == IDENTITY["userId"]
        assert "channelContext" not in fresh
