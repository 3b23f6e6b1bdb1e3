"""What a turn reads without wire models agrees with the models: the built-in
SubAgent profiles offered (runtime/subagent_builtins.py, against the profile
views), the plan tools' choices (against ``protocol.plans``), and the runtime
flags' wire form (against ``ThreadRuntimeState``)."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import get_args

import pytest

from appserver.protocol import plans as plan_wire
from appserver.protocol.threads import ThreadRuntimeState
from appserver.runtime import state
from appserver.runtime.subagent_builtins import BUILT_IN_DATA, built_in_offer
from appserver.runtime.subagent_profiles import view_profiles
from appserver.runtime.subagent_prompt import OfferedProfile, offered_profiles
from appserver.storage.subagent_config import read_subagent_config
from appserver.tools import plans


def _bins(directory: Path, names: list[str]) -> str:
    for name in names:
        path = directory / name
        path.write_text("#!/bin/sh\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(directory)


def _slow(disabled: list[str]) -> list[tuple[str, bool, bool]]:
    config = read_subagent_config({"SubAgent": {"DisabledProfiles": disabled}})
    return [
        (
            view.name,
            view.definition.runtime != "native",
            view.definition.working_directory_mode == "specified",
        )
        for view in view_profiles(config)
        if not view.hidden_reasons
    ]


BINS = sorted({str(fields["bin"]) for fields in BUILT_IN_DATA.values() if "bin" in fields})


@pytest.mark.parametrize("on_path", [[], BINS, BINS[:1], BINS[1:]])
@pytest.mark.parametrize("disabled", [[], ["CODEX-cli", "native"], ["appserver-zene"]])
def test_the_built_in_offer_is_the_profile_views(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, on_path: list[str], disabled: list[str]
) -> None:
    monkeypatch.setenv("PATH", _bins(tmp_path, on_path))
    assert built_in_offer(disabled) == _slow(disabled)


def test_a_workspace_with_its_own_profiles_is_read_through_the_views(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", _bins(tmp_path / "bin", ["mine"]))
    craft = tmp_path / "ws" / ".craft"
    craft.mkdir(parents=True)
    (craft / "config.json").write_text(
        '{"SubAgentProfiles": {"mine": {"Runtime": "cli-oneshot", "Bin": "mine",'
        ' "WorkingDirectoryMode": "specified"}}}'
    )
    offered = offered_profiles(tmp_path / "ws")
    assert OfferedProfile("mine", external=True, needs_directory=True) in offered
    assert offered[0].name == "native"


def test_the_plan_tools_choices_are_the_plan_models() -> None:
    assert get_args(plan_wire.TodoPriority) == plans.PRIORITIES
    assert get_args(plan_wire.TodoStatus) == plans.STATUSES


def test_the_runtime_flags_are_the_models_wire_form() -> None:
    for flags in state._SNAPSHOTS.values():
        assert ThreadRuntimeState.model_validate(flags).to_wire() == flags
