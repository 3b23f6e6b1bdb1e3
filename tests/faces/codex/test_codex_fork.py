"""``thread/fork`` through OpenAI's Python SDK: the fork carries the source's
history (the model's next request is as long as the source's would be), goes on
independently, and every frame of the session validates against Codex 0.169's
own schema."""

from __future__ import annotations

import pytest
from openai_codex import Codex, CodexConfig
from openai_codex.client import CodexClient

pytestmark = [
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
    pytest.mark.usefixtures("every_frame_checked"),
]


def _input_tokens(thread: object, text: str) -> int:
    result = thread.run(text)  # type: ignore[attr-defined]
    assert result.usage is not None
    return int(result.usage.last.input_tokens)


def test_a_fork_after_two_turns_has_the_history_and_goes_on_alone(config: CodexConfig) -> None:
    with Codex(config) as codex:
        source = codex.thread_start()
        source.set_name("plans")
        for text in ("the first request", "the second request"):
            assert source.run(text).final_response == f"You said: {text}"
        fork = codex.thread_fork(source.id, include_turns=True)
        assert fork.id != source.id
        read = fork.read(include_turns=True).thread
        assert read.name == "plans (fork)"
        assert read.forked_from_id == source.id
        assert [t.status.value for t in read.turns] == ["completed", "completed"]
        # The same words cost the same input in the fork as in the source (the
        # offline model counts every message), more than in a new thread.
        in_fork = _input_tokens(fork, "what next")
        in_source = _input_tokens(source, "what next")
        assert in_fork == in_source > _input_tokens(codex.thread_start(), "what next")
        assert len(fork.read(include_turns=True).thread.turns) == 3
        assert len(source.read(include_turns=True).thread.turns) == 3
        assert codex.thread_fork(source.id, include_turns=False).read().thread.turns == []


def test_last_turn_id_ends_the_copied_history(config: CodexConfig) -> None:
    with CodexClient(config) as client:
        client.initialize()
        thread_id = client.thread_start({}).thread.id
        turn_ids = []
        for text in ("one", "two"):
            turn = client.turn_start(thread_id, text).turn
            turn_ids.append(turn.id)
            while client.next_turn_notification(turn.id).method != "turn/completed":
                pass
        raw = client._request_raw
        forked = raw("thread/fork", {"threadId": thread_id, "lastTurnId": turn_ids[0]})
        assert isinstance(forked, dict)
        turns = forked["thread"]["turns"]
        assert [t["items"][0]["content"][0]["text"] for t in turns] == ["one"]
        assert forked["thread"]["forkedFromId"] == thread_id
        assert forked["approvalPolicy"] and forked["sandbox"]["type"] == "workspaceWrite"
        for bad in ({"threadId": thread_id, "lastTurnId": "other:turn_001"}, {"threadId": "nope"}):
            with pytest.raises(Exception) as refused:
                raw("thread/fork", bad)
            assert "Invalid request" in str(refused.value) or "not found" in str(refused.value)
