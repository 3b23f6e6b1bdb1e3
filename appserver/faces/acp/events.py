"""Runtime items as ACP session updates, and ACP prompt blocks as turn input.

One :class:`TurnUpdates` per turn turns its items (live events or stored
records: the same code serves ``session/prompt`` and ``session/load``) into
``session/update`` payloads:

* ``agentMessage`` -> ``agent_message_chunk``; ``reasoningContent`` ->
  ``agent_thought_chunk`` (live: one chunk per delta, then whatever the
  completed item holds beyond them; replayed: the whole text). ``messageId``
  is ``<turn id>:<item id>``;
* ``toolCall`` -> ``tool_call`` (``pending``; title, kind, locations and
  ``rawInput`` from the tool and its arguments, a diff for file writes and
  edits); an approved approval or the start of a command -> ``tool_call_update``
  ``in_progress``; command output -> ``tool_call_update`` with the output so
  far; ``toolResult`` -> ``tool_call_update`` ``completed`` or ``failed`` with
  the result (a declined call is ``failed``, its result says ``Declined: ...``);
  calls a cancelled or failed turn left without result -> ``failed``;
* ``userMessage`` -> ``user_message_chunk`` (replay only: a live prompt's own
  text is the client's);
* approvals, errors, usage, command items themselves and notices: no update.

The ACP tool call id is the model's call id (the turn id and item id when the
model gave none).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import anyio
from acp import helpers
from acp.schema import (
    AgentMessageChunk,
    AgentThoughtChunk,
    AudioContentBlock,
    BlobResourceContents,
    EmbeddedResourceContentBlock,
    FileEditToolCallContent,
    ImageContentBlock,
    ResourceContentBlock,
    TextContentBlock,
    ToolCallLocation,
    ToolCallProgress,
    ToolCallStart,
    ToolCallStatus,
    ToolKind,
    UserMessageChunk,
)

Update = UserMessageChunk | AgentMessageChunk | AgentThoughtChunk | ToolCallStart | ToolCallProgress
ContentBlock = (
    TextContentBlock
    | ImageContentBlock
    | AudioContentBlock
    | ResourceContentBlock
    | EmbeddedResourceContentBlock
)
ToolContent = helpers.ToolCallContentVariant

CANCELLED = "Cancelled before it finished."
LIVE_OUTPUT_CHARS = 8000  # the tail of a running command shown while it runs
TITLE_CHARS = 200
TOOL_KINDS: dict[str, ToolKind] = {
    "shell": "execute",
    "read_file": "read",
    "list_dir": "read",
    "write_file": "edit",
    "edit_file": "edit",
    "apply_patch": "edit",
    "grep": "search",
    "find_files": "search",
    "web_fetch": "fetch",
    "view_image": "read",
}


class PromptError(ValueError):
    """A prompt block we cannot take (answered ``-32602``)."""


# --- tool calls ------------------------------------------------------------------------


def fenced(text: str) -> str:
    """``text`` in a Markdown code fence longer than any backtick run inside it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text.rstrip()}\n{fence}"


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= TITLE_CHARS else text[: TITLE_CHARS - 1] + "…"


@dataclass
class Tool:
    """One tool call of a turn, as the client knows it."""

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    announced: bool = False  # its tool_call went out
    running: bool = False
    output: str = ""

    @property
    def kind(self) -> ToolKind:
        return TOOL_KINDS.get(self.name, "other")

    def path(self, workspace: Path) -> str | None:
        raw = self.arguments.get("path")
        if self.name not in ("read_file", "list_dir", "write_file", "edit_file"):
            return None
        if not isinstance(raw, str) or not raw:
            raw = "."
        return os.path.normpath(workspace / raw)

    def title(self) -> str:
        arguments = self.arguments
        if self.name == "shell" and isinstance(arguments.get("command"), str):
            return _short(str(arguments["command"]))
        shown = arguments.get("path")
        verbs = {
            "read_file": "Read",
            "list_dir": "List",
            "write_file": "Write",
            "edit_file": "Edit",
        }
        if self.name in verbs:
            return _short(f"{verbs[self.name]} {shown if isinstance(shown, str) else '.'}")
        return _short(self.name or "tool")

    def locations(self, workspace: Path) -> list[ToolCallLocation] | None:
        path = self.path(workspace)
        return [ToolCallLocation(path=path)] if path else None

    def diff(self, workspace: Path) -> list[ToolContent]:
        path = self.path(workspace)
        arguments = self.arguments
        if path and self.name == "write_file" and isinstance(arguments.get("content"), str):
            return [helpers.tool_diff_content(path, str(arguments["content"]))]
        if (
            path
            and self.name == "edit_file"
            and isinstance(arguments.get("new_string"), str)
            and isinstance(arguments.get("old_string"), str)
        ):
            return [
                FileEditToolCallContent(
                    type="diff",
                    path=path,
                    old_text=str(arguments["old_string"]),
                    new_text=str(arguments["new_string"]),
                )
            ]
        return []


def text_content(text: str) -> ToolContent:
    return helpers.tool_content(helpers.text_block(text))


# --- one turn ------------------------------------------------------------------------


class TurnUpdates:
    """The session updates of one turn's items, in order."""

    def __init__(self, turn_id: str, workspace: Path, *, replay: bool = False) -> None:
        self.turn_id = turn_id
        self.workspace = workspace
        self.replay = replay
        self.sent: dict[str, int] = {}  # text item id -> characters already sent
        self.tools: dict[str, Tool] = {}  # toolCall item id -> its call
        self.calls: dict[str, Tool] = {}  # model call id -> its call
        self.waiting: list[Tool] = []  # calls without result yet, in order
        self.commands: dict[str, Tool] = {}  # commandExecution item id -> its call
        self.gated: dict[str, Tool] = {}  # approvalRequest item id -> the call it gates
        self.failure_code: str | None = None  # of the fatal error item, if any

    def message_id(self, item_id: str) -> str:
        return f"{self.turn_id}:{item_id}"

    def _text(self, item_type: str, item_id: str, text: str) -> list[Update]:
        block = helpers.text_block(text)
        message_id = self.message_id(item_id)
        if item_type == "agentMessage":
            return [
                AgentMessageChunk(
                    session_update="agent_message_chunk", content=block, message_id=message_id
                )
            ]
        return [
            AgentThoughtChunk(
                session_update="agent_thought_chunk", content=block, message_id=message_id
            )
        ]

    def _tool(self, item_id: str, payload: dict[str, Any], create: bool) -> Tool | None:
        """The call of a ``toolCall`` item (made when its id is known, or ``create``)."""
        tool = self.tools.get(item_id)
        call_id = str(payload.get("callId") or "")
        if tool is None:
            if not call_id and not create:
                return None  # no id yet: announced when it completes
            tool = self.tools[item_id] = Tool(id=call_id or self.message_id(item_id), name="")
        if call_id:
            self.calls.setdefault(call_id, tool)
        tool.name = str(payload.get("toolName") or tool.name)
        arguments = payload.get("arguments")
        if isinstance(arguments, dict):
            tool.arguments = arguments
        return tool

    def _announce(self, tool: Tool) -> Update:
        tool.announced = True
        return helpers.start_tool_call(
            tool.id,
            tool.title(),
            kind=tool.kind,
            status="pending",
            content=tool.diff(self.workspace) or None,
            locations=tool.locations(self.workspace),
            raw_input=tool.arguments or None,
        )

    def _status(self, tool: Tool, status: ToolCallStatus, **changes: Any) -> Update:
        return helpers.update_tool_call(tool.id, status=status, **changes)

    # --- events ------------------------------------------------------------------------

    def started(self, item_type: str, item_id: str, payload: dict[str, Any]) -> list[Update]:
        if item_type == "toolCall":
            tool = self._tool(item_id, payload, create=False)
            if tool is not None and not tool.announced and tool.name:
                return [self._announce(tool)]
        elif item_type == "commandExecution":
            tool = self.calls.get(str(payload.get("callId") or ""))
            if tool is not None:
                self.commands[item_id] = tool
                if not tool.running:
                    tool.running = True
                    return [self._status(tool, "in_progress")]
        return []

    def delta(self, kind: str, item_id: str, delta: str) -> list[Update]:
        if not delta:
            return []
        if kind in ("item/agentMessage/delta", "item/reasoning/delta"):
            self.sent[item_id] = self.sent.get(item_id, 0) + len(delta)
            item_type = "agentMessage" if kind == "item/agentMessage/delta" else "reasoning"
            return self._text(item_type, item_id, delta)
        if kind == "item/commandExecution/outputDelta":
            tool = self.commands.get(item_id)
            if tool is not None:
                tool.output = (tool.output + delta)[-LIVE_OUTPUT_CHARS:]
                return [
                    self._status(tool, "in_progress", content=[text_content(fenced(tool.output))])
                ]
        return []

    def completed(self, item_type: str, item_id: str, payload: dict[str, Any]) -> list[Update]:
        if item_type in ("agentMessage", "reasoningContent"):
            text = str(payload.get("text") or "")
            sent = self.sent.get(item_id, 0)
            self.sent[item_id] = len(text)
            return self._text(item_type, item_id, text[sent:]) if len(text) > sent else []
        if item_type == "toolCall":
            return self._call_completed(item_id, payload)
        if item_type == "approvalRequest":
            if self.waiting:
                self.gated[item_id] = self.waiting[0]
        elif item_type == "approvalResponse":
            tool = self.waiting[0] if self.waiting else None
            if tool is not None and payload.get("approved") and not tool.running:
                tool.running = True
                return [self._status(tool, "in_progress")]
        elif item_type == "toolResult":
            return self._result(payload)
        elif item_type == "error" and payload.get("fatal"):
            self.failure_code = str(payload.get("code") or "") or None
        elif item_type == "userMessage" and self.replay:
            return [helpers.update_user_message(block) for block in user_blocks(payload)]
        return []

    def _call_completed(self, item_id: str, payload: dict[str, Any]) -> list[Update]:
        tool = self._tool(item_id, payload, create=True)
        assert tool is not None
        if tool not in self.waiting:
            self.waiting.append(tool)
        if not tool.announced:
            return [self._announce(tool)]
        return [
            helpers.update_tool_call(
                tool.id,
                title=tool.title(),
                kind=tool.kind,
                content=tool.diff(self.workspace) or None,
                locations=tool.locations(self.workspace),
                raw_input=tool.arguments,
            )
        ]

    def _result(self, payload: dict[str, Any]) -> list[Update]:
        call_id = str(payload.get("callId") or "")
        tool = self.calls.get(call_id)
        if tool is None:  # a result without its call (it should not happen)
            tool = Tool(id=call_id or self.message_id("result"), name="")
        updates: list[Update] = []
        if not tool.announced:
            updates.append(self._announce(tool))
        if tool in self.waiting:
            self.waiting.remove(tool)
        success = bool(payload.get("success"))
        result = str(payload.get("result") or "")
        # Command output in a code block; the runtime's own words ("Declined: ...",
        # "Error: ...") as they are.
        plain = not result or result.startswith(("Declined:", "Error:"))
        shown = fenced(result) if tool.kind == "execute" and not plain else result
        content = tool.diff(self.workspace) if success else []
        if shown:
            content.append(text_content(shown))
        updates.append(
            self._status(
                tool,
                "completed" if success else "failed",
                content=content or None,
                raw_output={"success": success, "output": result},
            )
        )
        return updates

    def unfinished(self, why: str) -> list[Update]:
        """``failed`` for every call still waiting for a result (the turn ended)."""
        updates: list[Update] = [
            self._status(tool, "failed", content=[text_content(why)]) for tool in self.waiting
        ]
        self.waiting.clear()
        return updates


# --- user messages -------------------------------------------------------------------


def _file_uri(path: str) -> str:
    return Path(path).absolute().as_uri()


def user_blocks(payload: dict[str, Any]) -> list[ContentBlock]:
    """A stored user message as ACP content blocks (its parts as the client sent them)."""
    blocks: list[ContentBlock] = []
    for part in payload.get("nativeInputParts") or []:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "text" and part.get("text"):
            blocks.append(helpers.text_block(str(part["text"])))
        elif kind == "localImage":
            blocks.append(_image_block(str(part.get("path") or "")))
        elif kind == "fileRef" and part.get("path"):
            path = str(part["path"])
            name = str(part.get("displayPath") or os.path.basename(path) or path)
            blocks.append(helpers.resource_link_block(name, _file_uri(path)))
        elif kind == "image" and part.get("url"):
            url = str(part["url"])
            blocks.append(helpers.resource_link_block(url, url))
        elif kind in ("skillRef", "commandRef"):
            blocks.append(helpers.text_block(f"[{kind}: {part.get('name', '')}]"))
    if not blocks and payload.get("text"):
        blocks.append(helpers.text_block(str(payload["text"])))
    return blocks


def _image_block(path: str) -> ContentBlock:
    from appserver.runtime.inputs import MAX_IMAGE_BYTES
    from appserver.tools.images import sniff_image

    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_IMAGE_BYTES + 1)
    except OSError:
        data = b""
    sniffed = sniff_image(data) if len(data) <= MAX_IMAGE_BYTES else None
    if sniffed is None:
        return helpers.text_block(f"[image: {os.path.basename(path)} is gone]")
    encoded = base64.b64encode(data).decode()
    return helpers.image_block(encoded, sniffed[0], uri=_file_uri(path))


# --- prompts -------------------------------------------------------------------------


def local_path(uri: str) -> str | None:
    """The path of a ``file:`` URI on this machine, else ``None``."""
    url = urlsplit(uri)
    if url.scheme != "file" or url.netloc not in ("", "localhost"):
        return None
    return unquote(url.path) or None


def inside(workspace: Path, path: str) -> Path | None:
    try:
        resolved = (workspace / path).resolve()
    except (OSError, ValueError):
        return None
    return resolved if resolved.is_relative_to(workspace) else None


async def save_image(workspace: Path, data: bytes, where: str) -> Any:
    """Store image bytes under ``.craft/attachments/images/<sha256>.<ext>``; a LocalImagePart."""
    from appserver.protocol.turns import LocalImagePart
    from appserver.runtime.inputs import MAX_IMAGE_BYTES
    from appserver.tools.images import sniff_image

    if len(data) > MAX_IMAGE_BYTES:
        raise PromptError(f"{where}: images are limited to {MAX_IMAGE_BYTES} bytes")
    sniffed = sniff_image(data)
    if sniffed is None:
        raise PromptError(f"{where}: not a PNG, JPEG, GIF or WebP image")
    folder = workspace / ".craft" / "attachments" / "images"
    path = folder / f"{hashlib.sha256(data).hexdigest()}.{sniffed[1]}"
    if not path.exists():
        await anyio.to_thread.run_sync(_write_file, path, data)
    return LocalImagePart(type="localImage", path=str(path), mime_type=sniffed[0])


def _write_file(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _decode(data: str, where: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise PromptError(f"{where}: data is not valid base64") from None


async def input_parts(blocks: list[Any], workspace: Path) -> list[Any]:
    """ACP prompt blocks as turn input parts; :class:`PromptError` for what we refuse.

    text -> text; image -> a stored local image; resource_link -> a file
    reference for a ``file:`` URI inside the workspace (the runtime inlines
    it), else the link as text; embedded text resource -> its text wrapped in
    ``<resource uri="...">``; embedded blob -> an image if it is one, else
    refused; audio -> refused (``promptCapabilities.audio`` is false).
    """
    from appserver.protocol.turns import FileRefPart, TextPart

    parts: list[Any] = []
    for index, block in enumerate(blocks):
        where = f"prompt[{index}]"
        if isinstance(block, TextContentBlock):
            parts.append(TextPart(type="text", text=block.text))
        elif isinstance(block, ImageContentBlock):
            parts.append(await save_image(workspace, _decode(block.data, where), where))
        elif isinstance(block, AudioContentBlock):
            raise PromptError(f"{where}: audio prompts are not supported")
        elif isinstance(block, ResourceContentBlock):
            path = local_path(block.uri)
            found = inside(workspace, path) if path else None
            if found is not None and found.is_file():
                parts.append(FileRefPart(type="fileRef", path=str(found), display_path=block.name))
            else:
                parts.append(TextPart(type="text", text=f"[{block.name}]({block.uri})"))
        elif isinstance(block, EmbeddedResourceContentBlock):
            resource = block.resource
            if isinstance(resource, BlobResourceContents):
                parts.append(await save_image(workspace, _decode(resource.blob, where), where))
            else:
                uri = json.dumps(resource.uri)
                parts.append(
                    TextPart(
                        type="text", text=f"<resource uri={uri}>\n{resource.text}\n</resource>"
                    )
                )
        else:
            raise PromptError(f"{where}: unsupported content block")
    if not parts:
        raise PromptError("the prompt is empty")
    return parts
