"""Items of a running turn: creating, streaming, completing and announcing them.

Every item is stored before it is announced (read-your-writes), streaming
text is checkpointed now and then for crash recovery, and deltas are
numbered events (stored in the shared event log, replayable while their item
streams; on one node without it, kept in memory only). A streamed text item's
``item/started`` goes with its first delta (:meth:`ItemLog.open_text`).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import anyio

from appserver.protocol.encoding import dumps, dumps_text
from appserver.protocol.ids import now_iso
from appserver.providers.base import ToolCallDelta, Usage
from appserver.runtime.emissions import Emission
from appserver.runtime.journal import ThreadJournal
from appserver.runtime.streamed_text import append_text
from appserver.runtime.turns.model import ActiveTurn, UserInput
from appserver.runtime.wire import item_data
from appserver.storage.records import ItemRecord
from appserver.storage.threads import ThreadRepository

DELTA_KINDS = {
    "agentMessage": ("item/agentMessage/delta", "agentMessage"),
    "reasoningContent": ("item/reasoning/delta", "reasoningContent"),
}
COMMAND_TOPIC = "item:commandExecution"  # commandExecution items are opt-in


class ItemLog:
    """Writes a turn's items through the journal."""

    def __init__(
        self, journal: ThreadJournal, repo: ThreadRepository, checkpoint_interval: float
    ) -> None:
        self.journal = journal
        self.repo = repo
        self.checkpoint_interval = checkpoint_interval
        # (item, JSON before the text, JSON after it) of the last text delta.
        self._delta_json: tuple[ItemRecord, str, str] | None = None

    def new(self, active: ActiveTurn, kind: str, payload: dict[str, Any]) -> ItemRecord:
        active.next_item_seq += 1
        item = ItemRecord(
            thread_id=active.thread_id,
            turn_id=active.record.id,
            id=f"item_{active.next_item_seq:03d}",
            seq=active.next_item_seq,
            type=kind,
            status="started",
            created_at=now_iso(),
            payload=payload,
        )
        active.items.append(item)
        return item

    async def start(self, active: ActiveTurn, item: ItemRecord) -> None:
        await self._announce(active, "item/started", item)

    async def open(self, active: ActiveTurn, kind: str, payload: dict[str, Any]) -> ItemRecord:
        """A new item that streams until :meth:`complete`."""
        item = self.new(active, kind, payload)
        active.open_items[item.id] = item
        await self.start(active, item)
        return item

    async def open_text(self, active: ActiveTurn, kind: str, text: str) -> ItemRecord:
        """A new streaming text item (``agentMessage``, ``reasoningContent``) and its
        first text: ``item/started`` (after what the turn holds) and the first
        delta in one commit, instead of a commit each."""
        if not text:  # empty deltas are never sent
            return await self.open(active, kind, {"text": ""})
        item = self.new(active, kind, {"text": ""})
        active.open_items[item.id] = item
        # Stored and announced as it starts (no text yet); the delta carries the text.
        started = self._emission(active, "item/started", replace(item, payload={"text": ""}))
        append_text(item.payload, "text", text)
        item.status = "streaming"
        active.checkpoints[item.id] = time.monotonic()
        await self._commit(active, [started], first_text=(item, text))
        return item

    async def complete(self, active: ActiveTurn, item: ItemRecord) -> None:
        await self._commit(active, [self.completion(active, item)])

    def completion(self, active: ActiveTurn, item: ItemRecord) -> Emission:
        """Close ``item``; its ``item/completed``, to emit."""
        item.status = "completed"
        item.completed_at = now_iso()
        active.open_items.pop(item.id, None)
        return self._emission(active, "item/completed", item)

    async def _announce(self, active: ActiveTurn, kind: str, item: ItemRecord) -> None:
        """Store the item and announce it (stored first: read-your-writes)."""
        await self._commit(active, [self._emission(active, kind, item)])

    async def _commit(
        self,
        active: ActiveTurn,
        emissions: list[Emission],
        first_text: tuple[ItemRecord, str] | None = None,
    ) -> None:
        """Emit ``emissions`` after what the turn holds (:attr:`ActiveTurn.held`),
        in one commit: nothing overtakes what is held. ``first_text``: a streaming
        item and its first text, whose delta goes last in the same commit."""
        held = self.take_held(active) if active.held else []
        group = [*held, *emissions]
        if not group:
            return
        if first_text is None:
            emit = self.journal.emit_all(active.thread_id, group)
        else:
            item, text = first_text
            method, params_json = self._text_delta_json(active, item, text)
            emit = self.journal.emit_with_text(
                active.thread_id,
                group,
                item.id,
                method,
                params_json,
                text,
                active.record.id,
                tuple(active.watchers),
            )
        if not held:
            await emit
            return
        # Shielded: what was held is out of the turn's open items already (an
        # interrupt here would lose an item's completion, which the turn's end
        # could no longer close).
        with anyio.CancelScope(shield=True):
            await emit

    async def flush(self, active: ActiveTurn) -> None:
        """Emit what the turn holds, if anything."""
        await self._commit(active, [])

    @staticmethod
    def take_held(active: ActiveTurn) -> list[Emission]:
        """What the turn holds, to emit with its end."""
        held = list(active.held)
        active.held.clear()
        return held

    @staticmethod
    def _emission(active: ActiveTurn, kind: str, item: ItemRecord) -> Emission:
        return Emission(
            kind,
            {"threadId": active.thread_id, "turnId": active.record.id, "item": item_data(item)},
            include=tuple(active.watchers),
            topic=COMMAND_TOPIC if item.type == "commandExecution" else None,
            item=item,
        )

    async def instant(
        self, active: ActiveTurn, kind: str, payload: dict[str, Any], between: Any = None
    ) -> ItemRecord:
        """An item created already complete (user message, approvals, errors)."""
        if between is None:  # nothing comes between: its two events are one commit
            item, emissions = self.instant_emissions(active, kind, payload)
            await self._commit(active, emissions)
            return item
        item = self._new_complete(active, kind, payload)
        await self.start(active, item)
        await between(item)
        await self.complete(active, item)
        return item

    def instant_emissions(
        self, active: ActiveTurn, kind: str, payload: dict[str, Any]
    ) -> tuple[ItemRecord, list[Emission]]:
        """A complete item and its ``item/started`` and ``item/completed``, to emit
        (its own commit, or with others: a turn's opening)."""
        item = self._new_complete(active, kind, payload)
        started = self._emission(active, "item/started", item)
        item.completed_at = now_iso()  # as complete() stamps it
        return item, [started, self._emission(active, "item/completed", item)]

    def _new_complete(self, active: ActiveTurn, kind: str, payload: dict[str, Any]) -> ItemRecord:
        item = self.new(active, kind, payload)
        item.status = "completed"
        item.completed_at = item.created_at
        return item

    async def error(self, active: ActiveTurn, message: str, code: str, fatal: bool) -> None:
        await self.instant(active, "error", {"message": message, "code": code, "fatal": fatal})

    async def user_message(self, active: ActiveTurn, user: UserInput) -> None:
        await self._commit(active, self.user_message_emissions(active, user))

    def user_message_emissions(self, active: ActiveTurn, user: UserInput) -> list[Emission]:
        """The ``userMessage`` item of ``user``'s input, to emit."""
        payload: dict[str, Any] = {
            "text": user.display_text,
            "deliveryMode": user.delivery_mode,
            "nativeInputParts": user.native_parts,
            "materializedInputParts": user.materialized_parts,
        }
        if user.images:
            payload["images"] = user.images
        payload.update(user.extra)
        if user.sender is not None:
            payload.update(
                {
                    "senderId": user.sender.sender_id,
                    "senderName": user.sender.sender_name,
                    "senderRole": user.sender.sender_role,
                    "groupId": user.sender.group_id,
                }
            )
            payload = {key: value for key, value in payload.items() if value is not None}
        return self.instant_emissions(active, "userMessage", payload)[1]

    async def text_delta(self, active: ActiveTurn, item: ItemRecord, text: str) -> None:
        """Append streamed text to an open item and send the delta."""
        if not text:
            return  # empty deltas are never sent
        if active.held:  # (a usage reported before more text) goes first
            await self.flush(active)
        append_text(item.payload, "text", text)
        item.status = "streaming"
        method, params_json = self._text_delta_json(active, item, text)
        await self.journal.emit_delta(
            active.thread_id,
            item.id,
            method,
            None,
            params_json=params_json,
            include=active.watchers,
            turn_id=active.record.id,
            text=text,
        )
        # Streaming text is saved now and then (not per delta) so a crash loses
        # at most `checkpoint_interval` seconds of it. (time.monotonic is the
        # event loop's clock, without anyio's per-call backend lookup.)
        now = time.monotonic()
        saved = active.checkpoints.setdefault(item.id, now)
        if now - saved >= self.checkpoint_interval:
            active.checkpoints[item.id] = now
            await self.repo.save_item(item)

    def _text_delta_json(self, active: ActiveTurn, item: ItemRecord, text: str) -> tuple[str, str]:
        """The method and params (JSON) of ``item``'s text delta of ``text``."""
        method, delta_kind = DELTA_KINDS[item.type]
        # The hot path of a streamed turn: the params are the item's fixed
        # fields around the text, spliced as text (a DeltaNotification's JSON;
        # the typed params parse from it if a front door asks).
        last = self._delta_json
        if last is None or last[0] is not item:
            template = dumps(
                {
                    "threadId": active.thread_id,
                    "turnId": active.record.id,
                    "itemId": item.id,
                    "delta": "",
                    "deltaKind": delta_kind,
                }
            )
            before, after = template.split('"delta":""', 1)
            last = self._delta_json = (item, before + '"delta":', after)
        return method, last[1] + dumps_text(text) + last[2]

    async def arguments_delta(
        self, active: ActiveTurn, item: ItemRecord, event: ToolCallDelta
    ) -> None:
        if event.name and not item.payload.get("toolName"):
            item.payload["toolName"] = event.name
        if event.call_id and not item.payload.get("callId"):
            item.payload["callId"] = event.call_id
        if not event.arguments_delta:
            return
        item.status = "streaming"
        await self._delta(
            active,
            item,
            "item/toolCall/argumentsDelta",
            event.arguments_delta,
            deltaKind="toolCallArguments",
            toolName=event.name,
            callId=event.call_id,
        )

    async def output_delta(self, active: ActiveTurn, item: ItemRecord, chunk: str) -> None:
        """A chunk of a running command's output (an opt-in ``commandExecution`` delta)."""
        append_text(item.payload, "aggregatedOutput", chunk)
        await self._delta(
            active, item, "item/commandExecution/outputDelta", chunk, topic=COMMAND_TOPIC
        )

    async def _delta(
        self,
        active: ActiveTurn,
        item: ItemRecord,
        kind: str,
        text: str,
        topic: str | None = None,
        **fields: str | None,
    ) -> None:
        """Number and send one delta of ``item`` (``fields``: the delta's extras,
        by their wire names, in a DeltaNotification's order)."""
        if active.held:
            await self.flush(active)
        params = {
            "threadId": active.thread_id,
            "turnId": active.record.id,
            "itemId": item.id,
            "delta": text,
        }
        params.update((name, value) for name, value in fields.items() if value is not None)
        await self.journal.emit_delta(
            active.thread_id,
            item.id,
            kind,
            params,
            include=active.watchers,
            topic=topic,
            turn_id=active.record.id,
        )

    def usage(self, active: ActiveTurn, usage: Usage) -> None:
        """Count a model call's usage; its ``item/usage/delta`` is held for the
        turn's next commit (a provider reports usage as its response ends, and
        what comes next is the response's items closing, or the turn's end)."""
        active.input_tokens += usage.input_tokens
        active.output_tokens += usage.output_tokens
        active.held.append(
            Emission(
                "item/usage/delta",
                {
                    "threadId": active.thread_id,
                    "turnId": active.record.id,
                    "inputTokens": usage.input_tokens,
                    "outputTokens": usage.output_tokens,
                    "totalInputTokens": active.input_tokens,
                    "totalOutputTokens": active.output_tokens,
                },
                include=tuple(active.watchers),
            )
        )
