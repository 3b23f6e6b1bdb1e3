"""The ``appserver`` command line."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from appserver import __version__
from appserver.cli import Listen, build_parser, main, parse_listen
from tests.support.client import RpcClient
from tests.support.fresh import fresh_process
from tests.support.helpers import IDENTITY
from tests.support.servers import WsStream, child_env, read_listening_url, server_command

APPSERVER = [sys.executable, "-m", "appserver"]


async def run_cli(
    *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    with anyio.fail_after(20):
        return await anyio.run_process(
            [*APPSERVER, *args], env=env or child_env(), check=False, stdin=subprocess.DEVNULL
        )


async def test_version() -> None:
    done = await run_cli("--version")
    assert done.returncode == 0
    assert done.stdout.decode().strip() == f"appserver {__version__}"


def test_help_mentions_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["app-server", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for flag in (
        "--listen",
        "--workspace",
        "--token",
        "--allow-origin",
        "--max-in-flight",
        "--log-level",
        "--trust-workspace",
        "stdio://",
        "ws://HOST:PORT",
        "ws+stdio://",
        "APPSERVER_TOKEN",
    ):
        assert flag in text, flag


def test_no_command_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "app-server" in capsys.readouterr().err


@pytest.mark.parametrize(
    "value",
    [
        "http://127.0.0.1:9100",
        "ws://",
        "ws://127.0.0.1:99999",
        "ws://127.0.0.1:9100/other",
        "tcp://x:1",
        "127.0.0.1:9100",
        "ws://127.0.0.1:port",
    ],
)
def test_bad_listen_value_exits_2(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["app-server", "--listen", value])
    assert exit_info.value.code == 2
    assert "--listen" in capsys.readouterr().err


def test_parse_listen() -> None:
    assert parse_listen("stdio://") == Listen(stdio=True)
    assert parse_listen("stdio") == Listen(stdio=True)
    assert parse_listen("ws://127.0.0.1:0") == Listen(stdio=False, host="127.0.0.1", port=0)
    assert parse_listen("ws://localhost") == Listen(stdio=False, host="localhost", port=9100)
    assert parse_listen("ws://[::1]:9200/ws") == Listen(stdio=False, host="::1", port=9200)
    assert parse_listen("ws+stdio://127.0.0.1:7") == Listen(stdio=True, host="127.0.0.1", port=7)
    with pytest.raises(argparse.ArgumentTypeError):
        parse_listen("wss://127.0.0.1:1")


async def test_bad_listen_value_exits_2_in_a_process(workspace: Path) -> None:
    done = await run_cli("app-server", "--workspace", str(workspace), "--listen", "http://x:1")
    assert done.returncode == 2
    assert b"--listen" in done.stderr
    assert done.stdout == b""


async def test_missing_workspace_exits_2(tmp_path: Path) -> None:
    done = await run_cli("app-server", "--workspace", str(tmp_path / "missing"))
    assert done.returncode == 2
    assert b"not a directory" in done.stderr
    assert not (tmp_path / "missing").exists()


async def test_token_from_environment_is_honoured(workspace: Path) -> None:
    env = {**child_env(), "APPSERVER_TOKEN": "env-token"}
    process = await anyio.open_process(
        server_command(workspace, "--listen", "ws://127.0.0.1:0"),
        env=env,
        stdin=subprocess.DEVNULL,
    )
    async with process:
        try:
            url = await read_listening_url(process)
            assert "env-token" not in url  # the token is never printed
            for bad in (url, url + "?token=wrong"):
                with pytest.raises(InvalidStatus) as info:
                    async with connect(bad):
                        pass
                assert info.value.response.status_code == 401
            async with connect(url + "?token=env-token") as ws, anyio.create_task_group() as tg:
                client = RpcClient(WsStream(ws))
                await client.run(tg)
                await client.initialize()
                assert (await client.request("thread/list", {"identity": IDENTITY}))["data"] == []
                tg.cancel_scope.cancel()
            process.terminate()
            with anyio.fail_after(10):
                assert await process.wait() == 0
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()


async def test_no_token_on_loopback_admits_clients(workspace: Path) -> None:
    """Without token and env var, a loopback listener accepts clients without a token."""
    process = await anyio.open_process(
        server_command(workspace, "--listen", "ws://127.0.0.1:0"),
        env=child_env(),
        stdin=subprocess.DEVNULL,
    )
    async with process:
        try:
            url = await read_listening_url(process)
            async with connect(url) as ws:
                await ws.send('{"jsonrpc":"2.0","id":1,"method":"thread/list"}')
                assert '"code":-32002' in str(await ws.recv())
            process.terminate()
            with anyio.fail_after(10):
                assert await process.wait() == 0
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()


def test_start_up_holds_the_collector_off_then_collects_young_objects_less_often() -> None:
    import subprocess
    import sys

    code = (
        "import gc\n"
        "from appserver import startup\n"
        "print(gc.get_threshold()[0] == 700)\n"
        "startup.ready()\n"  # never held off: nothing is frozen
        "print(gc.isenabled(), gc.get_freeze_count() == 0)\n"
        "print(gc.get_threshold()[0] == startup.YOUNG_THRESHOLD, gc.get_threshold()[1:])\n"
        "startup.begin()\n"
        "print(gc.isenabled())\n"
        "startup.ready()\n"
        "print(gc.isenabled(), gc.get_freeze_count() > 0)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.split() == [
        *("True", "True", "True"),
        *("True", "(10,", "10)"),  # the older generations keep their defaults
        *("False", "True", "True"),
    ]


async def test_the_wire_models_build_in_the_background() -> None:
    from appserver.protocol.core_methods import models_in_first_use_order
    from appserver.server.background import build_wire_models

    await build_wire_models()
    models = models_in_first_use_order()
    assert models[0].__name__ == "ThreadStartParams"  # a session's first request first
    assert all(model.__pydantic_complete__ for model in models)


async def test_what_a_turn_sends_is_built_in_the_background(workspace: Path) -> None:
    """Every server request of turns with a command, an approval and a file
    write has its model in the background build's list; their notifications go
    out as the runtime's data, modelless (the next test checks that such turns
    build nothing the background did not)."""
    from appserver.protocol.core_methods import models_in_first_use_order as first_use
    from appserver.protocol.methods import SERVER_REQUESTS
    from tests.support.servers import running_server
    from tests.support.turns import Approver, new_thread, run_turn

    with anyio.fail_after(20):
        async with running_server("memory", workspace) as sut, sut.connect() as client:
            Approver(client, "accept")
            thread_id = await new_thread(client)
            for text in ("!echo hi", "> notes.txt\nhello", "hello"):
                _turn_id, terminal = await run_turn(client, thread_id, text)
                assert terminal["method"] == "turn/completed"
    sent = {message["method"] for message in client.messages if "method" in message}
    needed = {SERVER_REQUESTS[name].params for name in sent if name in SERVER_REQUESTS}
    assert {"item/approval/request", "turn/diff/updated", "turn/completed"} <= sent
    assert needed <= set(first_use())


def test_a_turn_builds_no_wire_model_the_background_did_not(tmp_path: Path) -> None:
    """In a fresh process: once the background build is done, two turns build
    no wire model's validator themselves (the first turn used to build four)."""
    code = """
import anyio, pathlib, sys
from appserver.protocol.base import WireModel
from appserver.server.background import build_wire_models
from tests.support.servers import running_server
from tests.support.turns import new_thread, run_turn

def built():
    models, todo = set(), [WireModel]
    while todo:
        model = todo.pop()
        todo += model.__subclasses__()
        if model.__pydantic_complete__:
            models.add(model)
    return models

async def main():
    workspace = pathlib.Path(sys.argv[1])
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        thread_id = await new_thread(client)
        await build_wire_models()
        before = built()
        for text in ("hello", "hello again"):
            _turn, terminal = await run_turn(client, thread_id, text)
            assert terminal["method"] == "turn/completed", terminal
    print(sorted(model.__qualname__ for model in built() - before))

anyio.run(main)
"""
    assert fresh_process(code, tmp_path).strip() == "[]"


def test_a_face_runtime_builds_the_turn_models_in_the_background(tmp_path: Path) -> None:
    """A face's lean runtime (hosting.open_host) builds the models of what every
    turn says, for a face that reads them typed, without the DotCraft method
    table, once it is up."""
    code = """
import anyio, pathlib, sys
from appserver.hosting import HostOptions, open_host
from appserver.protocol.turn_models import EVERY_TURN

async def main():
    async with open_host(HostOptions(workspace=pathlib.Path(sys.argv[1]))):
        for _ in range(100_000):
            if all(model.__pydantic_complete__ for model in EVERY_TURN):
                break
            await anyio.sleep(0)
        print(sorted(m.__qualname__ for m in EVERY_TURN if not m.__pydantic_complete__))
        print("appserver.protocol.methods" in sys.modules)

anyio.run(main)
"""
    assert fresh_process(code, tmp_path).split("\n")[:2] == ["[]", "False"]


@pytest.mark.parametrize("provider", ["offline", "openai"])
def test_a_stdio_session_imports_only_what_it_uses(provider: str, tmp_path: Path) -> None:
    """Answering `initialize` loads no provider SDK or HTTP stack, no MCP, no
    WebSocket library, no YAML or cron parser: each loads when first needed."""
    request = (
        '{"jsonrpc":"2.0","id":1,"method":"initialize",'
        '"params":{"clientInfo":{"name":"t","version":"1"}}}\n'
    )
    env = {**child_env(), "OPENAI_API_KEY": "sk-test"}
    command = [sys.executable, "-X", "importtime", "-m", "appserver", "app-server"]
    command += ["--workspace", str(tmp_path), "--provider", provider, "--log-level", "warning"]
    done = subprocess.run(
        command,
        input=request,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert '"result"' in done.stdout
    imported = {
        line.rsplit("|", 1)[1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:")
    }
    unwanted = {"openai", "anthropic", "httpx", "mcp", "websockets", "yaml", "croniter"}
    if provider == "offline":
        # (A network provider loads its HTTP stack in the background right
        # after `initialize` is answered, so it may be there by exit.)
        unwanted.add("httpx2")
    assert not unwanted & {name.split(".")[0] for name in imported}
