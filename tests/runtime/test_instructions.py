"""What the model is told besides the conversation (runtime/instructions.py):
the server's prompt, the environment block and the AGENTS.md files, read by a
fake OpenAI server and shown by ``prompt/read``."""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path

import pytest

from appserver.runtime.instructions import (
    INSTRUCTIONS_MAX_BYTES,
    Environment,
    ProjectInstructions,
)
from appserver.runtime.system_prompt import DEFAULT_SYSTEM_PROMPT
from appserver.storage.user_settings import user_home, workspace_home
from tests.support.fake_models import fake_model_server, openai_text_reply
from tests.support.servers import running_server
from tests.support.skills_provider import RecordingProvider
from tests.support.turns import new_thread, run_turn

# --- the files -------------------------------------------------------------------------------


def loader(workspace: Path, user: Path | None = None, **options: int) -> ProjectInstructions:
    return ProjectInstructions(workspace, lambda: user, **options)  # type: ignore[arg-type]


def test_user_then_root_down_to_the_working_directory(workspace: Path, tmp_path: Path) -> None:
    user = tmp_path / "home" / "AGENTS.md"
    user.parent.mkdir()
    user.write_text("Call me Ada.\n")
    (workspace / "AGENTS.md").write_text("Run make test.\n")
    deep = workspace / "pkg" / "sub"
    deep.mkdir(parents=True)
    (workspace / "pkg" / "AGENTS.md").write_text("pkg uses tabs.\n")
    (workspace / "elsewhere").mkdir()
    (workspace / "elsewhere" / "AGENTS.md").write_text("not on the way\n")

    files = loader(workspace, user).files(deep)
    assert [(file.path, file.scope) for file in files] == [
        (user, "user"),
        (workspace.resolve() / "AGENTS.md", "project"),
        (workspace.resolve() / "pkg" / "AGENTS.md", "project"),
    ]
    assert [file.text for file in files] == [
        "Call me Ada.\n",
        "Run make test.\n",
        "pkg uses tabs.\n",
    ]
    # Without a working directory: the root only; outside the workspace: nothing more.
    assert len(loader(workspace).files()) == 1
    assert len(loader(workspace).files(tmp_path)) == 1


def test_re_read_when_changed(workspace: Path) -> None:
    agents = workspace / "AGENTS.md"
    agents.write_text("first\n")
    instructions = loader(workspace)
    assert instructions.files()[0].text == "first\n"
    agents.write_text("second, longer\n")
    assert instructions.files()[0].text == "second, longer\n"
    agents.unlink()
    assert instructions.files() == []


def test_capped_in_all_with_a_note(workspace: Path) -> None:
    (workspace / "AGENTS.md").write_text("a line of rules\n" * 3000)  # 48 KB
    sub = workspace / "sub"
    sub.mkdir()
    (sub / "AGENTS.md").write_text("never seen\n")
    first, second = loader(workspace).files(sub)
    assert first.truncated and second.truncated
    assert "left out: project instructions are capped at 32 KiB in all" in first.text
    assert len(first.text.encode()) < INSTRUCTIONS_MAX_BYTES + 200
    assert "never seen" not in second.text and str(sub / "AGENTS.md") in second.text


def test_a_link_out_of_the_workspace_is_not_read(workspace: Path, tmp_path: Path) -> None:
    secret = tmp_path / "id_rsa"
    secret.write_text("PRIVATE KEY\n")
    os.symlink(secret, workspace / "AGENTS.md")
    assert loader(workspace).files() == []
    (workspace / "AGENTS.md").unlink()
    (workspace / "AGENTS.md").write_bytes(b"\x00\x01binary")
    assert loader(workspace).files() == []


def test_a_link_into_the_state_directory_is_not_read(workspace: Path) -> None:
    """``.craft`` counts as outside, as for the tools: its config holds API keys."""
    craft = workspace / ".craft"
    craft.mkdir(exist_ok=True)
    (craft / "config.json").write_text('{"ApiKey": "sk-secret"}\n')
    os.symlink(craft / "config.json", workspace / "AGENTS.md")
    sub = workspace / "sub"
    sub.mkdir()
    os.symlink(workspace / ".craft" / "config.json", sub / "AGENTS.md")
    assert loader(workspace).files(sub) == []


def test_the_environment_block(workspace: Path) -> None:
    block = Environment(
        cwd=workspace,
        workspace=workspace,
        approval_policy="default",
        today=datetime.date(2026, 1, 2),
    ).render()
    assert f"Working directory: {workspace} (the workspace root)" in block
    assert "Date: 2026-01-02" in block
    assert "Approval policy: default" in block
    assert "outside it need the user's approval" in block
    assert "Shell: `bash`" in block
    refusing = Environment(workspace, workspace, "interrupt", ask_outside_workspace=False)
    assert "outside it are refused" in refusing.render()


# --- what the model receives ----------------------------------------------------------------


def use_fake_openai(workspace: Path, base_url: str) -> None:
    settings = workspace_home(workspace) / "config.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(
        json.dumps({"Provider": "openai", "EndPoint": base_url, "ApiKey": "sk-test", "Model": "m"})
    )


@pytest.mark.parametrize("kind", ["memory", "stdio", "websocket"])
async def test_every_request_carries_prompt_environment_and_agents_md(
    kind: str, workspace: Path
) -> None:
    """Over each transport (stdio: a real subprocess), read by a fake OpenAI server."""
    (workspace / "AGENTS.md").write_text("Always run `make test` before you finish.\n")
    user_file = user_home() / "AGENTS.md"
    user_file.parent.mkdir(parents=True, exist_ok=True)
    user_file.write_text("The user prefers British spelling.\n")
    async with fake_model_server() as fake:
        use_fake_openai(workspace, fake.openai_base_url)
        fake.script(
            "POST /v1/chat/completions",
            openai_text_reply(["one"]),
            openai_text_reply(["two"]),
        )
        try:
            async with running_server(kind, workspace) as sut, sut.connect() as client:
                thread_id = await new_thread(client, agentInstructions="Thread says hello.")
                await run_turn(client, thread_id, "hi")
                (workspace / "AGENTS.md").write_text("Now: run `make lint` too.\n")
                await run_turn(client, thread_id, "again")
                shown = await client.request("prompt/read", {"threadId": thread_id})
        finally:
            user_file.unlink()
    first, second = fake.bodies("POST /v1/chat/completions")
    system = first["messages"][0]
    assert system["role"] == "system"
    text = system["content"]
    assert text.startswith(DEFAULT_SYSTEM_PROMPT)
    assert f"Working directory: {workspace.resolve()}" in text
    assert f"Date: {datetime.date.today().isoformat()}" in text
    assert "Approval policy: default" in text
    assert f"# The user's instructions ({user_file})" in text
    assert f"# Project instructions from {workspace.resolve() / 'AGENTS.md'}" in text
    assert "Always run `make test` before you finish." in text
    assert text.index("British spelling") < text.index("make test") < text.index("Thread says")
    # The edited file is read again for the next request.
    later = second["messages"][0]["content"]
    assert "make lint" in later and "make test" not in later
    # prompt/read shows what the next request carries, in sections.
    kinds = [section["kind"] for section in shown["sections"]]
    assert kinds == [
        "base",
        "environment",
        "projectInstructions",
        "projectInstructions",
        "agentInstructions",
    ]
    assert shown["sections"][2]["source"] == str(user_file)
    assert shown["sections"][3]["source"] == str(workspace.resolve() / "AGENTS.md")
    assert shown["text"] == later
    assert shown["truncated"] is False
    # The tools the model is offered include the new ones' schemas as they are.
    offered = {tool["function"]["name"]: tool["function"] for tool in first["tools"]}
    assert list(offered)[:10] == [
        "shell",
        "read_file",
        "list_dir",
        "grep",
        "find_files",
        "write_file",
        "edit_file",
        "apply_patch",
        "view_image",
        "web_fetch",
    ]
    assert offered["apply_patch"]["parameters"]["required"] == ["input"]
    assert "*** Begin Patch" in offered["apply_patch"]["description"]
    assert {"pattern", "path"} <= set(offered["grep"]["parameters"]["properties"])
    assert "pattern" in offered["find_files"]["parameters"]["properties"]
    assert offered["web_fetch"]["parameters"]["required"] == ["url"]


async def test_prompt_read_without_a_thread(workspace: Path) -> None:
    provider = RecordingProvider()
    async with (
        running_server("memory", workspace, provider=provider) as sut,
        sut.connect() as client,
    ):
        shown = await client.request("prompt/read", {})
        assert [section["kind"] for section in shown["sections"]] == ["base", "environment"]
        assert shown["sections"][0]["text"] == DEFAULT_SYSTEM_PROMPT
        with pytest.raises(Exception) as failure:
            await client.request("prompt/read", {"threadId": "thr_missing"})
        assert "not found" in str(failure.value).lower()
