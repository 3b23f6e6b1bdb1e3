"""The zene face's stored replies are keyed by the pair (session, idempotency key).

The key used to be ``session NUL key`` with NUL allowed in both, so session
``alice`` with key ``k\\0x`` was given session ``alice\\0k``'s stored reply.
"""

from __future__ import annotations

from pathlib import Path

from tests.faces.zene.test_face_zene import LongLived, clawbridge_request, line, open_long_lived


async def test_a_nul_in_the_key_does_not_reach_another_sessions_reply(workspace: Path) -> None:
    victim = clawbridge_request(
        session_id="alice\0k", idempotency_key="x", prompt="the victim's question"
    )
    attacker = clawbridge_request(
        session_id="alice", idempotency_key="k\0x", prompt="the attacker's question"
    )
    async with await open_long_lived(workspace) as process:
        host = LongLived(process)
        await host.send(line(victim))  # stored before the next request is read
        stored = await host.receive()
        await host.send(line(attacker))
        other = await host.receive()
        await host.send(line({**attacker, "request_id": "again"}))
        repeat = await host.receive()
        assert stored["ok"] and "replayed" not in stored
        assert other["ok"] and "replayed" not in other, other
        assert other["text"] != stored["text"]
        # The attacker's own retry still replays its own reply.
        assert repeat["replayed"] is True and repeat["text"] == other["text"]
        assert await host.finish() == 0
