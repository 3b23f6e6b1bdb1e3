"""Forking a thread: a new thread that starts with a copy of another's history.

The copy is the source's turns and items (ids and numbers kept: both are per
thread) up to a fork point, so the model of the fork's next turn sees the
copied conversation, and the two threads go on independently. The fork has a
new id, the source's configuration unless given one, the source's title with
`` (fork)``, and ``metadata.forkedFromId`` (``forkedFromTurnId``: the last
copied turn). Front doors call :func:`fork_thread`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import anyio

from appserver.runtime.errors import InvalidInput, TurnNotFound
from appserver.runtime.threads import NewThread, Threads
from appserver.storage.records import ThreadRecord

FORK_SUFFIX = " (fork)"


@dataclass
class ForkSpec:
    """What to fork and how; ``None`` fields come from the source thread."""

    thread_id: str
    last_turn_id: str | None = None  # None: every turn that is not running
    include_last: bool = True  # False: stop before ``last_turn_id``
    user_id: str | None = None
    channel_name: str | None = None
    workspace_path: str | None = None
    channel_context: str | None = None
    display_name: str | None = None
    configuration: dict[str, Any] | None = None


async def _last_seq(threads: Threads, source: ThreadRecord, spec: ForkSpec) -> tuple[int, str]:
    """The number and id of the last turn to copy (0 and "" for none)."""
    turns, _ = await threads.repo.turns(source.id)
    running = threads.running(source.id) or await threads.running_anywhere(source.id)
    if running and turns:
        running_id = turns[-1].id
        turns = turns[:-1]  # a running turn is not history yet
        if spec.last_turn_id == running_id:
            raise InvalidInput(f"turn {running_id} is in progress: it cannot be forked")
    if spec.last_turn_id is None:
        return (turns[-1].seq, turns[-1].id) if turns else (0, "")
    for index, turn in enumerate(turns):
        if turn.id == spec.last_turn_id:
            if spec.include_last:
                return turn.seq, turn.id
            before = turns[index - 1] if index else None
            return (before.seq, before.id) if before else (0, "")
    raise TurnNotFound(spec.last_turn_id)


async def fork_thread(threads: Threads, spec: ForkSpec) -> ThreadRecord:
    """Make the fork of ``spec.thread_id`` and announce ``thread/started``."""
    source = await threads.get(spec.thread_id)
    last_seq, last_turn = await _last_seq(threads, source, spec)
    name = spec.display_name or f"{source.display_name or source.id}{FORK_SUFFIX}"
    # Once stored, the fork is finished and announced even if the caller is
    # cancelled meanwhile (its client left): never a half-copied, unannounced thread.
    with anyio.CancelScope(shield=True):
        fork = await _make_fork(threads, source, spec, name, last_seq, last_turn)
    return fork


async def _make_fork(
    threads: Threads,
    source: ThreadRecord,
    spec: ForkSpec,
    name: str,
    last_seq: int,
    last_turn: str,
) -> ThreadRecord:
    fork = await threads.create(
        NewThread(
            user_id=spec.user_id if spec.user_id is not None else source.user_id,
            channel_name=(
                spec.channel_name if spec.channel_name is not None else source.origin_channel
            ),
            workspace_path=spec.workspace_path or source.workspace_path,
            # A new identity brings its own context (None included).
            channel_context=(
                spec.channel_context if spec.channel_name is not None else source.channel_context
            ),
            display_name=name,
            history_mode=source.history_mode,
            configuration=(
                spec.configuration if spec.configuration is not None else source.configuration
            ),
        ),
        announce=False,
    )
    if last_seq:
        await threads.repo.copy_history(source.id, fork.id, last_seq)
    metadata = {"forkedFromId": source.id}
    if last_turn:
        metadata["forkedFromTurnId"] = last_turn
    await threads.repo.update(fork.id, metadata=metadata)
    fork = await threads.get(fork.id)
    await threads.announce_started(fork)
    return fork
