"""Families installed at the first call of one of their methods
(appserver/services/families.py): nothing of them loads before, everything
works from that call on, and ``initialize`` advertised them all along."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from appserver.cron.tool import CronTool
from appserver.protocol.base import Empty
from appserver.protocol.errors import INTERNAL_ERROR, METHOD_NOT_FOUND
from appserver.providers.offline import OfflineProvider
from appserver.runtime.engine_config import EngineConfig
from appserver.server.app import AppServer
from appserver.server.config import ServerConfig
from appserver.services.context import FamilyContext
from appserver.services.families import FAMILIES
from tests.support.families import fail_install
from tests.support.fresh import fresh_process
from tests.support.servers import running_server
from tests.support.turns import new_thread, run_turn

WAITING = [family for family in FAMILIES if family.at_first_call]


def test_some_families_wait_for_their_first_call() -> None:
    assert {family.module for family in WAITING} >= {
        "appserver.services.workspace",
        "appserver.services.commands",
        "appserver.services.automations",
        "appserver.services.channels",
        "appserver.services.suggestions",
        "appserver.services.cron",
    }


def test_a_session_loads_no_family_it_does_not_call(tmp_path: Path) -> None:
    """In a fresh process: a thread and a turn load neither the waiting
    families nor their wire models nor the whole method table; calling one
    method of a family loads that family only, and the method answers."""
    code = """
import anyio, pathlib, sys
from tests.support.servers import running_server
from tests.support.turns import new_thread, run_turn

WATCHED = [
    "appserver.protocol.methods",
    "appserver.services.automations", "appserver.protocol.automations",
    "appserver.services.channels", "appserver.protocol.channels",
    "appserver.services.suggestions", "appserver.protocol.suggestions",
    "appserver.services.cron", "appserver.protocol.cron", "appserver.cron.service",
    "appserver.services.workspace", "appserver.protocol.workspace",
    "appserver.services.commands", "appserver.protocol.commands",
    "appserver.services.grants", "appserver.protocol.grants",
]

def loaded():
    return [name for name in WATCHED if name in sys.modules]

async def main():
    workspace = pathlib.Path(sys.argv[1])
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        thread_id = await new_thread(client)
        await run_turn(client, thread_id, "hello")
        print(loaded())
        models = await client.request("model/list", {})
        print(bool(models["models"]), loaded())
        commands = await client.request("command/list", {})
        print("commands" in commands, loaded())

anyio.run(main)
"""
    lines = fresh_process(code, tmp_path).splitlines()
    assert lines == [
        "[]",
        "True ['appserver.services.workspace', 'appserver.protocol.workspace']",
        "True ['appserver.services.workspace', 'appserver.protocol.workspace', "
        "'appserver.services.commands', 'appserver.protocol.commands']",
    ]


async def test_a_failed_install_fails_that_call_and_the_next_tries_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first call of a family whose install fails (after registering a
    handler and a hook) is answered -32603; what it registered is dropped, and
    the next call installs it and is answered."""

    def registers_then_fails(server: FamilyContext) -> None:
        server.router.register("grant/list", _never_called)
        server.router.initialize_hooks.append(_never_called_hook)

    fail_install(
        monkeypatch,
        "appserver.services.grants",
        "not this time",
        times=1,
        first=registers_then_fails,
    )
    with anyio.fail_after(15):
        async with running_server("memory", tmp_path) as sut, sut.connect() as client:
            assert sut.app is not None
            served = sut.app.router.capabilities()
            assert served["approvalGrants"] is True
            failure = await client.fail("grant/list", {})
            assert failure.code == INTERNAL_ERROR
            assert sut.app.router.capabilities() == served  # still waiting, still advertised
            assert _never_called_hook not in sut.app.router.initialize_hooks
            assert "grants" in await client.request("grant/list", {})
            revoke = {"kind": "shell", "operation": "make test", "target": str(tmp_path)}
            assert await client.request("grant/revoke", revoke) is not None
            sut.app.router.install_pending()
            assert {"model/list", "command/list"} <= set(sut.app.router.handlers)
            sut.app.router.install_pending()  # nothing left: nothing happens


async def _never_called(ctx: object, params: object) -> Empty:
    raise AssertionError("a failed install's handler was kept")


def _never_called_hook(ctx: object, params: object) -> None:
    raise AssertionError("a failed install's hook was kept")


async def test_background_work_of_a_family_installed_later_starts_at_once(
    tmp_path: Path,
) -> None:
    """Background work starts when the server opens; a family installed after
    that (at its first call) gets its work started at once."""
    started = anyio.Event()

    async def work() -> None:
        started.set()

    with anyio.fail_after(15):
        async with AppServer.open(ServerConfig(workspace=tmp_path)) as server:
            assert server.families.spawn is not None
            server.families.start_background(work)
            await started.wait()


async def test_the_server_closes_its_provider_though_no_family_was_called(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed: list[str] = []

    async def aclose(self: OfflineProvider) -> None:
        closed.append(self.name)

    monkeypatch.setattr(OfflineProvider, "aclose", aclose)
    async with AppServer.open(ServerConfig(workspace=tmp_path)) as server:
        assert "model/list" not in server.router.handlers  # the workspace family waits
    assert closed == ["offline"]


def write_config(workspace: Path, config: dict[str, object]) -> None:
    (workspace / ".craft").mkdir(exist_ok=True)
    (workspace / ".craft" / "config.json").write_text(json.dumps(config))


def write_task(workspace: Path, task_id: str) -> None:
    folder = workspace / ".craft" / "tasks" / task_id
    folder.mkdir(parents=True)
    (folder / "task.md").write_text(f"---\nid: {task_id}\ntitle: By hand\n---\nDo it.\n")
    (folder / "workflow.md").write_text("{{ task.description }}")


async def test_automations_wait_for_a_call_while_there_is_no_task(tmp_path: Path) -> None:
    with anyio.fail_after(15):
        async with running_server("memory", tmp_path) as sut, sut.connect() as client:
            assert sut.app is not None
            assert sut.app.families.automations is None
            assert sut.app.router.capabilities()["automations"] is True
            assert (await client.request("automation/task/list", {}))["tasks"] == []
            assert sut.app.families.automations is not None  # the call installed it


async def test_automations_install_at_start_when_a_task_is_there(tmp_path: Path) -> None:
    write_task(tmp_path, "waiting")
    async with AppServer.open(ServerConfig(workspace=tmp_path)) as server:
        assert server.families.automations is not None


async def test_a_task_written_later_installs_automations_at_the_next_poll(
    tmp_path: Path,
) -> None:
    """The light poll (at ``PollingInterval``) installs the family once a task
    directory appears; the runner then reads the task."""
    write_config(tmp_path, {"Automations": {"PollingInterval": 1}})
    with anyio.fail_after(15):
        async with running_server("memory", tmp_path) as sut, sut.connect() as client:
            assert sut.app is not None
            assert sut.app.families.automations is None
            write_task(tmp_path, "by-hand")
            while sut.app.families.automations is None:
                await anyio.sleep(0.05)  # the poll is time-driven: nothing to wait on
            listed = (await client.request("automation/task/list", {}))["tasks"]
            assert [task["id"] for task in listed] == ["by-hand"]


async def test_switched_off_automations_serve_nothing(tmp_path: Path) -> None:
    write_config(tmp_path, {"Automations": {"Enabled": False}})
    with anyio.fail_after(15):
        async with running_server("memory", tmp_path) as sut, sut.connect() as client:
            assert sut.app is not None
            assert "automations" not in sut.app.router.capabilities()
            failure = await client.fail("automation/task/list", {})
            assert failure.code == METHOD_NOT_FOUND


async def test_automations_installed_while_the_server_drains_run_nothing(
    tmp_path: Path,
) -> None:
    """A first call or a poll that installs the family once the drain began
    starts no runner and lets no task start."""
    server_cm = AppServer.open(ServerConfig(workspace=tmp_path))
    server = await server_cm.__aenter__()
    try:
        await server.drain()
        write_task(tmp_path, "late")
        server.router.install_pending()
        runner = server.families.automations
        assert runner is not None
        assert runner.job_runner.accepting() is False
        assert not runner.active
    finally:
        await server_cm.__aexit__(None, None, None)


async def test_the_poll_goes_on_after_a_failed_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    failures = fail_install(monkeypatch, "appserver.services.automations", "not now", times=1)
    write_config(tmp_path, {"Automations": {"PollingInterval": 1}})
    with anyio.fail_after(15):
        async with AppServer.open(ServerConfig(workspace=tmp_path)) as server:
            write_task(tmp_path, "by-hand")
            while server.families.automations is None:
                await anyio.sleep(0.05)  # the poll is time-driven: nothing to wait on
    assert failures == [0]
    assert "could not start the automations" in caplog.text


async def test_the_cron_tool_offered_while_cron_waits_installs_it(tmp_path: Path) -> None:
    """The agent sees the same ``cron`` tool; its first use installs the family,
    and the call is the family's tool's."""
    with anyio.fail_after(20):
        async with running_server("memory", tmp_path) as sut, sut.connect() as client:
            assert sut.app is not None and sut.app.families.cron is None
            tools = sut.app.runtime.engine.tools
            waiting = tools.get("cron")
            assert waiting is not None
            assert (waiting.name, waiting.description, waiting.input_schema) == (
                CronTool.name,
                CronTool.description,
                CronTool.input_schema,
            )
            thread_id = await new_thread(client)
            call = {"action": "add", "everySeconds": 60, "message": "tick"}
            _, terminal = await run_turn(client, thread_id, f"?tool cron {json.dumps(call)}")
            assert terminal["method"] == "turn/completed"
            assert sut.app.families.cron is not None
            assert isinstance(tools.get("cron"), CronTool)
            (job,) = (await client.request("cron/list", {}))["jobs"]
            assert job["name"] == "tick"  # from the message (which clients never see)


async def test_cron_installs_at_start_with_a_job_from_an_earlier_run(tmp_path: Path) -> None:
    async with running_server("memory", tmp_path) as sut, sut.connect() as client:
        schedule = {"kind": "every", "everyMs": 3_600_000}
        await client.request("cron/add", {"name": "n", "message": "m", "schedule": schedule})
    with anyio.fail_after(15):
        async with AppServer.open(ServerConfig(workspace=tmp_path)) as server:
            while server.families.cron is None:  # looked for in the background at open
                await anyio.sleep(0.01)


async def test_cron_installs_at_start_when_the_heartbeat_has_a_timer(tmp_path: Path) -> None:
    write_config(tmp_path, {"Heartbeat": {"Enabled": True, "IntervalSeconds": 3600}})
    async with AppServer.open(ServerConfig(workspace=tmp_path)) as server:
        assert server.families.heartbeat is not None and server.families.cron is not None


async def test_switched_off_cron_waits_with_the_heartbeat_only(tmp_path: Path) -> None:
    write_config(tmp_path, {"Cron": {"Enabled": False}})
    async with AppServer.open(ServerConfig(workspace=tmp_path)) as server:
        router = server.router
        assert router.serves("heartbeat/trigger") and not router.serves("cron/list")
        assert server.runtime.engine.tools.get("cron") is None
        assert server.heartbeat is not None and server.cron is None


async def test_a_job_another_process_adds_and_leaves_is_found(tmp_path: Path) -> None:
    """Two processes on one workspace: the second adds a job and leaves at
    once; the first, whose cron family waited, finds it within a lease."""
    engine = EngineConfig(node_lease=0.4)
    with anyio.fail_after(30):
        async with running_server("memory", tmp_path, engine=engine) as first:
            assert first.app is not None and first.app.families.cron is None
            cluster = first.app.runtime.cluster
            assert cluster is not None
            async with running_server("memory", tmp_path, engine=engine) as second:
                while not cluster.peers:  # the first has seen the second
                    await anyio.sleep(0.02)
                async with second.connect() as client:
                    schedule = {"kind": "every", "everyMs": 3_600_000}
                    await client.request(
                        "cron/add", {"name": "n", "message": "m", "schedule": schedule}
                    )
            while first.app.families.cron is None:  # a lease-paced look: no event to await
                await anyio.sleep(0.02)


async def test_the_cron_tool_tells_the_model_when_cron_cannot_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fail_install(monkeypatch, "appserver.services.cron", "broken install")
    with anyio.fail_after(20):
        async with running_server("memory", tmp_path) as sut, sut.connect() as client:
            thread_id = await new_thread(client)
            call = json.dumps({"action": "list"})
            _, terminal = await run_turn(client, thread_id, f"?tool cron {call}")
            assert terminal["method"] == "turn/completed"  # the turn goes on
