"""Context compaction: the model summarises the conversation so far into one
message, and later model calls send that summary instead of what it covers.

A compaction is recorded, not applied to the store: a ``systemNotice`` item
``{kind: "compacted", trigger, mode: "summary", summary, tokensBefore,
tokensAfter, percentLeftAfter, clearedToolResults}`` (DotCraft's shape plus the
summary), framed by ``system/event`` notifications ``compacting`` then
``compacted`` (``compactFailed`` or ``compactSkipped`` otherwise). Every
original item stays; ``runtime.history`` reads the notice when it rebuilds
the conversation.

It runs either as a turn of its own (``thread/compact``, a face's
``compact`` command: ``trigger: "manual"``) or inside a turn whose history
would pass the model's context window (``trigger: "auto"``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from appserver.providers.base import (
    Message,
    ModelRequest,
    Provider,
    ProviderError,
    TextDelta,
    Usage,
)
from appserver.runtime.history import SUMMARY_PREFIX
from appserver.runtime.turns.items import ItemLog
from appserver.runtime.turns.model import ActiveTurn, EngineConfig, TurnFailure

SUMMARY_SYSTEM = (
    "You compact the context of a coding agent's conversation. Write a summary the agent "
    "can continue from as if it had read the whole conversation."
)
SUMMARY_INSTRUCTION = (
    "Summarise the conversation above for yourself. Keep: the user's goals and constraints, "
    "decisions made and why, files and commands involved, what was done, what is left to do, "
    "and anything you must not forget. Leave out pleasantries. Answer with the summary only."
)


def estimate_tokens(messages: list[Message]) -> int:
    """A provider-neutral estimate: about four characters a token, plus a little
    per message (roles, separators) and per image."""
    total = 0
    for message in messages:
        total += 4 + len(message.content) // 4 + 256 * len(message.images)
        for call in message.tool_calls:
            total += 8 + (len(call.name) + len(str(call.arguments))) // 4
    return total


class Compactor:
    """Summarises a turn's history through the model and records it."""

    def __init__(
        self, items: ItemLog, config: EngineConfig, provider: Callable[[], Provider]
    ) -> None:
        self.items = items
        self.config = config
        self.provider = provider

    def over_limit(self, history: list[Message]) -> bool:
        """Whether ``history`` would pass the auto-compaction threshold."""
        limit = self.config.context_window * self.config.auto_compact_ratio
        return self.config.auto_compact and estimate_tokens(history) > limit

    async def compact(self, active: ActiveTurn, history: list[Message], trigger: str) -> str | None:
        """Summarise ``history``; returns the summary, or ``None`` when there was
        nothing to compact. A failed model call raises :class:`TurnFailure`."""
        if not history:
            await self._event(active, "compactSkipped", message="nothing to compact")
            return None
        before = estimate_tokens(history)
        await self._event(active, "compacting", token_count=before)
        provider = self.provider()
        config = active.thread.configuration or {}
        request = ModelRequest(
            model=str(config.get("model") or provider.default_model),
            messages=[*history, Message("user", SUMMARY_INSTRUCTION)],
            system=SUMMARY_SYSTEM,
            purpose="compaction",
        )
        parts: list[str] = []
        async with contextlib.aclosing(provider.stream(request)) as events:
            async for event in events:
                if isinstance(event, TextDelta):
                    parts.append(event.text)
                elif isinstance(event, Usage):
                    self.items.usage(active, event)
                    await self.items.flush(active)
                elif isinstance(event, ProviderError):
                    await self._event(active, "compactFailed", message=event.message)
                    raise TurnFailure(
                        f"compaction failed: model provider error ({event.kind}): {event.message}",
                        f"provider_{event.kind}",
                    )
        summary = "".join(parts).strip()
        if not summary:
            await self._event(active, "compactFailed", message="the model returned no summary")
            raise TurnFailure("compaction failed: the model returned no summary", "compaction")
        after = estimate_tokens([Message("user", SUMMARY_PREFIX + summary)])
        left = max(0.0, 1 - after / self.config.context_window)
        await self.items.instant(
            active,
            "systemNotice",
            {
                "kind": "compacted",
                "trigger": trigger,
                "mode": "summary",
                "summary": summary,
                "tokensBefore": before,
                "tokensAfter": after,
                "percentLeftAfter": round(left, 4),
                "clearedToolResults": 0,
            },
        )
        await self._event(active, "compacted", token_count=after, percent_left=round(left, 4))
        return summary

    async def _event(
        self,
        active: ActiveTurn,
        kind: str,
        *,
        message: str | None = None,
        token_count: int | None = None,
        percent_left: float | None = None,
    ) -> None:
        # Compaction is rare, and the channels' wire models (where this one is
        # declared) are ~3 ms of every start of a door without channels.
        from appserver.protocol.channels import SystemEventNotification

        await self.items.journal.emit(
            active.thread_id,
            "system/event",
            SystemEventNotification(
                kind=kind,
                thread_id=active.thread_id,
                turn_id=active.record.id,
                message=message,
                token_count=token_count,
                percent_left=percent_left,
            ),
            include=active.watchers,
        )
