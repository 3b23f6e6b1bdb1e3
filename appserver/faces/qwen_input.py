"""What a Qwen ``user`` message (or a text prompt) asks for: a job.

``message.content`` is a string or content blocks: ``text`` blocks are joined
with newlines, ``image`` blocks (``source`` ``base64`` or ``url``) become
image inputs, and any other block reaches the model as its JSON text (as in
Qwen Code). ``/compress`` asks for a compaction turn.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

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
    from appserver.runtime.inputs import sniff_image

    data = source.get("data")
    if source.get("type") != "base64" or not isinstance(data, str):
        raise ValueError(f"{where}: an image needs a 'base64' or a 'url' source")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{where}: the image data is not valid base64") from None
    sniffed = sniff_image(raw)
    if sniffed is None:
        raise ValueError(f"{where} is not a PNG, JPEG, GIF or WebP image")
    path = workspace / ".craft" / "attachments" / "images"
    path = path / f"{hashlib.sha256(raw).hexdigest()}.{sniffed[1]}"
    if not path.exists():
        await anyio.to_thread.run_sync(_write_file, path, raw)
    return str(path)


def _write_file(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
