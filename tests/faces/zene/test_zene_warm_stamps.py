"""What a warm Zene process read once, and how it notices that it changed
(appserver/faces/zene/warm_serving.py): the settings stamped before they are
read, the trust record once the start has settled it, the code as it was when
the process started."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import anyio
import pytest

import appserver
from appserver import startup
from appserver.faces.zene import warm, warm_serving
from appserver.faces.zene.serving import StartupFailure
from appserver.storage.trust import TRUST_FILE
from appserver.storage.user_settings import user_home, workspace_home
from tests.faces.zene.test_face_zene import (
    ONE_SHOT,
    accepted_by_clawbridge,
    clawbridge_request,
    line,
    one_shot,
)
from tests.faces.zene.test_zene_warm import (  # noqa: F401 (fixtures)
    KEEP,
    run_dir,
    warm_env,
    warm_socket,
    warm_up,
)


async def test_withdrawn_trust_ends_the_warm_process(
    workspace: Path,
    run_dir: Path,  # noqa: F811 (the fixture, imported above)
    warm_socket: Path,  # noqa: F811 (the fixture, imported above)
) -> None:
    """A cold one-shot would see the workspace untrusted again (no MCP servers,
    no auto-approval): the warm process, which settled trust at its start, must
    not go on answering as trusted."""
    record = workspace_home(workspace.resolve(), user_home(warm_env(run_dir))) / TRUST_FILE
    assert record.is_file()  # the server made this workspace, so it trusted it
    record.unlink()  # what `workspace/trust` revoke does
    code, answers, _ = await one_shot(
        workspace, line(clawbridge_request()), *ONE_SHOT, *KEEP, environment=warm_env(run_dir)
    )
    assert accepted_by_clawbridge(code, answers)  # answered cold
    with anyio.fail_after(30):
        while warm.is_serving(str(warm_socket)) and warm_socket.exists():
            await anyio.sleep(0.05)


async def test_the_settings_are_stamped_before_the_start_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A settings file changed while the process starts may or may not have been
    read: stamped first, it then counts as changed."""
    monkeypatch.setenv("APPSERVER_HOME", str(tmp_path / "home"))
    steps: list[str] = []
    stamps = warm_serving._stamps

    def stamping(files: list[Path]) -> dict[Path, warm_serving.Stamp]:
        steps.append("stamp " + ",".join(sorted(path.name for path in files)))
        return stamps(files)

    async def opening(*given: object) -> StartupFailure:
        steps.append("open")  # where the settings are read
        return StartupFailure(3, "startup", "stopped here")

    monkeypatch.setattr(warm_serving, "_stamps", stamping)
    monkeypatch.setattr(warm_serving, "open_runtime", opening)
    args = argparse.Namespace(workspace=str(tmp_path), trust_workspace=False)
    code = await warm_serving.serve_warm(args, lambda: None, str(tmp_path / "warm.sock"))
    assert code == 3
    assert steps[-1] == "open"
    assert "stamp config.json,config.json,config.json,trusted.json" in steps[:-1]


def test_code_changed_since_the_launch_is_a_change_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An upgrade in place that lands while the process imports: its modules
    may be half old, half new, so its first request finds it stale. (Stamps
    compared, no clocks: a file dated in the future is no change.)"""
    package = appserver.__file__
    now = startup.file_stamp(package)
    assert now is not None
    monkeypatch.setattr(startup, "package_at_launch", now)
    assert warm_serving._code_stamp() == {Path(package): now}
    monkeypatch.setattr(startup, "package_at_launch", (now[0] - 1, now[1], now[2]))
    assert warm_serving._code_stamp() == {Path(package): warm_serving.CHANGED_DURING_START}
    monkeypatch.setattr(startup, "package_at_launch", None)  # not launched through launch.main
    assert warm_serving._code_stamp() == {Path(package): now}


async def test_a_warm_process_with_trust_workspace_ignores_the_trust_record(
    workspace: Path,
    run_dir: Path,  # noqa: F811 (the fixture, imported above)
) -> None:
    """Every start with --trust-workspace rewrites the record (a new database
    id), and a cold one-shot with the flag trusts the workspace whatever it
    says: another start must not end this warm process."""
    flagged = (*ONE_SHOT, *KEEP, "--trust-workspace")
    socket_path = await warm_up(workspace, run_dir, *flagged)
    record = workspace_home(workspace.resolve(), user_home(warm_env(run_dir))) / TRUST_FILE
    record.write_text(record.read_text().replace('"database"', '"database" ') + "\n")
    code, answers, _ = await one_shot(
        workspace, line(clawbridge_request()), *flagged, environment=warm_env(run_dir)
    )
    assert accepted_by_clawbridge(code, answers)
    assert warm.stop(str(socket_path)) == 1  # answered by the warm process


def test_a_rewrite_that_keeps_the_time_is_still_a_change(tmp_path: Path) -> None:
    settings = tmp_path / "config.json"
    settings.write_text("{}\n")
    before = warm_serving._stamps([settings])
    status = settings.stat()
    settings.write_text('{"model": "other"}\n')
    os.utime(settings, ns=(status.st_atime_ns, status.st_mtime_ns))  # the same mtime
    assert warm_serving._stamps([settings]) != before
