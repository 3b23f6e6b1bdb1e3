"""``welcome/suggestions``: answered from a cache that a background refresh fills.

The request never makes suggestions (DotCraft's ``SuggestAsync``): it answers
from memory (made less than :data:`MEMORY_SECONDS` ago), else from the persisted
snapshot (storage/welcome_cache.py, read only in a trusted workspace: a
checkout's own file could suggest anything), else ``source: none``; and
``none`` whenever the setting is off (``WelcomeSuggestions.Enabled``, written
by ``workspace/config/update {welcomeSuggestionsEnabled}``).

The refresh: every turn that completes on a thread that is not internal wakes
:meth:`WelcomeSuggestions.run`; it waits until no turn has completed for
:data:`DEBOUNCE_SECONDS` (several turns, one refresh) and until
:data:`MIN_INTERVAL_SECONDS` after its last success, then, when the setting is
on, someone shows the suggestions (a client of this process asked for them, or
an earlier refresh left a snapshot: a server whose clients never show them
spends no model call on them) and the evidence is sufficient
(services/suggestions/evidence.py), runs a helper turn
(runtime/helper_threads.py, profile ``welcome-suggest``) whose model calls
``EmitWelcomeSuggestions``. Usable items (exactly 4) replace the cache and the
snapshot and are announced with ``welcome/suggestionsUpdated``; anything else
(too little evidence, the same fingerprint as the cache, a model that answered
badly, :data:`HELPER_SECONDS` passed) changes nothing. DotCraft
v0.2.9's trigger, not v0.2.15's "after memory consolidation": this server keeps
no memory files.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread
from pydantic import BaseModel

from appserver.protocol import errors as rpc_errors
from appserver.protocol.ids import now_iso
from appserver.protocol.suggestions import (
    MAX_WELCOME_ITEMS,
    WelcomeSuggestionsParams,
    WelcomeSuggestionsResult,
    WelcomeSuggestionsUpdatedNotification,
)
from appserver.rpc.connection import RequestContext
from appserver.runtime.helper_threads import HelperRequest, HelperThreads
from appserver.runtime.turns.model import ActiveTurn
from appserver.services.suggestions import evidence as welcome_evidence
from appserver.services.suggestions_waiting import welcome_enabled
from appserver.storage.welcome_cache import cache_path, read_snapshot, write_snapshot
from appserver.tools.profiles import EMIT_WELCOME, WELCOME_PROFILE

if TYPE_CHECKING:
    from appserver.services.context import FamilyContext

log = logging.getLogger("appserver.suggestions")

MEMORY_SECONDS = 5 * 60
DEBOUNCE_SECONDS = 1.0
MIN_INTERVAL_SECONDS = 2 * 60
HELPER_SECONDS = 2 * 60


def nothing() -> WelcomeSuggestionsResult:
    """The answer when there are no suggestions."""
    return WelcomeSuggestionsResult(items=[], source="none", generated_at=now_iso(), fingerprint="")


class WelcomeSuggestions:
    """The cache, its background refresh and the ``welcome/suggestions`` handler."""

    def __init__(self, server: FamilyContext, helpers: HelperThreads) -> None:
        self.server = server
        self.helpers = helpers
        self.cached: WelcomeSuggestionsResult | None = None
        self.cached_at = 0.0
        self.last_success: float | None = None
        # Whether anyone shows them: a client of this process asked, or an earlier
        # refresh left a snapshot. Until then no refresh spends a model call.
        self.wanted = False
        self._wake = anyio.Event()

    # --- the request ------------------------------------------------------------------

    async def suggestions(self, ctx: RequestContext, params: WelcomeSuggestionsParams) -> BaseModel:
        asked = params.identity.workspace_path if params.identity is not None else None
        threads = self.server.threads
        if os.path.normpath(threads.normalize_workspace(asked)) != os.path.normpath(
            threads.workspace
        ):
            raise rpc_errors.invalid_request(
                "Requested workspace is not hosted by this AppServer instance."
            )
        count = params.max_items if params.max_items and params.max_items > 0 else 4
        count = min(count, MAX_WELCOME_ITEMS)
        if not welcome_enabled(self.server):
            return nothing()
        self.wanted = True
        cached = self.cached
        if cached is None or time.monotonic() - self.cached_at > MEMORY_SECONDS:
            cached = await self._persisted()
        if cached is None:
            return nothing()
        return cached.model_copy(update={"items": cached.items[:count]})

    async def _persisted(self) -> WelcomeSuggestionsResult | None:
        if not self.server.trust.trusted:
            return None
        stored = await anyio.to_thread.run_sync(read_snapshot, self.server.craft_dir)
        if stored is None or stored.source != "dynamic" or not stored.items:
            return None
        self.cached, self.cached_at = stored, time.monotonic()
        return stored

    # --- the refresh ------------------------------------------------------------------

    def turn_ended(self, active: ActiveTurn) -> None:
        """A turn ended (an engine turn listener): a completed turn of a thread
        that is not internal asks for a refresh."""
        if active.record.status == "completed" and not active.thread.is_internal:
            self._wake.set()

    async def run(self) -> None:
        """Refresh after turns, debounced, for the server's life (a background task)."""
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            while True:  # until no turn completed for DEBOUNCE_SECONDS
                with anyio.move_on_after(DEBOUNCE_SECONDS) as quiet:
                    await self._wake.wait()
                if quiet.cancelled_caught:
                    break
                self._wake = anyio.Event()
            if self.last_success is not None:
                # Triggers meanwhile only set the event again: one refresh after.
                await anyio.sleep(self.last_success + MIN_INTERVAL_SECONDS - time.monotonic())
            try:
                await self.refresh()
            except Exception:
                log.exception("the welcome suggestions could not be refreshed")

    async def refresh(self) -> WelcomeSuggestionsResult | None:
        """One refresh (see the module docstring); the new suggestions, if any."""
        if not welcome_enabled(self.server):
            return None
        if not self.wanted and not cache_path(self.server.craft_dir).is_file():
            return None
        found = await self._evidence()
        if not found.sufficient:
            return None
        fingerprint = found.fingerprint(MAX_WELCOME_ITEMS)
        known = self.cached or await self._persisted()  # after a restart: the file's
        if known is not None and known.fingerprint == fingerprint:
            return None  # nothing new since the suggestions were made
        request = HelperRequest(
            profile=WELCOME_PROFILE,
            channel_context=f"{WELCOME_PROFILE}:{fingerprint}",
            display_name="[internal] Welcome suggestions",
            instructions=welcome_evidence.instructions(MAX_WELCOME_ITEMS),
            prompt=welcome_evidence.prompt(found, MAX_WELCOME_ITEMS),
            tool=EMIT_WELCOME,
        )
        with anyio.move_on_after(HELPER_SECONDS):
            outcome = await self.helpers.run(request)
            items = welcome_evidence.best_answer(outcome.calls, MAX_WELCOME_ITEMS)
            if items is None:
                log.info("no usable welcome suggestions (turn %s)", outcome.status)
                return None
            result = WelcomeSuggestionsResult(
                items=items, source="dynamic", generated_at=now_iso(), fingerprint=fingerprint
            )
            self.cached, self.cached_at = result, time.monotonic()
            self.last_success = time.monotonic()
            await anyio.to_thread.run_sync(write_snapshot, self.server.craft_dir, result)
            self.server.runtime.bus.publish(
                "welcome/suggestionsUpdated",
                WelcomeSuggestionsUpdatedNotification(**dict(result)),
                broadcast=True,
            )
            return result
        log.info("the welcome suggestions took longer than %g s", HELPER_SECONDS)
        return None

    async def _evidence(self) -> welcome_evidence.Evidence:
        threads = self.server.threads
        repo = threads.repo
        found = welcome_evidence.Evidence(workspace=threads.workspace)
        messages: list[str] = []
        recent = await repo.recent_threads(threads.workspace, welcome_evidence.RECENT_THREADS)
        for thread in recent:
            found.threads.append((thread.id, thread.last_active_at))
            turns, _ = await repo.turns(thread.id, welcome_evidence.TURNS_PER_THREAD)
            items = await repo.items(thread.id, [turn.id for turn in turns])
            for turn in reversed(turns):  # newest first
                messages += [
                    str(item.payload.get("text") or "")
                    for item in items[turn.id]
                    if item.type == "userMessage"
                ]
        found.snippets = welcome_evidence.rank_snippets(messages)
        return found
