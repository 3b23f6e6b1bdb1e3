"""A streamed text item's ``item/started`` and its first delta are one commit of
the shared log (one announcement), numbered and delivered one after the other,
and the item is stored and announced as it started (no text yet); without the
shared log they come in the same order."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from appserver.protocol.turns import ItemNotification
from appserver.storage.cluster_common import LogEntry
from appserver.storage.cluster_sqlite import SqliteClusterStore
from tests.runtime.test_runtime_front_door import finished_turn, watched_runtime

Statements = Sequence[tuple[str, Sequence[Any]]]


@pytest.mark.parametrize("shared", [True, False], ids=["shared-log", "one-node"])
async def test_an_items_start_and_first_delta_go_together(
    tmp_path: Path, shared: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    commits: list[tuple[Sequence[LogEntry], Statements]] = []  # each append to the shared log
    append = SqliteClusterStore.append

    async def recorded(
        store: SqliteClusterStore,
        thread_id: str,
        entries: Sequence[LogEntry],
        statements: Statements = (),
        turn_id: str | None = None,
    ) -> int | None:
        commits.append((list(entries), list(statements)))
        return await append(store, thread_id, entries, statements, turn_id)

    monkeypatch.setattr(SqliteClusterStore, "append", recorded)
    async with watched_runtime(tmp_path, shared=shared) as (runtime, door):
        thread_id, _turn_id = await finished_turn(runtime, door)
    events = [event for event in door.events if event.thread_id == thread_id]
    started = next(
        index
        for index, event in enumerate(events)
        if event.kind == "item/started"
        and isinstance(event.params, ItemNotification)
        and event.params.item.type == "agentMessage"
    )
    first_delta = events[started + 1]
    started_seq = events[started].seq
    assert started_seq is not None and first_delta.kind == "item/agentMessage/delta"
    assert first_delta.seq == started_seq + 1
    params = events[started].params
    assert isinstance(params, ItemNotification)
    assert params.item.payload["text"] == "" and params.item.status == "started"
    assert first_delta.text  # the reply's first text rides on the delta

    if not shared:
        return
    with sqlite3.connect(tmp_path / ".craft" / "appserver.db") as conn:
        announced = conn.execute(
            "SELECT first_seq, last_seq FROM cluster_announcements WHERE thread_id = ?",
            (thread_id,),
        ).fetchall()
        stored = conn.execute(
            "SELECT params_json FROM thread_events WHERE thread_id = ? AND seq = ?",
            (thread_id, started_seq),
        ).fetchone()
    assert any(first <= started_seq and first_delta.seq <= last for first, last in announced)
    assert '"text":""' in stored[0]
    # The commit that announced the item wrote its row as it started: no text, not
    # streaming (the text so far is checkpointed later, and completed with the item).
    entries, statements = next(
        commit for commit in commits if "item/agentMessage/delta" in (e.method for e in commit[0])
    )
    assert [entry.method for entry in entries][-2:] == ["item/started", "item/agentMessage/delta"]
    (row,) = [args for sql, args in statements if sql.startswith("INSERT INTO items")]
    assert row[5] == "started" and json.loads(row[8]) == {"text": ""}
