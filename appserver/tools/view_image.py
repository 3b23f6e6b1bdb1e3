"""The ``view_image`` tool: an image file in the workspace, shown to the model.

The image (PNG, JPEG, GIF or WebP, recognised by its first bytes, at most
:data:`VIEW_IMAGE_MAX_BYTES`) goes to the model as an image part with the
tool's result; each provider puts it where its API allows (in the tool
result, or in a user message right after it). Only images inside the
workspace are shown: a path outside it, or in ``.craft/``, is refused (no
approval is asked: the tool is for the project's own images).

The ``toolResult`` item stores the image's path, media type and SHA-256,
never its bytes: the journal stays small and every client is spared a
base64 blob. When the conversation is rebuilt for a later model call the
file is read again and used only if its digest still matches; otherwise the
model reads a note that the image is gone (``runtime.history``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio.to_thread

from appserver.tools.args import check_keys, require_str
from appserver.tools.base import ToolContext, ToolError, ToolOutcome, ToolPlan
from appserver.tools.file_common import FileFailure, open_planned, os_failure, resolved_plan
from appserver.tools.images import digest, image_part, sniff_image
from appserver.tools.sandbox import Sandbox

# Anthropic's API takes images of at most 5 MB; OpenAI's allow more.
VIEW_IMAGE_MAX_BYTES = 5 * 1024 * 1024


def _read(path: Path, display: str, max_bytes: int) -> tuple[bytes, str]:
    with open_planned(path) as handle:  # as planned, no link followed
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        size = os.stat(path).st_size
        raise FileFailure(f"{display} is {size} bytes; images up to {max_bytes} bytes are shown")
    sniffed = sniff_image(data)
    if sniffed is None:
        raise FileFailure(f"{display} is not a PNG, JPEG, GIF or WebP image")
    return data, sniffed[0]


class ViewImageTool:
    """``view_image``: attach a workspace image to the result for the model to see."""

    name = "view_image"
    description = (
        "Look at an image file in the workspace (PNG, JPEG, GIF or WebP, at most "
        f"{VIEW_IMAGE_MAX_BYTES // (1024 * 1024)} MiB): the image is attached to the result."
    )
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "description": "Path of the image, relative to the workspace root.",
            },
        },
        "required": ["path"],
        "additionalProperties": False,
    }

    def __init__(self, *, max_bytes: int = VIEW_IMAGE_MAX_BYTES) -> None:
        self.max_bytes = max_bytes

    def plan(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolPlan:
        """Resolve the path; only a file inside the workspace is shown."""
        check_keys(arguments, ("path",))
        path = require_str(arguments, "path")
        sandbox = Sandbox(ctx.workspace)
        target = sandbox.resolve(path, must_exist=True)
        if not target.inside:
            raise ToolError(f"{path} is outside the workspace; view_image shows only images in it")
        if target.path.is_dir():
            raise ToolError(f"{path} is a directory, not an image")
        return resolved_plan(self.name, arguments, sandbox, target, None)

    async def run(self, plan: ToolPlan, ctx: ToolContext) -> ToolOutcome:
        """Read and check the image; the outcome carries it for the model."""
        path: Path = plan.resolved["path"]
        display: str = plan.resolved["display"]
        try:
            data, media_type = await anyio.to_thread.run_sync(_read, path, display, self.max_bytes)
        except FileFailure as exc:
            return ToolOutcome(success=False, output=str(exc))
        except OSError as exc:
            return os_failure("read", display, exc)
        stored = {"path": str(path), "mimeType": media_type, "sha256": digest(data)}
        return ToolOutcome(
            success=True,
            output=f"{display} ({media_type}, {len(data)} bytes) is attached.",
            details={"path": display, "size_bytes": len(data), "images": [stored]},
            images=[image_part(data, media_type)],
        )
