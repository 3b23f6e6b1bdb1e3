"""Start-up: a stdio server answers ``initialize`` before it imports the
runtime and the method families (``AppServer.open(defer=True)``), from the
capabilities declared in appserver/services/advertised.py, and is complete
before it reads the client's next frame."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from appserver.protocol.methods import FEATURE_FLAGS, METHODS
from appserver.server import app as server_app
from appserver.server.app import AppServer
from appserver.server.config import ServerConfig
from appserver.services import families
from appserver.services.advertised import (
    CORE,
    FAMILY_CAPABILITIES,
    advertised_capabilities,
    declared,
)
from appserver.services.context import FamilyContext
from tests.support.helpers import IDENTITY
from tests.support.servers import child_env, server_command

CRON_OFF = {"Cron": {"Enabled": False}}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"clientInfo": {"name": "t", "version": "1"}},
}


def write_config(workspace: Path, config: dict[str, Any]) -> None:
    (workspace / ".craft").mkdir(exist_ok=True)
    (workspace / ".craft" / "config.json").write_text(json.dumps(config))


def test_every_family_declares_what_initialize_advertises() -> None:
    modules = [family.module for family in families.FAMILIES]
    missing = [module for module in modules if module not in FAMILY_CAPABILITIES]
    assert not missing, f"declare these families in appserver/services/advertised.py: {missing}"
    assert sorted(FAMILY_CAPABILITIES) == sorted(modules)


@pytest.mark.parametrize("config", [{}, CRON_OFF], ids=["default", "cron-off"])
async def test_each_family_serves_exactly_what_it_declares(
    config: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Install the families one by one and compare what each one adds (its
    handlers' capability flags, its features) with its declaration."""
    write_config(tmp_path, config)
    added: dict[str, tuple[set[str], set[str]]] = {}
    extended: dict[str, set[str]] = {}

    def recording(
        run: Callable[[families.Family, FamilyContext], None],
    ) -> Callable[[families.Family, FamilyContext], None]:
        # What a family adds, by its prepare (at start) and its install, together.
        def record(family: families.Family, context: FamilyContext) -> None:
            handlers, features = set(context.router.handlers), set(context.router.features)
            extensions = set(context.router.extensions)
            run(family, context)
            methods, flags = added.get(family.module, (set(), set()))
            added[family.module] = (
                methods | (set(context.router.handlers) - handlers),
                flags | (context.router.features - features),
            )
            extended[family.module] = extended.get(family.module, set()) | (
                set(context.router.extensions) - extensions
            )

        return record

    monkeypatch.setattr(families, "install_family", recording(families.install_family))
    monkeypatch.setattr(families, "prepare_family", recording(families.prepare_family))
    async with AppServer.open(ServerConfig(workspace=tmp_path)) as server:
        served = server.router.capabilities()
        assert served == advertised_capabilities(server.workspace_config)
        # Those installed at their first call: advertised before, the same after.
        waiting = {f.module for f in families.FAMILIES if f.at_first_call}
        assert all(not added.get(module, (set(),))[0] for module in waiting)
        server.router.install_pending()
        assert server.router.capabilities() == served
        for module, (methods, features) in added.items():
            entry = declared(module, server.workspace_config)
            flags = {METHODS[name].capability for name in methods} - {None}
            assert flags == set(entry.flags), module
            assert all(served.get(flag) is True for flag in flags), module
            assert features == set(entry.features), module
            assert extended[module] == set(entry.extensions), module
        assert set(CORE.features) <= FEATURE_FLAGS
        core = {spec.capability for spec in METHODS.values() if spec.name in server.router.handlers}
        family_flags = {flag for methods, _ in added.values() for flag in
                        {METHODS[name].capability for name in methods}}  # fmt: skip
        assert core - family_flags - {None} == set(CORE.flags)
    if config == CRON_OFF:
        assert "cronManagement" not in served


@pytest.mark.parametrize("config", [{}, CRON_OFF], ids=["default", "cron-off"])
async def test_a_deferred_server_answers_as_a_built_one(
    config: dict[str, Any], tmp_path: Path
) -> None:
    """Same answer to ``initialize``, then every method works at once: the
    requests pipelined behind it are read only once the server is complete."""
    write_config(tmp_path, config)
    async with AppServer.open(ServerConfig(workspace=tmp_path)) as built:
        expected = built.router.capabilities()
    frames = [
        INITIALIZE,
        {"jsonrpc": "2.0", "method": "initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "thread/list", "params": {"identity": IDENTITY}},
        {"jsonrpc": "2.0", "id": 3, "method": "skills/list", "params": {}},
        {"jsonrpc": "2.0", "id": 4, "method": "no/such/method", "params": {}},
    ]
    done = subprocess.run(
        server_command(tmp_path),
        input="".join(json.dumps(frame) + "\n" for frame in frames),
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    answers = {m["id"]: m for m in map(json.loads, done.stdout.splitlines()) if "id" in m}
    assert answers[1]["result"]["capabilities"] == expected
    assert list(answers[1]["result"]["capabilities"]) == list(expected)  # same order too
    assert "result" in answers[2]
    assert "result" in answers[3]
    assert answers[4]["error"]["code"] == -32601
    assert "ERROR" not in done.stderr


def test_initialize_is_answered_before_the_runtime_and_families_load(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from appserver.services import router\n"
        "answer = router.Router.initialize\n"
        "async def initialize(self, ctx, params):\n"
        "    result = await answer(self, ctx, params)\n"
        "    loaded = [m for m in ('appserver.runtime.host', 'appserver.runtime.turns',\n"
        "              'appserver.services.families', 'appserver.protocol.methods',\n"
        "              'appserver.services.threads') if m in sys.modules]\n"
        "    sys.__stderr__.write(f'LOADED {loaded}\\n')\n"
        "    return result\n"
        "router.Router.initialize = initialize\n"
        "from appserver.cli import main\n"
        "sys.exit(main())\n"
    )
    command = [sys.executable, "-c", code, *server_command(tmp_path)[3:]]
    done = subprocess.run(
        command,
        input=json.dumps(INITIALIZE) + "\n",
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=60,
    )
    assert '"result"' in done.stdout, done.stderr
    assert "LOADED []" in done.stderr


async def test_a_deferred_server_completes_itself_without_initialize(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server_app, "COMPLETE_WHEN_IDLE_AFTER", 0.01)
    async with AppServer.open(ServerConfig(workspace=tmp_path), defer=True) as server:
        assert not server.ready
        with anyio.fail_after(30):
            while not server.ready:
                await anyio.sleep(0.01)
        assert server.router.capabilities() == advertised_capabilities(server.workspace_config)


async def test_a_deferred_server_that_never_completed_shuts_down(tmp_path: Path) -> None:
    async with AppServer.open(ServerConfig(workspace=tmp_path), defer=True) as server:
        assert not server.ready
    assert not server.ready


def test_a_deferred_server_runs_the_initialize_hooks_after_completing(tmp_path: Path) -> None:
    """A family's initialize hook (channel adapters) and the work it schedules
    after the response still run, in order, when initialize came first."""
    request = {
        **INITIALIZE,
        "params": {
            "clientInfo": {"name": "intruder", "version": "1"},
            "capabilities": {"channelAdapter": {"channelName": "nobody"}},
        },
    }
    done = subprocess.run(
        server_command(tmp_path),
        input=json.dumps(request) + "\n",
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=60,
    )
    response, event = map(json.loads, done.stdout.splitlines())
    assert response["id"] == 1 and "serverInfo" in response["result"]
    assert event["method"] == "system/event"
    assert event["params"]["kind"] == "channelRejected"
    assert event["params"]["channelName"] == "nobody"


def test_a_second_server_taking_the_lock_ahead_shares_the_workspace(tmp_path: Path) -> None:
    """The lock is taken ahead, in a thread, while the modules import: a
    second server on the workspace takes it shared and answers."""
    first = subprocess.Popen(
        server_command(tmp_path),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=child_env(),
    )
    try:
        assert first.stdin is not None and first.stdout is not None
        first.stdin.write((json.dumps(INITIALIZE) + "\n").encode())
        first.stdin.flush()
        assert b'"result"' in first.stdout.readline()  # it holds the workspace now
        second = subprocess.run(
            server_command(tmp_path),
            input=json.dumps(INITIALIZE) + "\n",
            capture_output=True,
            text=True,
            env=child_env(),
            timeout=60,
        )
        # Issue 28: the second server now shares the workspace and answers.
        assert second.returncode == 0, second.stderr
        assert '"result"' in second.stdout
        assert "workspace is in use by another appserver" not in second.stderr
        assert (tmp_path / ".craft" / "appserver.lock").exists()  # still the first's
    finally:
        first.communicate(timeout=30)  # closes its input: it exits
    assert first.returncode == 0


def test_the_runtime_loads_no_wire_models_of_channels_editors_or_the_node_repl() -> None:
    # Every door's start pays for what the runtime imports; these are used only
    # when compacting, or when a client is an editor or a Node REPL host.
    lazy = (
        "appserver.protocol.channels",
        "appserver.protocol.editor_fs",
        "appserver.protocol.editor_terminal",
        "appserver.protocol.node_repl",
    )
    code = (
        "import sys\n"
        "import appserver.hosting, appserver.runtime.host\n"
        "import appserver.faces.zene.serving, appserver.faces.codex.session\n"
        f"print([m for m in {lazy!r} if m in sys.modules])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), timeout=60
    )
    assert done.stdout.strip() == "[]", done.stderr
