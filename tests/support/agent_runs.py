"""An in-process runtime driven by a scripted model (the fake provider
servers of ``tests.support.fake_models``): start turns, answer approvals from
a script, read back the stored items and what the model was sent."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from appserver.protocol.base import WireModel
from appserver.protocol.turns import ApprovalRequestParams, TextPart
from appserver.providers.base import Provider
from appserver.runtime.engine_config import EngineConfig
from appserver.runtime.events import Event, QuestionUnanswered
from appserver.runtime.host import Runtime
from appserver.runtime.threads import NewThread
from appserver.storage.db import Database
from appserver.storage.records import ItemRecord
from appserver.tools.base import Tool
from appserver.tools.registry import ToolRegistry
from tests.support.fake_models import openai_chunk, openai_stream


def openai_tool_call(name: str, arguments: dict[str, Any], call_id: str = "call_1") -> Any:
    """A streamed Chat Completions answer that calls one tool."""
    call = {
        "index": 0,
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }
    return openai_stream(
        [
            openai_chunk({"role": "assistant", "content": None, "tool_calls": [call]}),
            openai_chunk({}, finish_reason="tool_calls"),
        ]
    )


@dataclass(eq=False)  # hashable: the bus keeps participants in a set
class Door:
    """The one client: sees every event, answers approvals from ``answers``."""

    answers: list[str] = field(default_factory=list)
    name: str = "test-door"
    closed: bool = False
    events: list[Event] = field(default_factory=list)
    asked: list[ApprovalRequestParams] = field(default_factory=list)

    def wants(self, kind: str, topic: str | None) -> bool:
        return True

    def deliver(self, event: Event) -> None:
        self.events.append(event)

    def can_answer_approvals(self) -> bool:
        return True

    async def ask_approval(self, request: WireModel, timeout: float) -> str:
        assert isinstance(request, ApprovalRequestParams)
        self.asked.append(request)
        if not self.answers:
            raise QuestionUnanswered("no scripted answer")
        return self.answers.pop(0)


@dataclass
class AgentRun:
    runtime: Runtime
    door: Door
    thread_id: str

    async def turn(self, text: str) -> list[ItemRecord]:
        """Run one turn to its end; its stored items."""
        active = await self.runtime.turns.start(
            self.thread_id, [TextPart(type="text", text=text)], self.door
        )
        with anyio.fail_after(30):
            await active.done.wait()
        assert active.record.status == "completed", active.record
        return list(active.items)


@asynccontextmanager
async def agent_run(
    workspace: Path,
    provider: Provider,
    tools: Sequence[Tool],
    *,
    config: EngineConfig | None = None,
    answers: Sequence[str] = (),
) -> AsyncIterator[AgentRun]:
    """A runtime over ``workspace`` with only ``tools``, and one thread."""
    db = await Database.open(workspace / ".craft" / "appserver.db")
    door = Door(answers=list(answers))
    try:
        runtime = Runtime(db, workspace, provider, config=config, tools=ToolRegistry(tools))
        async with anyio.create_task_group() as tg:
            await tg.start(runtime.run)
            runtime.join(door)
            thread = await runtime.threads.create(NewThread(user_id="me", channel_name="test"))
            await runtime.threads.subscribe(thread.id, door)
            yield AgentRun(runtime, door, thread.id)
            tg.cancel_scope.cancel()
    finally:
        await db.close()
        close = getattr(provider, "aclose", None)
        if close is not None:
            await close()  # its pooled connections, before the fake server goes


def tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``role: tool`` messages of a Chat Completions request body."""
    return [m for m in body["messages"] if m["role"] == "tool"]
