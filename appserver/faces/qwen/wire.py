"""The ``qwen`` face's wire: what comes in (a ``user`` message or a text prompt,
read as a job) and how what goes out is framed (the output formats).

In: ``message.content`` is a string or content blocks: ``text`` blocks are
joined with newlines, ``image`` blocks (``source`` ``base64`` or ``url``)
become image inputs, and any other block reaches the model as its JSON text
(as in Qwen Code). ``/compress`` asks for a compaction turn.

Out: a turn is translated once (``turn``) into Qwen Code's stream-json
messages; an :class:`Output` renders them as ``--output-format`` asks:

* ``stream-json``: each message as one JSON line, ``stream_event`` partials
  only with ``--include-partial-messages`` (Qwen Code's shipped format);
* ``json``: one JSON array per turn, written with its ``result`` (Qwen Code
  writes the array of the messages so far; here, those of the turn);
* ``stream-chunk-json``: OpenAI ``chat.completion.chunk`` lines (the RFC's
  format, never shipped): a first ``{"role":"assistant"}`` delta whose
  ``metadata`` has the ``capabilities``, ``content`` / ``reasoning_content``
  (then the whole thought as an ``x-qwen-thought`` annotation) / ``tool_calls`` deltas, a
  ``finish_reason: "tool_calls"`` chunk ending each model call that called
  tools, the turn's annotations (``annotations``: tool displays, terminal
  output, session events) on chunks with an empty delta, and a last chunk with
  ``finish_reason`` and ``usage``;
* ``text``: the result text (errors go to stderr).

Control frames (``control_request`` / ``control_response``) are JSON lines
in every format.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from appserver.faces.common import decode_base64, store_image
from appserver.faces.jobs import FaceJob
from appserver.faces.qwen.annotations import thought
from appserver.protocol.encoding import dumps

Frame = dict[str, Any]

# What comes in: user messages as jobs.

COMPACT_COMMANDS = ("/compress", "/compact")


class Job(FaceJob):
    """One user message waiting for, or holding, the session: its kind is
    ``prompt``, ``compact``, or ``empty`` (no content: answered with an error
    result, no turn)."""


def text_job(text: str) -> Job:
    if not text.strip():
        return Job("empty")
    if text.strip() in COMPACT_COMMANDS:
        return Job("compact")
    return Job("prompt", [{"type": "text", "text": text}])  # as data: no model (inputs.py)


async def user_job(frame: Frame, workspace: Path) -> Job:
    """The job of a ``user`` message (``ValueError`` when it is unusable)."""
    message = frame.get("message")
    if not isinstance(message, dict):
        raise ValueError("a user message needs a 'message' object")
    content = message.get("content")
    if isinstance(content, str):
        return text_job(content)
    if not isinstance(content, list):
        raise ValueError("'message.content' must be a string or a list of content blocks")
    texts: list[str] = []
    images: list[Any] = []
    for index, block in enumerate(content):
        if not isinstance(block, dict):
            raise ValueError(f"content[{index}] must be an object")
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif block.get("type") == "image" and isinstance(block.get("source"), dict):
            from appserver.protocol.turns import ImageUrlPart, LocalImagePart

            source = block["source"]
            if source.get("type") == "url" and isinstance(source.get("url"), str):
                images.append(ImageUrlPart(type="image", url=source["url"]))
            else:
                path = await save_image(source, f"content[{index}]", workspace)
                images.append(LocalImagePart(type="localImage", path=path))
        else:  # as Qwen Code does: other blocks reach the model as JSON text
            texts.append(json.dumps(block, ensure_ascii=False))
    text = "\n".join(part for part in texts if part)
    if not images:
        return text_job(text)
    parts: list[Any] = [{"type": "text", "text": text}] if text else []
    return Job("prompt", parts + images)


async def save_image(source: Frame, where: str, workspace: Path) -> str:
    """Store a base64 image under .craft/attachments/images/<sha256>.<ext>."""
    data = source.get("data")
    if source.get("type") != "base64" or not isinstance(data, str):
        raise ValueError(f"{where}: an image needs a 'base64' or a 'url' source")
    try:
        path, _ = await store_image(workspace, decode_base64(data))
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    return path


# What goes out: the output formats.

Write = Callable[[list[str]], Awaitable[None]]

FINISH_REASONS = {
    "completed": "stop",
    "max_turns": "length",
    "failed": "error",
    "cancelled": "cancelled",
}


def encode(frame: Any) -> str:
    return dumps(frame)  # one line, lone surrogates (echoed ids) escaped


def system_message(session_id: str, subtype: str, **fields: Any) -> Frame:
    return {
        "type": "system",
        "subtype": subtype,
        "uuid": str(uuid.uuid4()),
        "session_id": session_id,
        "parent_tool_use_id": None,
        **fields,
    }


class Output:
    """``stream-json``: every message as it comes."""

    def __init__(self, write: Write, session_id: str, partial: bool = False) -> None:
        self.write = write
        self.session_id = session_id
        self.partial = partial

    async def control(self, frame: Frame) -> None:
        await self.write([encode(frame)])

    async def emit(self, message: Frame) -> None:
        if message["type"] != "stream_event" or self.partial:
            await self.write([encode(message)])

    async def result(self, message: Frame, outcome: str) -> None:
        await self.write([encode(message)])

    async def input_error(self, error: str) -> None:
        """Bad input (no control request to answer): said, never fatal."""
        await self.emit(system_message(self.session_id, "input_error", data={"error": error}))

    async def annotate(self, annotation: Frame) -> None:
        """One of the RFC's annotations (``annotations``); only chunks carry them."""

    async def close(self) -> None:
        """stdin closed and every turn reported."""


class JsonOutput(Output):
    """``json``: the turn's messages as one array, with its result."""

    def __init__(self, write: Write, session_id: str) -> None:
        super().__init__(write, session_id)
        self.messages: list[Frame] = []

    async def emit(self, message: Frame) -> None:
        if message["type"] != "stream_event":
            self.messages.append(message)

    async def result(self, message: Frame, outcome: str) -> None:
        self.messages.append(message)
        await self.write([encode(self.messages)])
        self.messages = []

    async def close(self) -> None:
        if self.messages:  # input errors after the last turn
            await self.write([encode(self.messages)])
            self.messages = []


class TextOutput(Output):
    """``text``: the answer only."""

    async def emit(self, message: Frame) -> None:
        pass

    async def result(self, message: Frame, outcome: str) -> None:
        if message.get("is_error"):
            sys.stderr.write(f"{message.get('error', {}).get('message', 'error')}\n")
            sys.stderr.flush()
        else:
            await self.write([str(message.get("result", ""))])

    async def input_error(self, error: str) -> None:
        sys.stderr.write(f"appserver: {error}\n")
        sys.stderr.flush()


class ChunkOutput(Output):
    """``stream-chunk-json``: OpenAI-style chunks of each turn."""

    def __init__(
        self,
        write: Write,
        session_id: str,
        input_format: str,
        capabilities: Callable[[], Frame] | None = None,
    ) -> None:
        super().__init__(write, session_id)
        self.input_format = input_format
        self.capabilities = capabilities or dict
        self.model = ""
        self.prompt = 0
        self.tool_index = -1

    def chunk(self, delta: Frame, finish_reason: str | None = None, **extra: Any) -> str:
        frame: Frame = {
            "id": f"chatcmpl-{self.session_id}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }
        frame.update(extra)
        return encode(frame)

    async def emit(self, message: Frame) -> None:
        kind = message["type"]
        if kind == "system" and message.get("subtype") == "init":
            self.model = str(message.get("model", ""))
            self.prompt += 1
            self.tool_index = -1
            metadata = {
                "protocol_version": 1,
                "input_format": self.input_format,
                "output_format": "stream-chunk-json",
                "session_id": self.session_id,
                "prompt_id": self.prompt_id(),
                "tools": message.get("tools", []),
                "permission_mode": message.get("permission_mode"),
                "capabilities": self.capabilities(),
            }
            await self.write([self.chunk({"role": "assistant"}, metadata=metadata)])
        elif kind == "stream_event":
            line = self._event(message["event"])
            if line is not None:
                await self.write([line])
        elif kind == "assistant":
            content = message["message"]["content"]
            if message["message"].get("stop_reason") == "tool_use":
                await self.write([self.chunk({}, "tool_calls")])  # the model call ends with calls
            elif content and content[0]["type"] == "thinking":  # the thought, once whole
                text = "".join(block["thinking"] for block in content)
                await self.write([self.chunk({}, annotations=[thought(text)])])
        elif kind == "system" and message.get("subtype") == "input_error":
            error = {
                "message": message.get("data", {}).get("error", ""),
                "type": "invalid_request_error",
            }
            await self.write([encode({"error": {**error, "code": "QWEN_INVALID_INPUT"}})])

    def _event(self, event: Frame) -> str | None:
        kind = event.get("type")
        if kind == "content_block_delta":
            delta = event.get("delta", {})
            if delta.get("type") == "text_delta":
                return self.chunk({"content": delta.get("text", "")})
            if delta.get("type") == "thinking_delta":
                return self.chunk({"reasoning_content": delta.get("thinking", "")})
            if delta.get("type") == "input_json_delta":
                call = {
                    "index": self.tool_index,
                    "function": {"arguments": delta.get("partial_json", "")},
                }
                return self.chunk({"tool_calls": [call]})
        elif kind == "content_block_start":
            block = event.get("content_block", {})
            if block.get("type") == "tool_use":
                self.tool_index += 1
                call = {
                    "index": self.tool_index,
                    "id": block.get("id"),
                    "type": "function",
                    "function": {"name": block.get("name"), "arguments": ""},
                }
                return self.chunk({"tool_calls": [call]})
        return None

    async def result(self, message: Frame, outcome: str) -> None:
        usage = message.get("usage", {})
        metadata: Frame = {
            "session_id": self.session_id,
            "num_turns": message.get("num_turns", 0),
            "duration_ms": message.get("duration_ms", 0),
        }
        if message.get("is_error"):
            metadata["error"] = message.get("error", {})
        finish = FINISH_REASONS.get(outcome, "stop")
        usage_frame = {
            "prompt_tokens": usage.get("input_tokens", 0),
            "completion_tokens": usage.get("output_tokens", 0),
            "total_tokens": usage.get("total_tokens", 0),
        }
        await self.write([self.chunk({}, finish, usage=usage_frame, metadata=metadata)])

    async def input_error(self, error: str) -> None:
        await self.emit(system_message(self.session_id, "input_error", data={"error": error}))

    async def annotate(self, annotation: Frame) -> None:
        if annotation["type"] == "x-qwen-terminal":
            annotation = {**annotation, "prompt_id": self.prompt_id()}
        await self.write([self.chunk({}, annotations=[annotation])])

    def prompt_id(self) -> str:
        return f"{self.session_id}########{self.prompt}"


def make_output(
    output_format: str,
    input_format: str,
    write: Write,
    session_id: str,
    partial: bool,
    capabilities: Callable[[], Frame] | None = None,
) -> Output:
    """The output for ``--output-format`` (``capabilities``: what ``initialize``
    would answer, for the first chunk's metadata)."""
    if output_format == "json":
        return JsonOutput(write, session_id)
    if output_format == "text":
        return TextOutput(write, session_id)
    if output_format == "stream-chunk-json":
        return ChunkOutput(write, session_id, input_format, capabilities)
    return Output(write, session_id, partial)
