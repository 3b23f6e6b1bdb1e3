"""The prompt family: ``prompt/read`` (:mod:`appserver.protocol.prompt`).

The sections come from the agent loop itself (``AgentLoop.system_sections``),
so what a client is shown is what the next model request carries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio.to_thread
from pydantic import BaseModel

from appserver.protocol import prompt as prompt_wire
from appserver.rpc.connection import RequestContext
from appserver.runtime.instructions import system_text

if TYPE_CHECKING:
    from appserver.services.context import FamilyContext


class PromptService:
    """The handler of ``prompt/read``."""

    def __init__(self, server: FamilyContext) -> None:
        self.server = server

    async def read(self, ctx: RequestContext, params: prompt_wire.PromptReadParams) -> BaseModel:
        configuration: dict[str, Any] = {}
        if params.thread_id is not None:
            thread = await self.server.runtime.threads.get(params.thread_id)
            configuration = thread.configuration or {}
        agent = self.server.runtime.engine.agent
        # Off the event loop: it stats (and on a change reads) the AGENTS.md files.
        sections = await anyio.to_thread.run_sync(agent.system_sections, configuration)
        return prompt_wire.PromptReadResult(
            text=system_text(sections),
            sections=[
                prompt_wire.PromptSection(
                    kind=section.kind, text=section.text, source=section.source
                )
                for section in sections
            ],
            truncated=any(section.truncated for section in sections),
        )


def install(server: FamilyContext) -> None:
    """Register ``prompt/read``."""
    server.router.register("prompt/read", PromptService(server).read)
