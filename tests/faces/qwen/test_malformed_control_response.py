"""A malformed ``control_response`` is reported (``system`` ``input_error``) at
once; when it names the ``can_use_tool`` request waiting for it, that approval
is declined at once instead of waiting out the approval timeout (120 s).
Driven over the real face process, as ``@qwen-code/sdk`` drives it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from tests.faces.qwen.test_face_qwen import Qwen, answer, of, qwen, tool_results

Frame = dict[str, Any]
PROMPT_DEADLINE = 10.0  # far below the approval timeout: nothing waits it out


def success(request_id: object, body: object) -> Frame:
    response = {"subtype": "success", "request_id": request_id, "response": body}
    return {"type": "control_response", "response": response}


# Malformed answers that name the waiting request.
NAMING: list[Callable[[str], Frame]] = [
    lambda rid: {"type": "control_response", "response": {"subtype": "success", "request_id": rid}},
    lambda rid: success(rid, '{"behavior":"allow"}'),  # JSON inside a string
    lambda rid: success(rid, {"behavior": "approve"}),
    lambda rid: success(rid, {"behavior": "allow", "updatedInput": "touch x"}),
    lambda rid: success(rid, {}),
    lambda rid: {
        "type": "control_response",
        "response": {"subtype": "maybe", "request_id": rid, "response": {"behavior": "allow"}},
    },
    lambda rid: {"type": "control_response", "response": {"subtype": "error", "request_id": rid}},
    # The RFC's shape (request_id at the top, ``result``): not what the SDK sends.
    lambda rid: {
        "type": "control_response",
        "request_id": rid,
        "response": {"subtype": "success", "result": {"behavior": "approve"}},
    },
    lambda rid: {"type": "control_response", "request_id": rid},  # no response at all
    lambda rid: {"type": "control_response", "request_id": rid, "response": "allow"},
]

# Malformed answers that name no waiting request.
ANONYMOUS: list[Frame] = [
    {"type": "control_response"},
    {"type": "control_response", "response": 5},
    {"type": "control_response", "response": []},
    success(7, {"behavior": "allow"}),
    success(None, {"behavior": "allow"}),
    success(["x"], {"behavior": "allow"}),
    {
        "type": "control_response",
        "response": {"subtype": "maybe", "request_id": "not-a-request", "response": {}},
    },
    {"type": "control_response", "request_id": 7, "response": {"subtype": "success"}},
]


async def ask(proc: Qwen, name: str) -> Frame:
    await proc.prompt(f"!touch {name}")
    frames = await proc.until(lambda f: f["type"] == "control_request")
    (request,) = of(frames, "control_request")
    return request


async def test_a_malformed_answer_naming_the_request_declines_it_at_once(
    workspace: Path,
) -> None:
    async with qwen(workspace) as proc:
        await proc.initialize()
        for index, malformed in enumerate(NAMING):
            request = await ask(proc, f"named{index}.txt")
            await proc.send(malformed(request["request_id"]))
            with anyio.fail_after(PROMPT_DEADLINE):
                frames = await proc.result()
            errors = [f for f in of(frames, "system") if f["subtype"] == "input_error"]
            assert len(errors) == 1, (malformed, frames)
            said = errors[0]["data"]["error"]
            assert said.startswith("malformed control_response: ") and request["request_id"] in said
            assert "declined" in said, said
            (block,) = tool_results(frames)
            assert block["is_error"] is True and block["content"].startswith("Declined"), block
            assert frames[-1]["result"] == "The shell call was declined.", frames[-1]
            # Only the one approval was asked, and it is over.
            assert not of(frames, "control_request"), frames
        assert not list(workspace.glob("*.txt"))
        _, code = await proc.finish()
        assert code == 0


async def test_a_malformed_answer_naming_no_request_is_only_reported(workspace: Path) -> None:
    async with qwen(workspace) as proc:
        for malformed in ANONYMOUS:  # no request waits
            await proc.send(malformed)
            frame = await proc.next()
            assert frame["type"] == "system" and frame["subtype"] == "input_error", malformed
            assert "answers no waiting request" in frame["data"]["error"], frame
        request = await ask(proc, "kept.txt")
        for malformed in ANONYMOUS:  # a request waits, and is left waiting
            await proc.send(malformed)
            frame = await proc.next()
            assert frame["type"] == "system" and frame["subtype"] == "input_error", malformed
            assert "answers no waiting request" in frame["data"]["error"], frame
        # An answer to a request nobody waits for (late, repeated) stays quiet:
        # its body is checked only against the request it answers.
        await proc.send(success("not-a-request", {"behavior": "allow"}))
        await proc.send(success("not-a-request", "yes"))
        input_ = request["request"]["input"]
        await proc.send(answer(request, behavior="allow", updatedInput=input_))
        frames = await proc.result()
        assert not [f for f in of(frames, "system") if f["subtype"] == "input_error"], frames
        (block,) = tool_results(frames)
        assert block["is_error"] is False, block
        assert (workspace / "kept.txt").exists()
        _, code = await proc.finish()
        assert code == 0


async def test_under_stream_chunk_json_the_error_is_an_error_object(workspace: Path) -> None:
    from tests.faces.qwen.test_face_qwen import check_chunk

    base = ["--input-format", "stream-json", "--output-format", "stream-chunk-json"]
    async with qwen(workspace, base=base, check=check_chunk) as proc:
        await proc.prompt("!touch chunked.txt")
        request = (await proc.until(lambda f: f.get("type") == "control_request"))[-1]
        await proc.send(success(request["request_id"], "yes"))
        with anyio.fail_after(PROMPT_DEADLINE):
            frames = await proc.until(
                lambda f: "choices" in f and f["choices"][0]["finish_reason"] == "stop"
            )
        (error,) = [f["error"] for f in frames if "error" in f]
        assert error["code"] == "QWEN_INVALID_INPUT" and "declined" in error["message"], error
        assert not (workspace / "chunked.txt").exists()
