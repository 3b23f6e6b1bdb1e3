"""Approvals with no Codex request of their own (a file read outside the
workspace, a web fetch) asked as ``item/permissions/requestApproval`` through
OpenAI's Python SDK's approval handler, its answers mapped onto our decisions;
every frame validated against Codex 0.169's own schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from openai_codex import CodexConfig
from openai_codex.client import CodexClient

from appserver.faces.codex.approvals import permissions_decision

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


def final_text(client: CodexClient, thread_id: str, text: str) -> str:
    turn = client.turn_start(thread_id, text).turn
    texts = []
    while True:
        note = client.next_turn_notification(turn.id)
        if note.method == "item/completed" and note.payload.item.root.type == "agentMessage":  # type: ignore[union-attr]
            texts.append(note.payload.item.root.text)  # type: ignore[union-attr]
        if note.method == "turn/completed":
            return texts[-1]


@pytest.mark.usefixtures("every_frame_checked")
def test_reads_outside_and_fetches_ask_for_permissions(config: CodexConfig, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("secret-17\n")
    asked: list[tuple[str, dict[str, Any]]] = []
    answers: list[dict[str, Any]] = []

    def handler(method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        asked.append((method, params or {}))
        return answers.pop(0)

    read = f'?tool read_file {{"path": "{outside}"}}'
    with CodexClient(config, approval_handler=handler) as client:
        client.initialize()
        thread_id = client.thread_start(
            {"approvalPolicy": "untrusted", "approvalsReviewer": "user"}
        ).thread.id
        answers.append({"permissions": {"fileSystem": {"read": [str(outside)]}}})
        assert final_text(client, thread_id, read) == "read_file returned: secret-17"
        method, params = asked[-1]
        assert method == "item/permissions/requestApproval"
        assert params["permissions"]["fileSystem"]["read"] == [str(outside)]
        assert params["itemId"] == "offline_call_1"

        answers.append({})  # what the SDK's default handler answers
        assert final_text(client, thread_id, read) == "The read_file call was declined."

        answers.append({"permissions": {"network": {"enabled": False}}})
        fetch = '?tool web_fetch {"url": "https://example.com/"}'
        assert final_text(client, thread_id, fetch) == "The web_fetch call was declined."
        method, params = asked[-1]
        assert method == "item/permissions/requestApproval"
        assert params["permissions"] == {"network": {"enabled": True}}
    assert len(asked) == 3


def test_permission_answers_map_onto_our_decisions() -> None:
    path = "/data/notes.txt"
    entry = {"access": "read", "path": {"type": "path", "path": path}}
    assert (
        permissions_decision({"permissions": {"fileSystem": {"entries": [entry]}}}, "file", path)
        == "accept"
    )
    granted = {"permissions": {"fileSystem": {"read": [path]}}, "scope": "session"}
    assert permissions_decision(granted, "file", path) == "acceptForSession"
    assert (
        permissions_decision({"permissions": {"fileSystem": {"read": ["/x"]}}}, "file", path)
        == "decline"
    )
    denied = {"access": "deny", "path": {"type": "path", "path": path}}
    assert (
        permissions_decision({"permissions": {"fileSystem": {"entries": [denied]}}}, "file", path)
        == "decline"
    )
    assert (
        permissions_decision({"permissions": {"network": {"enabled": True}}}, "network", "x")
        == "accept"
    )
    for bad in (
        {},
        {"permissions": None},
        {"permissions": {"network": "yes"}},
        {"permissions": []},
    ):
        assert permissions_decision(bad, "network", "x") == "decline"
