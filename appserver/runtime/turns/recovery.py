"""Crash recovery: turns a previous process left running are marked failed."""

from __future__ import annotations

import json
import logging

from appserver.protocol.ids import now_iso
from appserver.runtime.events import Participant
from appserver.runtime.journal import ThreadJournal
from appserver.runtime.turns.queue import InputQueues
from appserver.runtime.wire import item_data, turn_data
from appserver.storage.records import ItemRecord, TurnRecord
from appserver.storage.threads import ThreadRepository

log = logging.getLogger("appserver.turns")

#: The payload field each stored delta method streams into.
STREAMED_FIELDS = {
    "item/agentMessage/delta": "text",
    "item/reasoning/delta": "text",
    "item/commandExecution/outputDelta": "aggregatedOutput",
}

RECOVERED_ERROR = (
    "The server stopped while this turn was running; "
    "it was marked failed when the server started again."
)


async def recover(journal: ThreadJournal, repo: ThreadRepository, inputs: InputQueues) -> int:
    """Fail turns a previous process left running; returns how many.

    Items still streaming are completed with the text saved so far;
    completed items were stored as they completed, so nothing is lost.
    """
    recovered = 0
    for turn in await journal.events.unfinished_turns():
        await fail_interrupted(journal, repo, inputs, turn, RECOVERED_ERROR)
        recovered += 1
    if recovered:
        log.warning("recovered %d turn(s) interrupted by a previous stop", recovered)
    return recovered


async def fail_interrupted(
    journal: ThreadJournal,
    repo: ThreadRepository,
    inputs: InputQueues,
    turn: TurnRecord,
    error: str,
    include: list[Participant] | None = None,
) -> None:
    """End a turn whose runner is gone: its streaming items complete with the
    text saved so far, then one ``turn/failed`` carrying ``error``; inputs
    steered into it go back to the queue (``turn/steer``). ``include``: who
    gets them besides the thread's subscribers (the turn's own watchers).

    Processes sharing a database stored every delta they delivered: an item
    completes with those (clients saw them) when they hold more than the
    item's last checkpoint."""
    now = now_iso()
    for item in await journal.events.unfinished_items(turn.thread_id, turn.id):
        if journal.shared is not None:
            await _with_stored_deltas(journal, item)
        item.status = "completed"
        item.completed_at = now
        await journal.emit(
            turn.thread_id,
            "item/completed",
            {"threadId": turn.thread_id, "turnId": turn.id, "item": item_data(item)},
            item=item,
            include=include or (),
        )
    turn.status = "failed"
    turn.completed_at = now
    turn.error = error
    items = (await repo.items(turn.thread_id, [turn.id]))[turn.id]
    await journal.emit(
        turn.thread_id,
        "turn/failed",
        {"threadId": turn.thread_id, "turn": turn_data(turn, items), "error": error},
        turn=turn,
        include=include or (),
    )
    await inputs.return_guidance(turn.thread_id, turn.id)


async def _with_stored_deltas(journal: ThreadJournal, item: ItemRecord) -> None:
    """Give ``item`` the text of its stored deltas where that is longer than its
    checkpoint (saved every half second or so, it lags what was delivered)."""
    pieces: dict[str, list[str]] = {}
    for method, params_json in await journal.events.stored_deltas(item.thread_id, item.id):
        field = STREAMED_FIELDS.get(method)
        if field is not None:
            delta = json.loads(params_json).get("delta")
            pieces.setdefault(field, []).append(delta if isinstance(delta, str) else "")
    for field, parts in pieces.items():
        text = "".join(parts)
        if len(text) > len(str(item.payload.get(field) or "")):
            item.payload[field] = text
