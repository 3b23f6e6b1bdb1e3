"""The Codex face's ``mcpToolCall`` items, ``turn/start``'s per-turn overrides and
``skill`` input parts.

Overrides are sent by OpenAI's Python SDK (``Thread.run(model=..., sandbox=...,
effort=...)``, ``CodexClient.turn_start(..., params)``) behind the recorder, every
frame checked against Codex 0.169's schema. MCP servers and skills live in the
full server, which a face runs with ``--websocket``: those tests speak Codex JSON
lines to such a process (the SDK has no flag for it), configure the MCP server
through its DotCraft WebSocket, and check every frame against the schema too.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from openai_codex import Codex, CodexConfig, Sandbox
from openai_codex.client import CodexClient
from openai_codex.errors import InvalidRequestError

from tests.support.codex_frames import CodexSchema, check_frames
from tests.support.fake_models import fake_model_server, openai_text_reply
from tests.support.json_lines import JsonLinesProcess, piped_process
from tests.support.line_peer import face_env
from tests.support.mcp_helpers import current_status, echo_config
from tests.support.processes import ws_client
from tests.support.servers import child_env, read_listening_url, running_server
from tests.support.skills_files import isolate_user_roots, workspace_skills, write_skill

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

Frame = dict[str, Any]
CHAT = "POST /v1/chat/completions"


def run_turn(
    client: CodexClient, thread_id: str, text: str, params: dict[str, Any] | None = None
) -> list[Any]:
    """The turn's notifications, through ``turn/completed``."""
    turn = client.turn_start(thread_id, text, params).turn
    notes = []
    while True:
        note = client.next_turn_notification(turn.id)
        notes.append(note)
        if note.method == "turn/completed":
            return notes


def answer(notes: list[Any]) -> str:
    return str(
        [
            n.payload.item.root.text
            for n in notes
            if n.method == "item/completed" and n.payload.item.root.type == "agentMessage"
        ][-1]
    )


# --- per-turn overrides ---------------------------------------------------------------------


async def test_a_model_override_holds_for_this_and_later_turns(
    workspace: Path, teed_bin: str, frames: Path, optional_schema: CodexSchema | None
) -> None:
    async with fake_model_server() as fake:
        fake.script(CHAT, *(openai_text_reply([f"answer {n}"]) for n in range(3)))
        env = child_env()
        env.update(
            APPSERVER_PROVIDER="openai",
            OPENAI_BASE_URL=fake.openai_base_url,
            OPENAI_API_KEY="test-key",
        )
        config = CodexConfig(codex_bin=teed_bin, cwd=str(workspace), env=env)

        def session() -> tuple[str, str]:
            with Codex(config) as codex:
                thread = codex.thread_start(model="model-a")
                assert thread.run("one").final_response == "answer 0"
                assert thread.run("two", model="model-b").final_response == "answer 1"
                assert thread.run("three").final_response == "answer 2"
            with CodexClient(config) as client:  # another process: what is stored
                client.initialize()
                return thread.id, str(client.thread_resume(thread.id).model)

        thread_id, shown = await anyio.to_thread.run_sync(session)
        assert [body["model"] for body in fake.bodies(CHAT)] == ["model-a", "model-b", "model-b"]
    assert shown == "model-b"
    if optional_schema is not None:
        assert check_frames(optional_schema, frames) == []
    # A DotCraft client sees the thread's configuration changed.
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        read = await client.request("thread/read", {"threadId": thread_id})
        assert read["thread"]["configuration"]["model"] == "model-b"


@pytest.mark.usefixtures("every_frame_checked")
def test_an_approval_policy_override_decides_what_is_asked(
    config: CodexConfig, workspace: Path
) -> None:
    asked: list[str] = []

    def handler(method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        asked.append((params or {}).get("command", ""))
        return {"decision": "accept"}

    with CodexClient(config, approval_handler=handler) as client:
        client.initialize()
        started = client.thread_start({"approvalPolicy": "on-request", "approvalsReviewer": "user"})
        thread_id = started.thread.id
        run_turn(client, thread_id, "!touch first")
        assert asked == []  # on-request: workspace commands run unasked
        untrusted = {"approvalPolicy": "untrusted"}
        assert answer(run_turn(client, thread_id, "!touch second", untrusted)) == (
            "The command exited with code 0."
        )
        assert asked == ["touch second"]
        run_turn(client, thread_id, "!touch third")  # the override holds for later turns
        assert asked == ["touch second", "touch third"]
        assert client.thread_resume(thread_id).approval_policy.root.value == "untrusted"
        run_turn(client, thread_id, "!touch fourth", {"approvalPolicy": "on-request"})
        assert asked == ["touch second", "touch third"]
        # A reviewer other than the user fails closed from now on.
        notes = run_turn(
            client,
            thread_id,
            "!touch fifth",
            {"approvalPolicy": "untrusted", "approvalsReviewer": "auto_review"},
        )
        assert answer(notes) == "The shell call was declined."
        assert asked == ["touch second", "touch third"]
    assert [(workspace / n).exists() for n in ("first", "second", "third", "fourth", "fifth")] == [
        True,
        True,
        True,
        True,
        False,
    ]


@pytest.mark.usefixtures("every_frame_checked")
def test_cwd_sandbox_and_effort_overrides(
    config: CodexConfig, workspace: Path, tmp_path: Path
) -> None:
    with Codex(config) as codex:
        thread = codex.thread_start()
        result = thread.run(
            "hello",
            cwd=str(workspace),
            sandbox=Sandbox.full_access,
            effort="high",  # type: ignore[arg-type]
            summary="concise",  # type: ignore[arg-type]
        )
        assert result.final_response == "You said: hello"
        with pytest.raises(InvalidRequestError, match="workspace"):
            thread.run("elsewhere", cwd=str(tmp_path))
        assert thread.run("again").final_response == "You said: again"


# --- through a face that runs the full server (--websocket) ---------------------------------


class CodexLines:
    """A raw Codex client of a face process; every frame it reads is kept."""

    def __init__(self, process: Any) -> None:
        self.peer = JsonLinesProcess(process, timeout=60)
        self.asked: dict[Any, str] = {}
        self.next_id = 0

    async def request(self, method: str, params: Frame) -> Frame:
        self.next_id += 1
        request_id = self.next_id
        self.asked[request_id] = method
        await self.peer.send({"id": request_id, "method": method, "params": params})
        frames = await self.peer.until(lambda f: f.get("id") == request_id and "method" not in f)
        return frames[-1]

    async def turn(self, thread_id: str, input_parts: list[Frame]) -> list[Frame]:
        """Start a turn; its frames through ``turn/completed``."""
        mark = len(self.peer.frames)
        started = await self.request("turn/start", {"threadId": thread_id, "input": input_parts})
        turn_id = started["result"]["turn"]["id"]
        await self.peer.until(
            lambda f: f.get("method") == "turn/completed" and f["params"]["turn"]["id"] == turn_id
        )
        return self.peer.frames[mark:]

    def schema_errors(self, schema: CodexSchema | None) -> list[str]:
        if schema is None:
            return []
        return [e for frame in self.peer.frames for e in schema.errors(frame, self.asked)]


@asynccontextmanager
async def full_face(workspace: Path, tmp_path: Path) -> AsyncIterator[tuple[CodexLines, str]]:
    """``appserver codex app-server --websocket``, initialized; its DotCraft URL."""
    argv = [sys.executable, "-m", "appserver", "codex", "app-server", "--provider", "offline"]
    argv += ["--websocket", "ws://127.0.0.1:0"]
    env = face_env()
    env["APPSERVER_READ_ONLY_COMMANDS"] = "ask"
    async with piped_process(
        argv, workspace, env, tmp_path / "face.stderr", stderr=subprocess.PIPE, timeout=60
    ) as process:
        url = await read_listening_url(process, timeout=60)
        client = CodexLines(process)
        await client.request("initialize", {"clientInfo": {"name": "raw", "version": "1"}})
        yield client, url


def completed_items(frames: list[Frame], kind: str) -> list[Frame]:
    return [
        f["params"]["item"]
        for f in frames
        if f.get("method") == "item/completed" and f["params"]["item"]["type"] == kind
    ]


async def test_mcp_calls_are_mcp_tool_call_items(
    workspace: Path, tmp_path: Path, optional_schema: CodexSchema | None
) -> None:
    async with full_face(workspace, tmp_path) as (codex, url):
        async with ws_client(url, "configurer") as dotcraft:
            await dotcraft.request("mcp/upsert", {"server": echo_config("echo")})
            assert (await current_status(dotcraft, "echo"))["startupState"] == "ready"
        started = await codex.request("thread/start", {"approvalPolicy": "on-request"})
        thread_id = started["result"]["thread"]["id"]
        frames = await codex.turn(
            thread_id, [{"type": "text", "text": '?tool mcp__echo__echo {"text": "hi-7"}'}]
        )
        live_start = [
            f["params"]["item"]
            for f in frames
            if f.get("method") == "item/started" and f["params"]["item"]["type"] == "mcpToolCall"
        ]
        assert live_start == [
            {
                "type": "mcpToolCall",
                "id": "offline_call_1",
                "server": "echo",
                "tool": "echo",
                "status": "inProgress",
                "arguments": {"text": "hi-7"},
                "durationMs": None,
            }
        ]
        [done] = completed_items(frames, "mcpToolCall")
        assert done["status"] == "completed"
        assert done["result"] == {"content": [{"type": "text", "text": "hi-7"}]}
        assert isinstance(done["durationMs"], int) and done["durationMs"] >= 0
        assert "error" not in done
        assert completed_items(frames, "dynamicToolCall") == []

        frames = await codex.turn(
            thread_id, [{"type": "text", "text": '?tool mcp__echo__fail {"message": "nope"}'}]
        )
        [failed] = completed_items(frames, "mcpToolCall")
        assert failed["status"] == "failed" and "nope" in failed["error"]["message"]
        assert "result" not in failed

        read = await codex.request("thread/read", {"threadId": thread_id, "includeTurns": True})
        stored = [
            item
            for turn in read["result"]["thread"]["turns"]
            for item in turn["items"]
            if item["type"] == "mcpToolCall"
        ]
        assert [(i["server"], i["tool"], i["status"]) for i in stored] == [
            ("echo", "echo", "completed"),
            ("echo", "fail", "failed"),
        ]
        assert stored[0]["result"] == done["result"]
        assert stored[0]["durationMs"] is None  # not measured in a replay
        assert codex.schema_errors(optional_schema) == []


async def test_a_skill_part_is_our_skill_reference(
    workspace: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    optional_schema: CodexSchema | None,
) -> None:
    isolate_user_roots(tmp_path, monkeypatch)
    skill = write_skill(workspace_skills(workspace), "haiku", "description: Answer in haiku\n")
    async with full_face(workspace, tmp_path) as (codex, _):
        started = await codex.request("thread/start", {})
        thread_id = started["result"]["thread"]["id"]
        skill_part = {"type": "skill", "name": "haiku", "path": str(skill / "SKILL.md")}
        frames = await codex.turn(thread_id, [{"type": "text", "text": "the sea"}, skill_part])
        [user] = completed_items(frames, "userMessage")
        assert user["content"][1] == {"type": "skill", "name": "haiku", "path": ""}
        [reply] = completed_items(frames, "agentMessage")
        assert reply["text"] == "You said: the sea [skill: haiku]"
        unknown = {"type": "skill", "name": "nosuch", "path": "/x/SKILL.md"}
        refused = await codex.request(
            "turn/start", {"threadId": thread_id, "input": [{"type": "text", "text": "x"}, unknown]}
        )
        assert refused["error"]["code"] == -32600 and "nosuch" in refused["error"]["message"]
        assert codex.schema_errors(optional_schema) == []


@pytest.mark.usefixtures("every_frame_checked")
def test_without_the_full_server_a_skill_part_is_left_out(config: CodexConfig) -> None:
    with CodexClient(config) as client:
        client.initialize()
        thread_id = client.thread_start({"approvalPolicy": "on-request"}).thread.id
        turn = client.turn_start(
            thread_id,
            [
                {"type": "text", "text": "plain"},
                {"type": "skill", "name": "haiku", "path": "/x/SKILL.md"},
            ],
        ).turn
        notes = []
        while (note := client.next_turn_notification(turn.id)).method != "turn/completed":
            notes.append(note)
        assert answer(notes) == "You said: plain"
