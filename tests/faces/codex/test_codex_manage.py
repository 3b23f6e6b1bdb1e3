"""The Codex face's thread-management, steering and catalogue methods, driven by
OpenAI's Python SDK (``openai-codex``) through a recorder between it and
``appserver-codex``: two threads running at once in one client, and every frame
the face sent validated against the JSON Schema Codex 0.169 itself generates."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai_codex import Codex, CodexConfig
from openai_codex.client import CodexClient

from tests.support.codex_clients import MISSING
from tests.support.codex_frames import CodexSchema, check_frames

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


@pytest.fixture
def schema(optional_schema: CodexSchema | None) -> CodexSchema:
    if optional_schema is None:
        pytest.skip(MISSING["schema"])
    return optional_schema


@pytest.fixture
def codex(config: CodexConfig, frames: Path, schema: CodexSchema) -> Iterator[Codex]:
    with Codex(config) as client:
        yield client
    assert check_frames(schema, frames) == []


def test_archive_rename_compact_and_the_catalogue(codex: Codex, frames: Path) -> None:
    thread = codex.thread_start()
    assert thread.run("first words").final_response == "You said: first words"
    thread.set_name("my thread")
    assert thread.read().thread.name == "my thread"
    thread.compact()
    codex.thread_archive(thread.id)
    assert thread.id not in [t.id for t in codex.thread_list().data]
    assert thread.id in [t.id for t in codex.thread_list(archived=True).data]
    assert codex.thread_unarchive(thread.id).id == thread.id
    models = codex.models().data
    assert [m.is_default for m in models].count(True) == 1
    account = codex.account()
    assert account.account is None and account.requires_openai_auth is False
    codex.close()
    sent = frames.read_text()
    for method in ("thread/name/updated", "thread/archived", "thread/unarchived"):
        assert f'"method":"{method}"' in sent
    assert '"type":"contextCompaction"' in sent


def test_turns_list_loaded_list_unsubscribe_and_delete(config: CodexConfig, frames: Path) -> None:
    with CodexClient(config) as client:
        client.initialize()
        thread_id = client.thread_start({}).thread.id
        for text in ("one", "two"):
            turn = client.turn_start(thread_id, text).turn
            while client.next_turn_notification(turn.id).method != "turn/completed":
                pass
        raw = client._request_raw
        listed = raw("thread/turns/list", {"threadId": thread_id, "limit": 1})
        assert isinstance(listed, dict) and len(listed["data"]) == 1
        assert listed["data"][0]["items"][0]["content"][0]["text"] == "two"  # newest first
        older = raw("thread/turns/list", {"threadId": thread_id, "cursor": listed["nextCursor"]})
        assert isinstance(older, dict) and older["nextCursor"] is None
        assert raw("thread/loaded/list", {}) == {"data": [thread_id], "nextCursor": None}
        assert raw("thread/unsubscribe", {"threadId": thread_id}) == {"status": "unsubscribed"}
        assert raw("thread/unsubscribe", {"threadId": thread_id}) == {"status": "notSubscribed"}
        assert raw("thread/delete", {"threadId": thread_id}) == {}
        assert raw("thread/unsubscribe", {"threadId": thread_id}) == {"status": "notLoaded"}


def test_steer_reaches_the_running_turn(codex: Codex) -> None:
    thread = codex.thread_start()
    turn = thread.turn("?stream 200\n?delay 20")
    steered = None
    for note in turn.stream():
        if note.method == "item/agentMessage/delta" and steered is None:
            steered = turn.steer("and also this")
        if note.method == "turn/completed":
            break
    assert steered is not None and steered.turn_id == turn.id
    # Steered into its only model call: the turn answers it with another before
    # it ends, as Codex does; no turn the client did not start follows.
    (only,) = thread.read(include_turns=True).thread.turns
    texts = [
        item.root.model_dump(by_alias=True, mode="json")
        for item in only.items
        if item.root.type == "userMessage"
    ]
    assert [part["content"][0]["text"] for part in texts][-1] == "and also this"
    assert thread.run("next").final_response == "You said: next"


def test_steered_input_goes_with_an_interrupted_turn(codex: Codex, workspace: Path) -> None:
    """Codex has no queue: what was steered into a turn that is interrupted does
    not come back later as a turn of its own."""
    thread = codex.thread_start()
    turn = thread.turn("?stream 200\n?delay 20")
    steered = False
    for note in turn.stream():
        # Once: a delta already on its way after the interrupt would steer into a
        # turn that has ended (refused, as it should be).
        if note.method == "item/agentMessage/delta" and not steered:
            steered = True
            turn.steer("never mind")
            turn.interrupt()
        if note.method == "turn/completed":
            break
    assert thread.run("next").final_response == "You said: next"
    with sqlite3.connect(workspace / ".craft" / "appserver.db") as db:  # gone with its turn
        assert db.execute("SELECT count(*) FROM queued_inputs").fetchone() == (0,)
    turns = thread.read(include_turns=True).thread.turns
    assert [t.status.value for t in turns] == ["interrupted", "completed"]


def test_two_threads_at_once_in_one_client(codex: Codex) -> None:
    first, second = codex.thread_start(), codex.thread_start()
    results: dict[str, Any] = {}

    def run(name: str, thread: Any) -> None:
        results[name] = thread.run(f"?stream 20\n?delay 5\n{name}").final_response

    workers = [threading.Thread(target=run, args=(n, t)) for n, t in (("A", first), ("B", second))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert set(results) == {"A", "B"}
    assert "A" not in results["B"] and "B" not in results["A"]
