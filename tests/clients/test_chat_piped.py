"""`appserver-client chat` with piped stdin (as in scripts) against a real
spawned server: multi-line messages with a trailing backslash, reasoning before
its answer, long tool results cut with /show, approval prompts that say what
runs and what each answer covers, /resume by name or id, and no spinner."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from appserver_client import chat_approval as approval

from tests.clients.test_chat import CHAT, chat_env

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


def piped_chat(workspace: Path, script: str) -> str:
    done = subprocess.run(
        [CHAT, "chat"],
        cwd=workspace,
        env=chat_env(),
        input=script,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return done.stdout


def test_piped_messages_results_and_reasoning_order(workspace: Path) -> None:
    (workspace / "big.txt").write_text("".join(f"line {n}\n" for n in range(1, 31)))
    out = piped_chat(
        workspace,
        ">notes.txt\\\nhello\\\nworld\ny\n"  # one message over three lines, then approve
        "?think weighing it up\\\nhi there\n"
        '?tool read_file {"path": "big.txt"}\n'
        "/show 1\n"
        "/help\n"
        "/quit\n",
    )
    assert (workspace / "notes.txt").read_text() == "hello\nworld\n"
    # Reasoning prints before the answer it belongs to.
    assert out.index("[thinking] weighing it up") < out.index("You said: hi there")
    # A long result shows 20 lines and names /show; /show prints all of it.
    assert "  line 20\n  … 10 more line(s): /show 1" in out
    assert "  line 21\n" not in out
    shown = out[out.index("[#1, 30 line(s)]") :]
    assert "line 30" in shown
    # /help documents the offline model's directives.
    for directive in ("!COMMAND", ">PATH", "?tool NAME", "/show N", "/resume X"):
        assert directive in out
    assert not any(frame in out for frame in SPINNER)  # never a spinner when piped


def test_piped_command_output_streams_and_the_approval_says_what_runs(workspace: Path) -> None:
    out = piped_chat(workspace, "!echo first; echo second\ns\n/quit\n")
    assert "Approval needed (shell): echo first; echo second" in out
    assert f"  in:  {workspace}" in out
    assert "  why: " in out
    assert "[s]ession: " in out  # what the session answer covers
    assert "[#1 $ echo first; echo second]\n  first\n  second\n[#1 exit code 0" in out


def test_resume_takes_a_number_an_id_or_a_name(workspace: Path) -> None:
    out = piped_chat(workspace, "remember me\n/new\n/threads\n/quit\n")
    first = out.split("New thread ", 1)[1].split(".", 1)[0]
    # Pick by id at the start-up prompt, then by name prefix and by number.
    out = piped_chat(workspace, f"{first}\n/resume 2\n/resume nosuchname\n/quit\n")
    assert f"({first}, 1 turn(s))" in out
    assert "No thread 'nosuchname'" in out


def test_approval_answers_with_session_scopes() -> None:
    params = {
        "approvalType": "shell",
        "operation": "ls -la",
        "target": "/w",
        "scopeKey": "shell:*",
        "reason": "Run a shell command in .",
        "sessionScopes": [
            {"scope": "exact", "scopeKey": "shell:ls -la", "description": "this command"},
            {"scope": "wider", "scopeKey": "shell:*", "description": "every shell command"},
        ],
    }
    offered = approval.choices(params)
    text = approval.header(params, offered)
    assert "[s]ession: this command" in text and "[w]ider: every shell command" in text
    assert approval.answer(offered, "y") == {"decision": "accept"}
    assert approval.answer(offered, "s") == {"decision": "acceptForSession"}
    wider = {"decision": "acceptForSession", "scope": "wider"}
    assert approval.answer(offered, "S") == wider
    assert approval.answer(offered, "w") == wider
    assert approval.answer(offered, "a") == {"decision": "acceptAlways"}
    assert approval.answer(offered, "n") == {"decision": "decline"}
    assert approval.answer(offered, "c") == {"decision": "cancel"}
    assert approval.answer(offered, "hello\nworld") is None  # a pasted line is no answer
    assert approval.prompt(offered).endswith("[c]ancel turn? ")


def test_approval_without_session_scopes_describes_the_scope_key() -> None:
    params = {"approvalType": "shell", "operation": "ls", "target": "/w", "scopeKey": "shell:*"}
    offered = approval.choices(params)
    text = approval.header(params, offered)
    assert "[s]ession: every shell command in the workspace for this thread" in text
    assert "[w]ider" not in text and approval.answer(offered, "w") is None
    assert approval.answer(offered, "s") == {"decision": "acceptForSession"}


def test_pick_thread_by_number_id_name_or_prefix() -> None:
    from appserver_client.cli import pick_thread

    threads: Any = [
        {"id": "thread_a", "displayName": "Fix the login bug"},
        {"id": "thread_b", "displayName": "Fix the logout bug"},
        {"id": "thread_c", "displayName": "Write docs"},
    ]
    listing = [summary["id"] for summary in threads]
    assert pick_thread("2", listing, threads) == "thread_b"
    assert pick_thread("thread_c", listing, threads) == "thread_c"
    assert pick_thread("write", listing, threads) == "thread_c"  # prefix, any case
    assert pick_thread("fix the LOGIN bug", listing, threads) == "thread_a"
    ambiguous = pick_thread("fix", listing, threads)
    assert isinstance(ambiguous, list) and len(ambiguous) == 2
    assert pick_thread("nothing", listing, threads) == []
