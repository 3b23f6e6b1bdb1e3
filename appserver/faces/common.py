"""Small pieces several faces need the same way: flag types, images sent as
bytes, a conversation name's thread, interrupting a turn that may be ending,
waiting out another client's turn.

Imports stay light at the top (faces pay for every import on every start).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import contextlib
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from appserver.runtime.events import Event, Participant
    from appserver.runtime.host import Runtime
    from appserver.runtime.threads import NewThread
    from appserver.storage.faces import FaceRepository

IMAGES_DIR = Path(".craft") / "attachments" / "images"


def system_prompt(base: str, replace: str | None, append: list[str] | None) -> str:
    """The agent's system prompt after ``--system-prompt`` (replaces ``base``)
    and ``--append-system-prompt`` (each appended, in order)."""
    prompt = base if replace is None else replace
    return "\n\n".join(part for part in [prompt, *(append or [])] if part)


def turn_id_of(event: Event) -> str | None:
    """The turn a runtime event is about (``None`` for thread-level events)."""
    if event.turn_id is not None:  # a streamed text delta: no params parsed
        return event.turn_id
    params = event.data  # a turn's events are data: nothing parsed
    turn = params.get("turn")
    if isinstance(turn, dict) and turn.get("id") is not None:
        return str(turn["id"])
    turn_id = params.get("turnId")
    return str(turn_id) if turn_id is not None else None


@dataclass(frozen=True)
class ItemData:
    """The ``item`` of an ``item/*`` event, read from the event's data: the
    fields a face's encoder uses, without the wire model."""

    id: str
    type: str
    created_at: str
    payload: dict[str, Any]


def item_of(event: Event) -> ItemData | None:
    """The item an event carries (``None`` for other events, and for a
    streamed text delta, whose params are not read)."""
    if event.text is not None:
        return None
    item = event.data.get("item")
    if not isinstance(item, dict):
        return None
    payload = item.get("payload")
    return ItemData(
        id=str(item.get("id", "")),
        type=str(item.get("type", "")),
        created_at=str(item.get("createdAt", "")),
        payload=payload if isinstance(payload, dict) else {},
    )


def positive_int(value: str) -> int:
    """An argparse type: an integer above zero."""
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number <= 0:
        raise argparse.ArgumentTypeError("must be a positive integer")
    return number


def decode_base64(data: str) -> bytes:
    """Strict base64 (``ValueError`` for anything else)."""
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("the data is not valid base64") from None


async def store_image(workspace: Path, data: bytes) -> tuple[str, str]:
    """Keep image bytes under ``<workspace>/.craft/attachments/images/<sha256>.<ext>``
    (inside the workspace, so a ``localImage`` input may read them); returns
    ``(path, media_type)``. ``ValueError`` for anything but a PNG, JPEG, GIF or
    WebP image within the size cap."""
    import anyio

    from appserver.runtime.inputs import MAX_IMAGE_BYTES
    from appserver.tools.images import sniff_image

    if len(data) > MAX_IMAGE_BYTES:
        raise ValueError(f"images are limited to {MAX_IMAGE_BYTES} bytes")
    sniffed = sniff_image(data)
    if sniffed is None:
        raise ValueError("not a PNG, JPEG, GIF or WebP image")
    path = workspace / IMAGES_DIR / f"{hashlib.sha256(data).hexdigest()}.{sniffed[1]}"
    if not path.exists():
        await anyio.to_thread.run_sync(_write_file, path, data)
    return str(path), sniffed[0]


def _write_file(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


async def interrupt_quietly(runtime: Runtime, thread_id: str, turn_id: str) -> None:
    """Interrupt the turn; one that ended meanwhile is fine."""
    from appserver.runtime.errors import Refusal

    with contextlib.suppress(Refusal):
        await runtime.turns.interrupt(thread_id, turn_id)


async def wait_out_turn(runtime: Runtime, thread_id: str) -> None:
    """After ``TurnInProgress``: wait until the turn another client runs on
    ``thread_id`` has ended, then let the caller try again. A turn that is
    already finishing (no longer active) gets a moment, so the retry does not
    spin. Callers that must be able to stop waiting wrap this in their own
    cancel scope."""
    import anyio

    other = runtime.engine.active.get(thread_id)
    if other is None:
        await anyio.sleep(0.01)  # it is finishing: try again
        return
    await other.done.wait()


async def session_thread(
    runtime: Runtime,
    faces: FaceRepository,
    face: str,
    key: str,
    participant: Participant,
    settings: dict[str, Any],
    new: NewThread,
) -> str:
    """The thread a face's conversation ``key`` maps to.

    A thread someone deleted or archived is replaced by a fresh one (``new``,
    then bound to ``key``); a paused one is resumed. ``settings`` (e.g.
    ``approvalPolicy``, ``model``) are applied to an existing thread's
    configuration where they differ.
    """
    from appserver.protocol.ids import now_iso
    from appserver.runtime.errors import ThreadNotFound

    threads = runtime.threads
    thread_id = seen = await faces.thread_of(face, key)
    if thread_id is not None:
        try:
            thread = await threads.get(thread_id)
        except ThreadNotFound:
            thread_id = None
        else:
            if thread.status == "archived":
                thread_id = None  # archived by a user: the conversation starts afresh
            else:
                if thread.status == "paused":
                    await threads.resume(thread.id, participant)
                config = dict(thread.configuration or {})
                wanted = {**config, **settings}
                if wanted != config:
                    await threads.configure(thread.id, wanted)
    if thread_id is None:
        created = (await threads.create(new)).id
        thread_id = await faces.claim(face, key, created, now_iso(), replacing=seen)
        if thread_id != created:
            # Another process (a second one-shot, an editor's second agent) opened
            # this conversation at the same moment: both go on in its thread.
            await threads.delete(created)
    return thread_id


def settled_choice(workspace: Path, provider_options: dict[str, Any]) -> tuple[str, str] | None:
    """(provider, model) the built runtime will name in ``workspace``, when its
    settings say so whether or not the workspace is trusted: what a face's early
    answer to a first handshake line may name (zot's ``hello``, the router's
    ``providers_list``). ``None``: the answer waits for the runtime."""
    # Imported here: the command line imports this module (`--help` needs none of them).
    from appserver.providers import settled_model
    from appserver.storage.user_settings import load_user_settings
    from appserver.storage.workspace_config import load_workspace_config

    workspace = workspace.resolve()
    workspace_config = load_workspace_config(workspace / ".craft")
    return settled_model(provider_options, workspace_config, load_user_settings(workspace))


def add_backlog_argument(group: Any, default: int | None = None) -> None:
    """``--max-client-backlog``: how far the client may fall behind reading
    before it is dropped (every face; see :mod:`appserver.transport.peer_writer`).
    ``default``: the face's own, when what it sends about one input can be
    larger than the usual 16 MiB."""
    from appserver.transport.base import DEFAULT_MAX_BYTES

    default = DEFAULT_MAX_BYTES if default is None else default
    group.add_argument(
        "--max-client-backlog",
        type=positive_int,
        default=default,
        metavar="BYTES",
        help=(
            "a client with more than this many bytes of output unread (behind the write in "
            "progress), or whose reading stalls for 30 s, is dropped: the process ends "
            f"(default {default})"
        ),
    )
