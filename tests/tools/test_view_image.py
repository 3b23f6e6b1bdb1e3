"""view_image: a workspace image shown to the model as an image part, its item
holding only the path, media type and digest."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from appserver.providers.anthropic_provider import AnthropicProvider, to_anthropic_messages
from appserver.providers.base import ImagePart, Message, ModelRequest, TextDelta, ToolCall
from appserver.providers.offline import OfflineProvider
from appserver.providers.openai_compat import OpenAIProvider, to_chat_messages
from appserver.runtime.history import IMAGE_GONE
from appserver.tools.base import ToolContext, ToolError
from appserver.tools.view_image import ViewImageTool
from tests.support.agent_runs import agent_run, openai_tool_call, tool_messages
from tests.support.fake_models import (
    Text,
    ToolUse,
    anthropic_stream,
    fake_model_server,
    openai_text_reply,
)

# A 1x1 PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
CHAT = "POST /v1/chat/completions"


def context(workspace: Path) -> ToolContext:
    return ToolContext(workspace=workspace, thread_id="t", turn_id="u", call_id="c")


async def test_an_image_in_the_workspace_is_attached(tmp_path: Path) -> None:
    (tmp_path / "shot.png").write_bytes(PNG)
    tool = ViewImageTool()
    plan = tool.plan({"path": "shot.png"}, context(tmp_path))
    assert plan.approval is None  # inside the workspace: nothing to ask
    outcome = await tool.run(plan, context(tmp_path))
    assert outcome.success
    assert outcome.output == f"shot.png (image/png, {len(PNG)} bytes) is attached."
    assert outcome.images == [ImagePart("image/png", base64.b64encode(PNG).decode())]
    [stored] = outcome.details["images"]
    assert stored["path"] == str((tmp_path / "shot.png").resolve())
    assert stored["mimeType"] == "image/png" and len(stored["sha256"]) == 64


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("missing.png", "no such file"),
        ("pics", "is a directory"),
        (".craft/secret.png", "outside the workspace"),
        ("../outside.png", "outside the workspace"),
    ],
)
def test_paths_it_refuses(tmp_path: Path, path: str, why: str) -> None:
    workspace = tmp_path / "ws"
    (workspace / "pics").mkdir(parents=True)
    (workspace / ".craft").mkdir()
    (workspace / ".craft" / "secret.png").write_bytes(PNG)
    (tmp_path / "outside.png").write_bytes(PNG)
    with pytest.raises(ToolError, match=why):
        ViewImageTool().plan({"path": path}, context(workspace))


def test_unknown_arguments_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="unknown argument"):
        ViewImageTool().plan({"path": "a.png", "zoom": 2}, context(tmp_path))


async def test_not_an_image_or_too_large_fails_the_call(tmp_path: Path) -> None:
    (tmp_path / "notes.png").write_text("just text")
    (tmp_path / "big.png").write_bytes(PNG + b"\0" * 100)
    tool = ViewImageTool(max_bytes=len(PNG) + 10)
    ctx = context(tmp_path)
    text = await tool.run(tool.plan({"path": "notes.png"}, ctx), ctx)
    assert not text.success and "not a PNG, JPEG, GIF or WebP image" in text.output
    big = await tool.run(tool.plan({"path": "big.png"}, ctx), ctx)
    assert not big.success and f"images up to {len(PNG) + 10} bytes" in big.output
    assert text.images == big.images == []


def conversation(*images: ImagePart) -> list[Message]:
    calls = [ToolCall("call_1", "view_image", {"path": "a.png"}), ToolCall("call_2", "shell", {})]
    return [
        Message("user", "look"),
        Message("assistant", "", tool_calls=calls),
        Message(
            "tool",
            "a.png attached",
            tool_call_id="call_1",
            tool_name="view_image",
            images=list(images),
        ),
        Message("tool", "exit code: 0", tool_call_id="call_2", tool_name="shell"),
    ]


def test_openai_gets_the_images_in_a_user_message_after_all_the_results() -> None:
    image = ImagePart("image/png", "AAAA")
    chat = to_chat_messages(ModelRequest("m", conversation(image)))
    assert [m["role"] for m in chat] == ["user", "assistant", "tool", "tool", "user"]
    assert chat[2]["content"] == "a.png attached"  # a tool message holds text only
    parts = chat[4]["content"]
    assert parts[1] == {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    without = to_chat_messages(ModelRequest("m", conversation()))
    assert [m["role"] for m in without] == ["user", "assistant", "tool", "tool"]


def test_anthropic_gets_the_image_inside_the_tool_result() -> None:
    image = ImagePart("image/png", "AAAA")
    turns = to_anthropic_messages(conversation(image))
    result = turns[2]["content"][0]
    assert result["type"] == "tool_result"
    assert result["content"] == [
        {"type": "text", "text": "a.png attached"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
    ]
    assert turns[2]["content"][1]["content"] == "exit code: 0"  # no image: plain text


async def test_the_model_sees_the_image_and_the_item_holds_no_bytes(tmp_path: Path) -> None:
    (tmp_path / "shot.png").write_bytes(PNG)
    encoded = base64.b64encode(PNG).decode()
    async with fake_model_server() as fake:
        fake.script(
            CHAT,
            openai_tool_call("view_image", {"path": "shot.png"}),
            openai_text_reply(["a red dot"]),
            openai_text_reply(["still a dot"]),
            openai_text_reply(["gone"]),
        )
        provider = OpenAIProvider(api_key="sk-test", base_url=fake.openai_base_url)
        async with agent_run(tmp_path, provider, [ViewImageTool()]) as run:
            items = await run.turn("what is in shot.png?")
            await run.turn("and again?")  # the image read again for the rebuilt history
            (tmp_path / "shot.png").write_bytes(PNG + b"changed")
            await run.turn("once more?")  # another image at that path: not shown
        bodies = fake.bodies(CHAT)

    result = next(item for item in items if item.type == "toolResult")
    assert encoded not in json.dumps(result.payload)
    assert result.payload["images"][0]["mimeType"] == "image/png"
    for body in bodies[1:3]:
        after = body["messages"][body["messages"].index(tool_messages(body)[0]) + 1]
        assert after["role"] == "user"
        assert {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{encoded}"}} in (
            after["content"]
        )
    last = bodies[3]
    assert tool_messages(last)[0]["content"].endswith(IMAGE_GONE)
    assert "image_url" not in json.dumps(last)


async def test_anthropic_model_sees_the_image_in_the_tool_result(tmp_path: Path) -> None:
    (tmp_path / "shot.png").write_bytes(PNG)
    async with fake_model_server() as fake:
        route = "POST /v1/messages"
        fake.script(
            route,
            anthropic_stream(
                [ToolUse("toolu_1", "view_image", ['{"path": "shot.png"}'])],
                stop_reason="tool_use",
            ),
            anthropic_stream([Text(["a dot"])]),
        )
        provider = AnthropicProvider(api_key="sk-ant-test", base_url=fake.base_url)
        async with agent_run(tmp_path, provider, [ViewImageTool()]) as run:
            await run.turn("look at shot.png")
        body = fake.bodies(route)[1]
    result = body["messages"][-1]["content"][0]
    assert result["type"] == "tool_result"
    assert result["content"][1]["source"]["data"] == base64.b64encode(PNG).decode()


async def test_the_offline_model_notes_the_image() -> None:
    request = ModelRequest("offline", conversation(ImagePart("image/png", "AAAA")))
    events = [event async for event in OfflineProvider().stream(request)]
    text = "".join(event.text for event in events if isinstance(event, TextDelta))
    assert "view_image returned: a.png attached [1 image attached]" in text
