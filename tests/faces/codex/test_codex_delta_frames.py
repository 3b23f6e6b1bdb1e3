"""A text delta's Codex frame spliced from its item's frame (faces/codex/streams.py).

The runtime hands a text delta's text with the event; after an item's first
delta the face frames the rest around it without parsing the params. Every
frame must be the one the parsing path makes, byte for byte.
"""

from __future__ import annotations

from typing import Any, cast

from appserver.faces.codex import wire
from appserver.faces.codex.streams import Streams
from appserver.protocol.threads import Item, Turn
from appserver.protocol.turns import DeltaNotification, ItemNotification, TurnNotification
from appserver.runtime.events import Event

THREAD, TURN = "thr_1", "turn_001"
TEXTS = ["Hello", ' "quoted" \\ back', "new\nline", "sep\u2028arator", "lone \ud800 half", "é✓"]


class Recorder:
    """What the face writes: notifications encoded as the session does, and spliced frames."""

    def __init__(self) -> None:
        self.frames: list[str] = []
        self.spliced = 0

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self.frames.append(wire.encode(wire.notification(method, params)))

    def send_frame(self, frame: str) -> None:
        self.spliced += 1
        self.frames.append(frame)


def streams(recorder: Recorder) -> Streams:
    # Neither the runtime nor the seat is used to translate events.
    face = Streams(cast(Any, None), cast(Any, None), recorder.notify, "/w", recorder.send_frame)
    face.watched.add(THREAD)
    return face


def delta(kind: str, item_id: str, text: str, *, with_text: bool = True) -> Event:
    params = DeltaNotification(
        thread_id=THREAD, turn_id=TURN, item_id=item_id, delta=text, delta_kind="agentMessage"
    )
    return Event(kind, params, thread_id=THREAD, stream=item_id, text=text if with_text else None)


def expected(method: str, item_id: str, text: str, **extra: object) -> str:
    params = {"itemId": item_id, "delta": text, **extra, "threadId": THREAD}
    params["turnId"] = f"{THREAD}:{TURN}"
    return wire.encode(wire.notification(method, params))


def test_every_text_delta_frame_is_the_parsed_one_byte_for_byte() -> None:
    recorder = Recorder()
    face = streams(recorder)
    for text in TEXTS:
        face._translate(delta("item/agentMessage/delta", "item_002", text))
    for text in TEXTS:
        face._translate(delta("item/reasoning/delta", "item_003", text))
    face._translate(delta("item/agentMessage/delta", "item_002", "read back", with_text=False))
    want = [expected("item/agentMessage/delta", "item_002", text) for text in TEXTS]
    want += [
        expected("item/reasoning/textDelta", "item_003", text, contentIndex=0) for text in TEXTS
    ]
    want.append(expected("item/agentMessage/delta", "item_002", "read back"))
    assert recorder.frames == want
    assert recorder.spliced == 2 * (len(TEXTS) - 1)  # all but each item's first


def test_an_item_s_frame_is_dropped_when_it_completes_or_its_turn_ends() -> None:
    recorder = Recorder()
    face = streams(recorder)
    face._translate(delta("item/agentMessage/delta", "item_002", "a"))
    face._translate(delta("item/agentMessage/delta", "item_004", "b"))
    assert set(face.delta_frames) == {
        (THREAD, "item_002", "item/agentMessage/delta"),
        (THREAD, "item_004", "item/agentMessage/delta"),
    }
    item = Item(
        id="item_002",
        turn_id=TURN,
        type="agentMessage",
        status="completed",
        created_at="2026-11-29T00:00:00Z",
        payload={"text": "a"},
    )
    face._translate(
        Event(
            "item/completed",
            ItemNotification(thread_id=THREAD, turn_id=TURN, item=item),
            thread_id=THREAD,
        )
    )
    assert set(face.delta_frames) == {(THREAD, "item_004", "item/agentMessage/delta")}
    turn = Turn(id=TURN, thread_id=THREAD, status="completed", started_at="2026-11-29T00:00:00Z")
    face._translate(
        Event("turn/completed", TurnNotification(thread_id=THREAD, turn=turn), thread_id=THREAD)
    )
    assert face.delta_frames == {}


def test_a_thread_not_watched_gets_no_frame_and_its_frames_are_dropped() -> None:
    recorder = Recorder()
    face = streams(recorder)
    face._translate(delta("item/agentMessage/delta", "item_002", "a"))
    face.unwatch(THREAD)
    face._translate(delta("item/agentMessage/delta", "item_002", "b"))
    assert len(recorder.frames) == 1
    assert face.delta_frames == {}


def test_the_same_item_id_in_two_threads_keeps_each_thread_s_frame() -> None:
    recorder = Recorder()
    face = streams(recorder)
    face.watched.add("thr_2")
    for thread in (THREAD, "thr_2", THREAD, "thr_2"):
        params = DeltaNotification(
            thread_id=thread, turn_id=TURN, item_id="item_002", delta="x", delta_kind="agentMessage"
        )
        event = Event(
            "item/agentMessage/delta", params, thread_id=thread, stream="item_002", text="x"
        )
        face._translate(event)
    assert [
        f'"threadId":"{thread}"' in frame
        for frame, thread in zip(recorder.frames, (THREAD, "thr_2", THREAD, "thr_2"), strict=True)
    ] == [True] * 4
    assert recorder.spliced == 2
