"""Failed turns and refused approvals as Codex reports them, driven by OpenAI's
Python SDK: a failed turn's ``error`` notification, then ``turn/completed``
with ``codexErrorInfo`` mapped from our error code (the offline model's
``?fail KIND``); a ``warning`` when a policy declines without asking. Every
frame validates against Codex 0.169's own schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from openai_codex import CodexConfig
from openai_codex.client import CodexClient

pytestmark = [
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
    pytest.mark.usefixtures("every_frame_checked"),
]


def sent(frames: Path, method: str) -> list[dict[str, Any]]:
    notes = [json.loads(line) for line in frames.read_text().splitlines()]
    return [n["params"] for n in notes if n.get("method") == method]


def run(client: CodexClient, thread_id: str, text: str) -> list[Any]:
    turn = client.turn_start(thread_id, text).turn
    notes = []
    while True:
        note = client.next_turn_notification(turn.id)
        notes.append(note)
        if note.method == "turn/completed":
            return notes


EXPECTED = {
    "auth": "unauthorized",
    "rate_limit": "rateLimitExceeded",
    "unavailable": {"httpConnectionFailed": {"httpStatusCode": None}},
    "timeout": {"responseStreamDisconnected": {"httpStatusCode": None}},
    "other": "other",
}


def test_a_failed_turn_says_why_in_codex_words(config: CodexConfig, frames: Path) -> None:
    with CodexClient(config) as client:
        client.initialize()
        thread_id = client.thread_start({}).thread.id
        for kind in EXPECTED:
            notes = run(client, thread_id, f"?fail {kind} no luck")
            assert notes[-1].payload.turn.status.value == "failed"
            assert "no luck" in notes[-1].payload.turn.error.message
        read = client._request_raw("thread/read", {"threadId": thread_id, "includeTurns": True})
    errors = sent(frames, "error")
    ended = [n["turn"] for n in sent(frames, "turn/completed")]
    assert [e["error"]["codexErrorInfo"] for e in errors] == list(EXPECTED.values())
    assert [t["error"]["codexErrorInfo"] for t in ended] == list(EXPECTED.values())
    assert all(e["willRetry"] is False for e in errors)
    assert [e["turnId"] for e in errors] == [t["id"] for t in ended]
    # The error comes right before its turn's end.
    order = [json.loads(line).get("method") for line in frames.read_text().splitlines()]
    ends = [i for i, m in enumerate(order) if m == "turn/completed"]
    assert all(order[i - 1] == "error" for i in ends)
    assert isinstance(read, dict)
    stored = [t["error"]["codexErrorInfo"] for t in read["thread"]["turns"]]
    assert stored == list(EXPECTED.values())


OUTSIDE = '?tool read_file {"path": "/etc/hostname"}'


@pytest.mark.parametrize(
    ("policy", "text", "what"),
    [
        (
            {"approvalPolicy": "untrusted", "approvalsReviewer": "auto_review"},
            "!touch never",
            "touch never",
        ),
        ({"approvalPolicy": "never"}, OUTSIDE, "/etc/hostname"),
    ],
)
def test_a_policy_that_fails_closed_warns(
    config: CodexConfig,
    frames: Path,
    workspace: Path,
    policy: dict[str, str],
    text: str,
    what: str,
) -> None:
    asked: list[str] = []

    def handler(method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        asked.append(method)
        return {"decision": "accept"}

    with CodexClient(config, approval_handler=handler) as client:
        client.initialize()
        started = client.thread_start(policy)
        notes = run(client, started.thread.id, text)
    assert asked == [] and not (workspace / "never").exists()
    assert notes[-1].payload.turn.status.value == "completed"
    (warning,) = sent(frames, "warning")
    assert warning["threadId"] == started.thread.id
    assert "Declined without asking" in warning["message"]
    assert what in warning["message"]
    # Resumed by a later process as the SDK does (no policy named): the same rule.
    with CodexClient(config, approval_handler=handler) as client:
        client.initialize()
        resumed = client.thread_resume(started.thread.id)
        shown = resumed.approval_policy.model_dump(mode="json")
        assert shown == policy["approvalPolicy"]
        assert resumed.approvals_reviewer.value == policy.get("approvalsReviewer", "user")
        run(client, started.thread.id, text)
    assert asked == [] and not (workspace / "never").exists()
    assert len(sent(frames, "warning")) == 2


def test_the_thread_is_told_idle_once_before_its_turn_ends(
    config: CodexConfig, frames: Path
) -> None:
    """Codex's recorded sessions: thread/status/changed {idle}, then turn/completed."""
    with CodexClient(config) as client:
        client.initialize()
        started = client.thread_start()
        run(client, started.thread.id, "hello")
        run(client, started.thread.id, "again")
    notes = [json.loads(line) for line in frames.read_text().splitlines()]
    order = [
        n["method"] if n["method"] != "thread/status/changed" else n["params"]["status"]["type"]
        for n in notes
        if n.get("method") in ("turn/started", "turn/completed", "thread/status/changed")
    ]
    assert order == ["active", "turn/started", "idle", "turn/completed"] * 2, order


def test_a_turn_another_process_runs_shows_the_thread_active(config: CodexConfig) -> None:
    with CodexClient(config) as runner, CodexClient(config) as other:
        runner.initialize()
        other.initialize()
        thread_id = runner.thread_start().thread.id
        turn = runner.turn_start(thread_id, "?stream 400\n?delay 25").turn
        while runner.next_turn_notification(turn.id).method != "item/agentMessage/delta":
            pass
        resumed = other.thread_resume(thread_id).thread
        assert resumed.status.root.type == "active"
        runner.turn_interrupt(thread_id, turn.id)
        while runner.next_turn_notification(turn.id).method != "turn/completed":
            pass


def test_a_resume_that_names_half_the_rule_keeps_the_other(config: CodexConfig) -> None:
    with CodexClient(config) as client:
        client.initialize()
        thread_id = client.thread_start({"approvalPolicy": "never"}).thread.id
    with CodexClient(config) as client:
        client.initialize()
        resumed = client.thread_resume(thread_id, {"approvalsReviewer": "user"})
        assert resumed.approval_policy.model_dump(mode="json") == "never"
        assert resumed.approvals_reviewer.value == "user"
    with CodexClient(config) as client:
        client.initialize()
        forked = client.thread_fork(thread_id, {"approvalsReviewer": "auto_review"})
        assert forked.approval_policy.model_dump(mode="json") == "never"
        assert forked.approvals_reviewer.value == "auto_review"
