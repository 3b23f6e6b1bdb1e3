"""The chat's settings commands against a real spawned server (piped, as a
script would): /status, /model, /grants and /revoke, /help naming them and
the approval keys, and approval prompts that say where and why plainly."""

from __future__ import annotations

from pathlib import Path

from appserver_client import chat_approval as approval
from appserver_client.chat_commands import describe_grant

from tests.clients.test_chat_piped import piped_chat


def test_status_and_model_show_and_switch_this_threads_model(workspace: Path) -> None:
    out = piped_chat(workspace, "/status\n/model\n/model gpt-nothing\n/model 1\n/status\n/quit\n")
    first, second = out.split("This thread now uses offline", 1)
    assert f"  Workspace: {workspace}, trusted" in first
    assert "  Provider:  offline" in first
    assert "  Model:     offline (the workspace's default)" in first
    assert "  Approvals: default (the workspace's default)" in first
    assert "  Endpoint:  (none: it runs here)" in first
    assert "Models of offline (* this thread's):\n * 1) offline\n" in first
    assert "No model 'gpt-nothing' here; /model lists them." in first
    assert "  Model:     offline (this thread)" in second  # thread/config/update took it


def test_model_n_works_before_any_listing(workspace: Path) -> None:
    """``/model 1`` numbers as ``/model`` would list, listed or not."""
    out = piped_chat(workspace, "/model 1\n/quit\n")
    assert "This thread now uses offline" in out and "No model" not in out


def test_an_always_answer_is_listed_by_grants_and_revoke_forgets_it(workspace: Path) -> None:
    out = piped_chat(
        workspace,
        "/grants\n!touch kept\na\n/grants\n!touch kept\n/revoke 1\n/grants\n/revoke 1\n"
        "!touch kept\nn\n/quit\n",
    )
    assert "No approvals are remembered. An [a]lways answer remembers one." in out
    listed = f"  1) shell `touch kept` in {workspace} (since "
    assert "Remembered approvals (/revoke N forgets one):\n" + listed in out
    # Remembered: the second run asks nothing; revoked: the third asks again.
    assert out.count("Approval needed (shell): touch kept") == 2
    assert f"Revoked: shell `touch kept` in {workspace} (since " in out
    after = out.split("Revoked: ", 1)[1]
    assert "No approvals are remembered." in after
    assert "No approvals are remembered." in after.split("/grants", 1)[-1]
    assert "The shell call was declined." in after


def test_help_names_the_settings_commands_and_the_approval_keys(workspace: Path) -> None:
    out = piped_chat(workspace, "/help\n/quit\n")
    for command in ("/model [N|NAME]", "/status", "/grants", "/revoke N"):
        assert command in out
    assert "a always (this exact call, remembered for good: /grants, /revoke)" in out
    assert "w wider" in out and "s this thread" in out and "y once" in out


def test_the_approval_says_where_relative_to_the_workspace_and_why_plainly(
    workspace: Path,
) -> None:
    out = piped_chat(workspace, "!touch made\ny\n/quit\n")
    assert f"  in:  {workspace} (the workspace)\n" in out
    why = next(line for line in out.splitlines() if line.startswith("  why: "))
    assert why == "  why: not a known read-only command: touch"
    params = {"approvalType": "file", "operation": "write", "scopeKey": "file:write:*"}
    offered = approval.choices(params)
    inside = approval.header({**params, "target": "/w/src/a.py"}, offered, workspace="/w")
    assert "  in:  src/a.py (in the workspace)\n" in inside
    outside = approval.header({**params, "target": "/etc/hosts"}, offered, workspace="/w")
    assert "  in:  /etc/hosts (outside the workspace)\n" in outside
    background = "Run a shell command in . — asked, as a background terminal"
    assert approval.why(background) == "asked, as a background terminal"
    reason = "Run a shell command in sub, as a background terminal (it keeps running) — why"
    assert approval.why(reason) == "why; runs as a background terminal (it keeps running)"
    assert approval.why("Fetch https://x.example") == "Fetch https://x.example"


def test_a_grant_is_described_with_hidden_characters_revealed() -> None:
    grant = {"kind": "file", "operation": "write", "target": "/w/a\x1b.txt", "createdAt": ""}
    assert describe_grant(grant) == "file write /w/a⟨U+001B⟩.txt"
