"""What a Qwen ``user`` message (or a text prompt) asks for: a job.

``message.content`` is a string or content blocks: ``text`` blocks are joined
with newlines, ``image`` blocks (``source`` ``base64`` or ``url``) become
image inputs, and any other block reaches the model as its JSON text (as in
Qwen Code). ``/compress`` asks for a compaction turn.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from appserver.faces.common import decode_base64, store_image

COMPACT_COMMANDS = ("/compress", "/compact")
Frame = dict[str, Any]


@dataclass
class Job:
    """One user message waiting for, or holding, the session."""

    kind: str  # prompt, compact, or empty (no content: answered with an error result)
    parts: list[Any] = field(default_factory=list)
    aborted: bool = False
    thread_id: str | None = None
    turn_id: str | None = None
    waiting: anyio.CancelScope | None = None


def text_job(text: str) -> Job:
    from appserver.protocol.turns import TextPart

    if not text.strip():
        return Job("empty")
    if text.strip() in COMPACT_COMMANDS:
        return Job("compact")
    return Job("prompt", [TextPart(type="text", text=text)])


async def user_job(frame: Frame, workspace: Path) -> Job:
    """The job of a ``user`` message (``ValueError`` when it is unusable)."""
    from appserver.protocol.turns import ImageUrlPart, LocalImagePart, TextPart

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
    parts: list[Any] = [TextPart(type="text", text=text)] if text else []
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
