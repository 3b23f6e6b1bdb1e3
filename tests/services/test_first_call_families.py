"""Families installed at the first call of one of their methods
(appserver/services/families.py): nothing of them loads before, everything
works from that call on, and ``initialize`` advertised them all along."""

from __future__ import annotations

from pathlib import Path

import pytest

from appserver.server.app import AppServer
from appserver.server.config import ServerConfig
from appserver.services import families
from appserver.services.families import FAMILIES
from tests.support.fresh import fresh_process

WAITING = [family for family in FAMILIES if family.at_first_call]


def test_some_families_wait_for_their_first_call() -> None:
    assert {family.module for family in WAITING} >= {
        "appserver.services.workspace",
        "appserver.services.commands",
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
    install = families.install_family
    failures = [RuntimeError("not this time")]

    def flaky(family: families.Family, server: object) -> None:
        if family.module == "appserver.services.grants" and failures:
            raise failures.pop()
        install(family, server)  # type: ignore[arg-type]

    monkeypatch.setattr(families, "install_family", flaky)
    async with AppServer.open(ServerConfig(workspace=tmp_path)) as server:
        router = server.router
        assert "grant/list" not in router.handlers
        served = router.capabilities()
        assert served["approvalGrants"] is True
        with pytest.raises(RuntimeError, match="not this time"):
            router.install_pending()
        assert router.capabilities() == served  # still waiting, still advertised
        router.install_pending()
        assert {"grant/list", "grant/revoke", "model/list", "command/list"} <= set(router.handlers)
        router.install_pending()  # nothing left: nothing happens
