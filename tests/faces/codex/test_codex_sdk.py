"""``appserver-codex app-server``, driven by OpenAI's own Python SDK (``openai-codex``)
as its users drive Codex: ``CodexConfig(codex_bin=...)`` and nothing else, the
offline model making every turn deterministic. The SDK validates every result
and typed notification with its generated models of Codex's schema, and a
recorder between it and the face (``teed_bin``) has every frame of each session
checked against the JSON Schema Codex 0.169 generates, so a shape we get wrong
fails here."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai_codex import Codex, CodexConfig
from openai_codex.client import CodexClient

from tests.support.servers import child_env

# The SDK's close() leaves its pipes to the garbage collector (openai-codex 0.163.0).
pytestmark = [
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
    pytest.mark.usefixtures("every_frame_checked"),
]


@pytest.fixture
def config(workspace: Path, teed_bin: str) -> CodexConfig:
    env = child_env()
    env["APPSERVER_PROVIDER"] = "offline"
    return CodexConfig(
        codex_bin=teed_bin,  # appserver-codex behind the recorder (conftest.py)
        cwd=str(workspace),
        env=env,
        config_overrides=('model_provider="offline"', "sandbox_mode=workspace-write", "x=1"),
    )


@pytest.fixture
def codex(config: CodexConfig) -> Iterator[Codex]:
    with Codex(config) as client:
        yield client


def test_handshake_names_the_codex_protocol_version(codex: Codex) -> None:
    metadata = codex.metadata
    assert metadata.userAgent is not None and "/0.169.0 " in metadata.userAgent
    assert metadata.serverInfo is not None
    assert metadata.serverInfo.version.split()[0] == "0.169.0"
    assert metadata.platformFamily == "unix"


def test_a_thread_streams_runs_reads_and_resumes(config: CodexConfig) -> None:
    with Codex(config) as codex:
        thread_id = _first_session(codex)
    with Codex(config) as again:  # a new process (one per workspace): the thread is stored
        resumed = again.thread_resume(thread_id)
        assert resumed.run("once more").final_response == "You said: once more"
        turns = resumed.read(include_turns=True).thread.turns
        assert [t.status.value for t in turns] == ["completed"] * 3


def _first_session(codex: Codex) -> str:
    thread = codex.thread_start()
    turn = thread.turn("?stream 3")
    methods = []
    deltas = []
    for note in turn.stream():
        methods.append(note.method)
        if note.method == "item/agentMessage/delta":
            deltas.append(note.payload.delta)  # type: ignore[union-attr]
    assert deltas == ["chunk 1 ", "chunk 2 ", "chunk 3 "]
    assert methods[-1] == "turn/completed"
    assert "thread/tokenUsage/updated" in methods

    result = thread.run("hello there")
    assert result.final_response == "You said: hello there"
    assert result.usage is not None and result.usage.total.total_tokens > 0

    read = thread.read(include_turns=True)
    turns = read.thread.turns
    assert [t.status.value for t in turns] == ["completed", "completed"]
    kinds = [item.root.type for item in turns[1].items]
    assert kinds == ["userMessage", "agentMessage"]
    assert read.thread.preview == "?stream 3"
    assert len({t.id for t in turns}) == 2

    listed = codex.thread_list()
    assert thread.id in [t.id for t in listed.data]
    return thread.id


def test_approvals_are_codex_requests(config: CodexConfig, workspace: Path) -> None:
    asked: list[tuple[str, dict[str, Any]]] = []
    answers = ["accept", "decline"]

    def handler(method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        asked.append((method, params or {}))
        return {"decision": answers.pop(0)}

    with CodexClient(config, approval_handler=handler) as client:
        client.initialize()
        started = client.thread_start({"approvalPolicy": "untrusted", "approvalsReviewer": "user"})
        thread_id = started.thread.id

        def run(text: str) -> list[Any]:
            turn = client.turn_start(thread_id, text).turn
            notes = []
            while True:
                note = client.next_turn_notification(turn.id)
                notes.append(note)
                if note.method == "turn/completed":
                    return notes

        approved = run("!touch made && echo approved-42")
        assert (workspace / "made").exists()
        method, params = asked[0]
        assert method == "item/commandExecution/requestApproval"
        assert params["command"] == "touch made && echo approved-42"
        completed = [
            n.payload.item.root
            for n in approved
            if n.method == "item/completed" and n.payload.item.root.type == "commandExecution"  # type: ignore[union-attr]
        ]
        assert completed[0].id == params["itemId"] == "offline_call_1"
        assert completed[0].aggregated_output == "approved-42\n"
        assert completed[0].exit_code == 0
        final = [
            n.payload.item.root.text  # type: ignore[union-attr]
            for n in approved
            if n.method == "item/completed" and n.payload.item.root.type == "agentMessage"  # type: ignore[union-attr]
        ]
        assert final == ["The command exited with code 0."]

        declined = run("!touch never")
        assert not (workspace / "never").exists()
        statuses = [
            n.payload.item.root.status.value  # type: ignore[union-attr]
            for n in declined
            if n.method == "item/completed" and n.payload.item.root.type == "commandExecution"  # type: ignore[union-attr]
        ]
        assert statuses == ["declined"]
        assert declined[-1].payload.turn.status.value == "completed"  # type: ignore[union-attr]
        outputs = [
            n.payload.item.root.aggregated_output  # type: ignore[union-attr]
            for n in declined
            if n.method == "item/completed" and n.payload.item.root.type == "commandExecution"  # type: ignore[union-attr]
        ]
        assert outputs == [None]  # as Codex: null, not "" or a placeholder
        assert [m for m, _ in asked] == ["item/commandExecution/requestApproval"] * 2
    assert os.environ.get("APPSERVER_READ_ONLY_COMMANDS") == "ask"


def test_interrupt_after_the_first_delta_then_another_turn(codex: Codex) -> None:
    thread = codex.thread_start()
    turn = thread.turn("?stream 1000\n?delay 20")
    ended = None
    for note in turn.stream():
        if note.method == "item/agentMessage/delta" and ended is None:
            turn.interrupt()
            ended = "asked"
        if note.method == "turn/completed":
            ended = note.payload.turn.status.value  # type: ignore[union-attr]
    assert ended == "interrupted"
    assert thread.run("after").final_response == "You said: after"


def test_an_approved_file_write_is_one_file_change_with_its_diff(
    config: CodexConfig, workspace: Path
) -> None:
    asked: list[str] = []
    proposed: list[Any] = []

    def handler(method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        asked.append(method)
        return {"decision": "accept"}

    with CodexClient(config, approval_handler=handler) as client:
        client.initialize()
        thread_id = client.thread_start({"approvalPolicy": "untrusted"}).thread.id
        turn = client.turn_start(thread_id, ">notes.txt\nhello").turn
        changes = []
        diffs = []
        while True:
            note = client.next_turn_notification(turn.id)
            if note.method == "item/started" and note.payload.item.root.type == "fileChange":  # type: ignore[union-attr]
                proposed.append(note.payload.item.root)  # type: ignore[union-attr]
            if note.method == "turn/diff/updated":
                diffs.append(note.payload.diff)  # type: ignore[union-attr]
            if note.method == "item/completed" and note.payload.item.root.type == "fileChange":  # type: ignore[union-attr]
                changes.append(note.payload.item.root)  # type: ignore[union-attr]
            if note.method == "turn/completed":
                break
    assert asked == ["item/fileChange/requestApproval"]
    # As Codex's: the item starts with the change the approval is about (the IDE's
    # dialog shows it), before the request.
    [started] = proposed
    assert started.changes[0].path == "notes.txt" and "+hello" in started.changes[0].diff
    assert started.changes[0].kind.root.type == "add"
    assert (workspace / "notes.txt").read_text() == "hello\n"
    [change] = changes
    assert change.status.value == "completed"
    assert change.changes[0].path == "notes.txt"
    assert change.changes[0].kind.root.type == "add"
    assert "+hello" in change.changes[0].diff
    assert diffs and "+hello" in diffs[-1]


def test_accept_for_session_of_a_file_change_covers_that_file_only(
    config: CodexConfig, workspace: Path
) -> None:
    """Codex: "future changes to the same files"; a write to another file asks."""
    asked: list[str] = []

    def handler(method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        asked.append(method)
        return {"decision": "acceptForSession"}

    def run(client: CodexClient, thread_id: str, text: str) -> None:
        turn = client.turn_start(thread_id, text).turn
        while client.next_turn_notification(turn.id).method != "turn/completed":
            pass

    with CodexClient(config, approval_handler=handler) as client:
        client.initialize()
        thread_id = client.thread_start({"approvalPolicy": "untrusted"}).thread.id
        run(client, thread_id, ">notes.txt\nhello")
        run(client, thread_id, ">notes.txt\nagain")
        assert len(asked) == 1
        run(client, thread_id, ">other.txt\nelsewhere")
        assert len(asked) == 2
    assert (workspace / "notes.txt").read_text() == "again\n"
    assert (workspace / "other.txt").read_text() == "elsewhere\n"
