"""Work a server runs beside its requests: building the wire models between them,
and background tasks whose failure is logged rather than ending the server."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

import anyio

if TYPE_CHECKING:
    from anyio.abc import TaskGroup
    from pydantic import BaseModel

log = logging.getLogger("appserver.server")


async def build_wire_models(idle: Callable[[], Awaitable[None]] | None = None) -> None:
    """Build the DotCraft door's wire models' validators (deferred at import to
    keep start-up short) one at a time between requests, in the order a session
    first needs them; a request that comes first builds what it needs itself.

    ``idle``: waits until no request is being handled, so the first requests
    of a session (``thread/start`` sent right after ``initialize``) are not
    slowed down by models they do not need."""
    from appserver.protocol.core_methods import models_in_first_use_order

    await build_models(models_in_first_use_order(), idle)


async def build_models(
    models: Iterable[type[BaseModel]], idle: Callable[[], Awaitable[None]] | None = None
) -> None:
    """Build ``models``' validators one at a time, yielding to the event loop
    between them (after ``idle``, if given, before each)."""
    for model in models:
        if not model.__pydantic_complete__:
            if idle is not None:
                await idle()
            model.model_rebuild()
        await anyio.sleep(0)


def warm_provider(task_group: TaskGroup, provider: object) -> None:
    """Start loading what ``provider`` needs for its first call (its HTTP
    library and client: ~35 ms) in the background, off the event loop, so the
    first turn does not wait for it. A provider without ``warm`` has nothing
    to load."""
    warm = getattr(provider, "warm", None)
    if warm is not None:
        task_group.start_soon(_warm, warm)


async def _warm(warm: Callable[[], Awaitable[Any]]) -> None:
    try:
        await warm()
    except Exception as exc:  # the first call meets it again, and reports it
        log.debug("could not warm the provider up: %s", exc)


async def run_logging_failure(run: Callable[[], Awaitable[Any]]) -> None:
    """Run ``run``; its failure is logged, not raised (the server goes on)."""
    try:
        await run()
    except Exception:
        log.exception("background task %r failed", run)
