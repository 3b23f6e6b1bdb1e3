"""Answering Zene requests on an open runtime: what one client conversation holds.

A request's ``session_id`` names an ordinary thread of the workspace (``face_sessions``:
face ``zene``), made and bound on first use; its ``prompt`` becomes one turn there under
the request's deadline, and the turn's last agent message is the response's ``text``.
An ``idempotency_key`` replays a stored successful response (``face_replies``) to a
retry, and only to one: clawbridge derives the key from session, channel and prompt,
so the same text sent again later is a new message (see :func:`replay_window`).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import time
from typing import TYPE_CHECKING, Any

from appserver.faces.common import interrupt_quietly, session_thread, wait_out_turn
from appserver.faces.zene.wire import (
    INTERNAL,
    PROVIDER_CODES,
    TIMEOUT,
    Request,
    encode,
    failure,
    response,
    token_usage,
)
from appserver.protocol.ids import iso_ago

if TYPE_CHECKING:
    from appserver.faces.seat import Seat
    from appserver.runtime.events import Event
    from appserver.runtime.host import Runtime

log = logging.getLogger("appserver.faces.zene")

FACE = "zene"
# After a timeout, how long to wait for the interrupted turn to wind down.
INTERRUPT_GRACE = 5.0
# After another process's turn on the session ends, how long its stored reply
# is waited for (it is stored just after the turn's end) before running anew.
REPLY_GRACE = 1.0

_TERMINAL = frozenset({"turn/completed", "turn/failed", "turn/cancelled"})


# After its own deadline clawbridge waits its retry backoff (0.3 s) and a new
# process starts: a retry arrives this much after the original's deadline.
RETRY_DELAY = 2.0


def _received_iso(request: Request, earlier: float = 0.0) -> str:
    """The wall-clock time ``earlier`` seconds before ``request`` was received."""
    return iso_ago(time.monotonic() - request.received + earlier)


def replay_window(timeout_ms: float, ttl: int) -> float:
    """How long after a request was received a repeat of it is taken for a retry
    (seconds): clawbridge retries a failure only, once its own deadline
    (``timeout_ms`` is 90% of it) has passed, so a retry comes within that
    deadline and :data:`RETRY_DELAY`; never longer than ``--idempotency-ttl-sec``."""
    return min(float(ttl), timeout_ms / 900 + RETRY_DELAY)


class Conversations:
    """Answers requests on one runtime: session -> thread, idempotent replays,
    one turn per request under the request's deadline."""

    def __init__(self, runtime: Runtime, args: argparse.Namespace) -> None:
        from appserver.storage.faces import FaceRepository

        self.runtime = runtime
        self.faces = FaceRepository(runtime.db)
        self.approval_policy: str | None = args.approval_policy
        self.ttl: int = args.idempotency_ttl_sec

    async def answer(self, request: Request) -> dict[str, Any]:
        """The response to ``request`` (never raises but for cancellation)."""
        try:
            return await self._answer(request)
        except Exception:
            log.exception("request %s of session %s failed", request.request_id, request.session_id)
            return failure(request, INTERNAL, "internal error (see the host's stderr log)")

    def _reply_key(self, request: Request) -> str | None:
        """The stored reply's key: the pair ``(session_id, idempotency_key)``
        as a JSON array, so no characters in either can make another pair's key."""
        if request.idempotency_key is None or self.ttl <= 0:
            return None
        return json.dumps([request.session_id, request.idempotency_key])

    async def _answer(self, request: Request) -> dict[str, Any]:
        reply_key = self._reply_key(request)
        replay = await self._replay(request, reply_key)
        if replay is not None:
            return replay
        from appserver.faces.seat import Seat

        seat = Seat(FACE)
        try:
            thread_id = await self._thread(request, seat)
            result = await self._run(request, thread_id, seat, reply_key)
        finally:
            seat.close()
        if reply_key is not None and result["ok"] and not result.get("replayed"):
            # Stamped with when the request came, where the retry window starts.
            received = _received_iso(request)
            await self.faces.store_reply(FACE, reply_key, encode(result), received)
            await self.faces.forget_replies_before(FACE, iso_ago(self.ttl))
        return result

    async def _replay(self, request: Request, reply_key: str | None) -> dict[str, Any] | None:
        """The stored reply, if ``request`` is a retry of the request that got it:
        received within :func:`replay_window` of that one. Only successes are stored."""
        if reply_key is None:
            return None
        stored = await self.faces.reply(FACE, reply_key)
        window = replay_window(request.timeout_ms, self.ttl)
        if stored is None or stored[1] < _received_iso(request, window):
            return None
        replay: dict[str, Any] = json.loads(stored[0])
        replay["request_id"] = request.request_id
        replay["replayed"] = True
        return replay

    async def _replay_after(
        self, request: Request, reply_key: str | None, thread_id: str
    ) -> dict[str, Any] | None:
        """Wait out the turn another client runs on the thread; then the stored
        reply if that turn was this retry's original. Its process stores the
        reply just after the turn ends: it gets :data:`REPLY_GRACE` to do so,
        or a retry would run the request again in that gap."""
        import anyio

        while await self.runtime.threads.running_anywhere(thread_id):
            await wait_out_turn(self.runtime, thread_id)
            replay = await self._replay(request, reply_key)
            if replay is not None:
                return replay
        if reply_key is None:
            return None
        with anyio.move_on_after(min(REPLY_GRACE, request.remaining())):
            while (replay := await self._replay(request, reply_key)) is None:
                await anyio.sleep(0.02)
            return replay
        return None

    async def _thread(self, request: Request, seat: Seat) -> str:
        """The session's thread (made and bound on first use, or when gone)."""
        from appserver.runtime.threads import NewThread

        policy = self.approval_policy
        return await session_thread(
            self.runtime,
            self.faces,
            FACE,
            request.session_id,
            seat,
            {"approvalPolicy": policy} if policy is not None else {},
            NewThread(
                user_id=request.session_id,
                channel_name=FACE,
                channel_context=request.channel_id,
                display_name=f"zene session {request.session_id}"[:200],
                configuration={"approvalPolicy": policy} if policy else None,
            ),
        )

    async def _run(
        self, request: Request, thread_id: str, seat: Seat, reply_key: str | None
    ) -> dict[str, Any]:
        import anyio

        from appserver.runtime.errors import TurnInProgress

        runtime = self.runtime
        await runtime.threads.subscribe(thread_id, seat)
        turn_id: str | None = None
        terminal: Event | None = None
        try:
            with anyio.move_on_after(request.remaining()):
                while turn_id is None:
                    try:
                        active = await runtime.turns.start(
                            thread_id, [{"type": "text", "text": request.prompt}], origin=seat
                        )
                    except TurnInProgress:
                        # Someone else runs a turn here (a WebSocket client, or the
                        # original of this retry in another process): wait for it.
                        replay = await self._replay_after(request, reply_key, thread_id)
                        if replay is not None:
                            return replay
                        continue
                    turn_id = active.record.id
                terminal = await _terminal(seat, turn_id)
            if terminal is None:
                if turn_id is not None:
                    await interrupt_quietly(runtime, thread_id, turn_id)
                    # A one-shot process has only its reserve left: half for the
                    # turn to wind down (closing the runtime ends it if need be).
                    grace = request.reserve / 2 if request.reserve else INTERRUPT_GRACE
                    with anyio.move_on_after(grace):
                        await _terminal(seat, turn_id)
                return failure(
                    request, TIMEOUT, f"request exceeded timeout_ms ({request.timeout_ms:g} ms)"
                )
        finally:
            runtime.threads.unsubscribe(thread_id, seat)
        return outcome(request, terminal)


async def _terminal(seat: Seat, turn_id: str) -> Event:
    """The terminal event of ``turn_id`` (skipping everything else)."""
    while True:
        event = await seat.next_event()
        # Read as data: a one-shot builds no wire model (and loads no pydantic).
        turn = event.data.get("turn") if event.kind in _TERMINAL else None
        if turn is not None and turn.get("id") == turn_id:
            return event


def outcome(request: Request, terminal: Event) -> dict[str, Any]:
    """The response for a turn's terminal event."""
    params = terminal.data
    turn: dict[str, Any] = params["turn"]
    items: list[dict[str, Any]] = list(turn.get("items") or [])
    tokens = turn.get("tokenUsage")
    usage = (
        token_usage(int(tokens.get("inputTokens", 0)), int(tokens.get("outputTokens", 0)))
        if tokens
        else token_usage()
    )
    if terminal.kind == "turn/failed":
        errors = [item for item in items if item.get("type") == "error"]
        code = str((errors[-1].get("payload") or {}).get("code", "")) if errors else ""
        message = str(params.get("error") or "the turn failed")
        return failure(request, PROVIDER_CODES.get(code, INTERNAL), message, usage)
    if terminal.kind == "turn/cancelled":
        reason = str(params.get("reason") or "cancelled")
        return failure(request, INTERNAL, f"the turn was cancelled ({reason})", usage)
    texts = [
        str((item.get("payload") or {}).get("text") or "")
        for item in items
        if item.get("type") == "agentMessage"
    ]
    text = next((t for t in reversed(texts) if t.strip()), "")
    if not text:
        return failure(request, INTERNAL, "empty response", usage)
    if usage["total_tokens"] <= 0:
        # The provider reported no usage: estimate (about 4 characters a token),
        # since clawbridge refuses a success with zero tokens as suspicious.
        prompt_tokens = max(1, math.ceil(len(request.prompt) / 4))
        usage = token_usage(prompt_tokens, max(1, math.ceil(len(text) / 4)))
    return response(request.request_id, request.session_id, text=text, usage=usage)
