"""Token usage of a model call whose provider never reported it.

Providers report usage at the end of a response. A call cut short (an
interrupt, a dropped connection, a provider error) or a provider that never
reports it would leave the turn at "0 in / 0 out" after text was streamed, so
the call's usage is estimated instead: the input from the request with the
compaction estimator (about four characters a token), the output from the
text, reasoning and tool-call arguments streamed so far, the same way.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncGenerator

from appserver.providers.base import (
    ModelEvent,
    ModelRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from appserver.runtime.turns.compaction import estimate_tokens
from appserver.runtime.turns.model import ActiveTurn


def estimated_usage(request: ModelRequest, streamed_chars: int) -> Usage:
    """What ``request`` cost if ``streamed_chars`` characters came back."""
    system = len(request.system or "") // 4
    return Usage(estimate_tokens(request.messages) + system, math.ceil(streamed_chars / 4))


async def counted(
    active: ActiveTurn, request: ModelRequest, events: AsyncGenerator[ModelEvent, None]
) -> AsyncGenerator[ModelEvent, None]:
    """Pass ``events`` through (closing them when closed); when the stream ends
    or is closed (interrupt, error) without a ``Usage`` event, add the
    estimate to the turn's counters.

    The addition is synchronous, so it happens even while the turn is being
    cancelled; ``turn/*``'s ``tokenUsage`` and the stored turn include it.
    """
    streamed = 0
    reported = False
    async with contextlib.aclosing(events):
        try:
            async for event in events:
                if isinstance(event, TextDelta | ReasoningDelta):
                    streamed += len(event.text)
                elif isinstance(event, ToolCallDelta):
                    streamed += len(event.arguments_delta)
                elif isinstance(event, Usage):
                    reported = True
                yield event
        finally:
            if not reported:
                usage = estimated_usage(request, streamed)
                active.input_tokens += usage.input_tokens
                active.output_tokens += usage.output_tokens
