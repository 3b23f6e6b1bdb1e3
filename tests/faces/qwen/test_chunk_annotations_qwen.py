"""``--output-format stream-chunk-json``: the parts of the RFC (seed 002,
QwenLM/qwen-code#810) a turn with a tool call and its approval produces, each
chunk checked against the RFC's shapes: ``capabilities`` in the first chunk's
metadata, the ``finish_reason: "tool_calls"`` chunk, ``x-qwen-tool-display``
with its states and ``confirmation``, ``x-qwen-terminal``, ``x-qwen-thought``
and ``x-qwen-session-event``. Driven over the real face process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.faces.qwen.test_face_qwen import SLOW, Qwen, answer, check_chunk, qwen

Frame = dict[str, Any]
BASE = ["--input-format", "stream-json", "--output-format", "stream-chunk-json"]
STATUSES = {"pending", "confirming", "executing", "success", "error", "canceled"}
ANNOTATION_FIELDS = {
    "x-qwen-tool-display": {
        "type",
        "tool_call_id",
        "session_id",
        "status",
        "result_display",
        "confirmation",
        "pending",
        "timestamp",
    },
    "x-qwen-terminal": {
        "type",
        "channel",
        "source",
        "spans",
        "ansi",
        "console_level",
        "exit_code",
        "prompt_id",
    },
    "x-qwen-thought": {"type", "subject", "description"},
    "x-qwen-session-event": {"type", "event", "message", "metrics"},
}


def check_annotated(line: bytes) -> Frame:
    """A chunk line, and each of its annotations in the RFC's shape."""
    frame = check_chunk(line)
    for annotation in frame.get("annotations", []):
        fields = ANNOTATION_FIELDS[annotation["type"]]
        assert fields <= set(annotation), annotation
        if annotation["type"] == "x-qwen-tool-display":
            assert set(annotation) == fields, annotation
            assert annotation["status"] in STATUSES, annotation
            assert annotation["pending"] is (annotation["status"] in ("pending", "confirming"))
            assert isinstance(annotation["timestamp"], int), annotation
        elif annotation["type"] == "x-qwen-terminal":
            assert annotation["channel"] in ("stdout", "stderr"), annotation
            assert annotation["source"] in ("assistant", "tool", "console", "system"), annotation
            assert annotation["prompt_id"].startswith(frame["id"].removeprefix("chatcmpl-"))
            for code in annotation["ansi"]:
                assert set(code) == {"offset", "code"}, annotation
        elif annotation["type"] == "x-qwen-session-event":
            assert annotation["metrics"] is None or isinstance(annotation["metrics"], dict)
    return frame


def annotations(frames: list[Frame], kind: str) -> list[Frame]:
    return [a for f in frames for a in f.get("annotations", []) if a["type"] == kind]


def kind_of(frame: Frame) -> str:
    """What a line is, for the order of a turn."""
    if "choices" not in frame:
        return str(frame.get("type", "error"))
    if frame.get("annotations"):
        (annotation,) = frame["annotations"]
        if annotation["type"] == "x-qwen-tool-display":
            return f"display:{annotation['status']}"
        if annotation["type"] == "x-qwen-terminal":
            return f"terminal:{annotation['source']}"
        if annotation["type"] == "x-qwen-session-event":
            return f"session:{annotation['event']}"
        if annotation["type"] == "x-qwen-thought":
            return "thought"
    choice = frame["choices"][0]
    if choice["finish_reason"]:
        return f"finish:{choice['finish_reason']}"
    delta = choice["delta"]
    return next(iter(delta), "empty")


def squeeze(kinds: list[str]) -> list[str]:
    """Runs of the same kind as one."""
    return [kind for index, kind in enumerate(kinds) if index == 0 or kinds[index - 1] != kind]


async def turn_end(proc: Qwen) -> list[Frame]:
    return await proc.until(
        lambda f: "choices" in f and f["choices"][0]["finish_reason"] not in (None, "tool_calls")
    )


async def test_a_turn_with_an_approved_call_carries_each_part_of_the_rfc(
    workspace: Path,
) -> None:
    async with qwen(workspace, base=BASE, check=check_annotated) as proc:
        await proc.initialize()
        await proc.prompt("?think **Plan** print it green\n!printf '\\033[32mgreen\\033[0m\\n'")
        asked = await proc.until(lambda f: f.get("type") == "control_request")
        request = asked[-1]
        call_id = request["request"]["tool_use_id"]
        await proc.send(answer(request, behavior="allow", updatedInput=request["request"]["input"]))
        frames = asked + await turn_end(proc)
        kinds = squeeze([kind_of(f) for f in frames])
        assert kinds == [
            "role",
            "reasoning_content",
            "thought",
            "tool_calls",
            "finish:tool_calls",
            "display:pending",
            "display:confirming",
            "control_request",
            "display:executing",
            "terminal:tool",
            "terminal:system",
            "display:success",
            "content",
            "finish:stop",
        ], kinds

        first = frames[0]
        assert first["choices"][0]["delta"] == {"role": "assistant"}
        meta = first["metadata"]
        assert {"protocol_version", "input_format", "output_format", "capabilities"} <= set(meta)
        assert meta["input_format"] == "stream-json"
        assert meta["capabilities"]["can_handle_can_use_tool"] is True
        assert meta["capabilities"] == (await proc.initialize())["capabilities"]

        (thought,) = annotations(frames, "x-qwen-thought")
        assert thought == {
            "type": "x-qwen-thought",
            "subject": "Plan",
            "description": "print it green",
        }

        finish = next(f for f in frames if f["choices"][0]["finish_reason"] == "tool_calls")
        assert finish["choices"][0]["delta"] == {}

        displays = annotations(frames, "x-qwen-tool-display")
        assert [d["status"] for d in displays] == ["pending", "confirming", "executing", "success"]
        assert {d["tool_call_id"] for d in displays} == {call_id}
        assert displays[0]["confirmation"] is None and displays[0]["result_display"] is None
        assert displays[1]["confirmation"] == {
            "type": "exec",
            "title": "Confirm Shell Command",
            "command": "printf '\\033[32mgreen\\033[0m\\n'",
            "root_command": "printf",
            "reason": displays[1]["confirmation"]["reason"],
        }
        assert displays[-1]["result_display"]["kind"] == "string"
        assert "exit code: 0" in displays[-1]["result_display"]["text"]

        terminal = annotations(frames, "x-qwen-terminal")
        output, end = terminal[0], terminal[-1]
        assert output["source"] == "tool" and output["text"] == "green\n"
        assert output["ansi"] == [
            {"offset": 0, "code": "\x1b[32m"},
            {"offset": 5, "code": "\x1b[0m"},
        ]
        assert output["tool_call_id"] == call_id and output["exit_code"] is None
        assert end["source"] == "system" and end["exit_code"] == 0 and end["text"] == ""
        _, code = await proc.finish()
        assert code == 0


async def test_denied_and_interrupted_calls_and_session_events(workspace: Path) -> None:
    async with qwen(workspace, base=BASE, check=check_annotated) as proc:
        await proc.prompt("!touch denied.txt")
        request = (await proc.until(lambda f: f.get("type") == "control_request"))[-1]
        await proc.send(answer(request, behavior="deny", message="no"))
        frames = await turn_end(proc)
        displays = annotations(proc.frames, "x-qwen-tool-display")
        assert [d["status"] for d in displays] == ["pending", "confirming", "canceled"]
        assert displays[-1]["result_display"]["text"].startswith("Declined")
        assert not annotations(proc.frames, "x-qwen-terminal")  # it never ran

        await proc.prompt("/compress")
        frames = await turn_end(proc)
        events = annotations(frames, "x-qwen-session-event")
        assert [e["event"] for e in events] == ["ChatCompressing", "ChatCompressed"], events
        before = events[0]["metrics"]["original_tokens"]
        assert isinstance(before, int) and before > 0
        assert events[1]["metrics"] == {
            "original_tokens": before,
            "compressed_tokens": events[1]["metrics"]["compressed_tokens"],
        }
        assert isinstance(events[1]["metrics"]["compressed_tokens"], int)

        await proc.prompt(SLOW)
        await proc.until(lambda f: "choices" in f and "content" in f["choices"][0]["delta"])
        assert (await proc.control("interrupt"))["subtype"] == "success"
        frames = await turn_end(proc)
        assert frames[-1]["choices"][0]["finish_reason"] == "cancelled"
        (event,) = annotations(frames, "x-qwen-session-event")
        assert event["event"] == "USER_CANCELLED" and event["message"] == "Operation cancelled."

        _, code = await proc.finish()
        assert code == 0
