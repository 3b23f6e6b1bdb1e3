"""A provider for skill/command tests: the offline model, plus a record of
every request it was sent (so a test can see the system prompt)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncGenerator

from appserver.providers.base import ModelEvent, ModelRequest
from appserver.providers.offline import OfflineProvider


class RecordingProvider(OfflineProvider):
    """:class:`OfflineProvider` that keeps every :class:`ModelRequest`."""

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        # The engine keeps appending to its history list: keep a snapshot.
        self.requests.append(dataclasses.replace(request, messages=list(request.messages)))
        return super().stream(request)
