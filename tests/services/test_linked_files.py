"""A checkout's command or skill file that links out of its folder is not read
(``.craft/commands/x.md -> ~/.ssh/id_rsa`` would reach every client that lists
commands, and the model); a boolean param is a JSON boolean only."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from appserver.protocol.mcp import McpServerConfig
from appserver.protocol.skills import SkillsSetEnabledParams
from appserver.services.commands.catalog import scan_custom
from appserver.services.skills.catalog import SkillRoot, scan


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    outside = tmp_path / "outside" / "secret.txt"
    outside.parent.mkdir()
    outside.write_text("SECRET-OUTSIDE\n")
    return outside


def test_a_command_file_linked_out_of_its_root_is_not_read(tmp_path: Path, secret: Path) -> None:
    root = tmp_path / "ws" / ".craft" / "commands"
    root.mkdir(parents=True)
    (root / "kept.md").write_text("inside\n")
    os.symlink(root / "kept.md", root / "alias.md")  # a link inside the root is fine
    os.symlink(secret, root / "leak.md")
    os.symlink("/dev/stdin", root / "stdin.md")
    found = scan_custom([("workspace", root)])
    assert sorted(found) == ["/alias", "/kept"]


def test_a_skill_file_linked_out_of_its_folder_is_not_read(tmp_path: Path, secret: Path) -> None:
    root = tmp_path / "ws" / ".craft" / "skills"
    (root / "good").mkdir(parents=True)
    (root / "good" / "SKILL.md").write_text("---\nname: good\ndescription: d\n---\nbody\n")
    (root / "linked").mkdir()
    os.symlink(secret, root / "linked" / "SKILL.md")
    names = [skill.name for skill in scan([SkillRoot("workspace", root)])]
    assert names == ["good"]


def test_a_boolean_param_is_a_json_boolean() -> None:
    with pytest.raises(ValidationError):
        SkillsSetEnabledParams.model_validate({"name": "x", "enabled": "no"})
    with pytest.raises(ValidationError):
        McpServerConfig.model_validate({"name": "x", "command": "c", "enabled": "no"})
    assert SkillsSetEnabledParams.model_validate({"name": "x", "enabled": False}).enabled is False
