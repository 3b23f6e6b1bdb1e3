"""``appserver host``: the Zene Host Protocol v1 face, driven as clawbridge
drives it (real subprocesses, the offline model).

clawbridge (EeroEternal/clawlink, crates/clawbridge) spawns
``host --protocol v1 --bridge-compat --single-request`` per request, writes one
line with every request field (UUIDv4 ``request_id``, UUIDv5
``idempotency_key`` of ``session|channel|prompt``, ``timeout_ms`` = 90% of its
own timeout), closes stdin, discards stdout unless the exit status is 0, and
accepts a success only with ``ok``, non-empty ``text`` and
``usage.total_tokens > 0``.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import sys
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process

from appserver.storage.lock import WorkspaceLock
from tests.support.fake_models import (
    Reply,
    closed_port,
    fake_model_server,
    openai_chunk,
    openai_error,
    openai_stream,
    openai_text_reply,
)
from tests.support.json_lines import JsonLines
from tests.support.processes import alive, ws_client
from tests.support.servers import child_env, read_listening_url

RESPONSE_KEYS = {
    "ok",
    "request_id",
    "session_id",
    "text",
    "error_code",
    "error_message",
    "usage",
}
ERROR_CODES = {
    "INVALID_REQUEST",
    "TIMEOUT",
    "PROVIDER_AUTH",
    "PROVIDER_RATE_LIMIT",
    "PROVIDER_DOWN",
    "INTERNAL",
}
ONE_SHOT = ("--protocol", "v1", "--bridge-compat", "--single-request")
# clawbridge refuses these as "placeholder text" even with ok=true.
PLACEHOLDERS = {
    "plan completed (or explicit empty plan).",
    "plan completed.",
    "no changes were made.",
}


def env(**extra: str) -> dict[str, str]:
    """The child's environment: offline model, no provider settings inherited (the
    user's directory, APPSERVER_HOME, is the test run's, never ~/.config/appserver)."""
    base = {
        name: value
        for name, value in child_env().items()
        if not name.startswith(("APPSERVER_", "OPENAI_", "ANTHROPIC_", "ZENE_"))
        or name == "APPSERVER_HOME"
    }
    base.update(extra)
    return base


def host_command(workspace: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "appserver", "host", "--workspace", str(workspace), *args]


def clawbridge_request(
    session_id: str = "qq_user_42",
    prompt: Any = "Summarize this issue in one paragraph.",
    channel_id: Any = "qq_group_7",
    timeout_ms: Any = 162000,
    **overrides: Any,
) -> dict[str, Any]:
    """The request as clawbridge builds it (``encode_command_request``)."""
    request = {
        "protocol_version": 1,
        "type": "run",
        "request_id": str(uuid.uuid4()),
        "session_id": session_id,
        "channel_id": channel_id,
        "agent": "default",
        "prompt": prompt,
        "timeout_ms": timeout_ms,
        "idempotency_key": str(
            uuid.uuid5(uuid.NAMESPACE_URL, f"{session_id}|{channel_id}|{prompt}")
        ),
    }
    request.update(overrides)
    return request


def line(request: dict[str, Any]) -> bytes:
    """One line as clawbridge writes it: serde_json's compact form, keys sorted
    (its ``json!`` map is a BTreeMap), then a newline and EOF."""
    return (json.dumps(request, sort_keys=True, separators=(",", ":")) + "\n").encode()


def check_response(message: Any) -> dict[str, Any]:
    """One response object of the protocol, field by field (the schema snapshot)."""
    assert isinstance(message, dict), message
    assert set(message) - {"replayed"} == RESPONSE_KEYS, message
    assert isinstance(message["ok"], bool)
    assert isinstance(message["request_id"], str) and isinstance(message["session_id"], str)
    assert isinstance(message["text"], str)
    usage = message["usage"]
    assert set(usage) == {"prompt_tokens", "completion_tokens", "total_tokens"}
    assert all(type(value) is int and value >= 0 for value in usage.values())
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    if message["ok"]:
        assert message["error_code"] is None and message["error_message"] is None
    else:
        assert message["error_code"] in ERROR_CODES
        assert isinstance(message["error_message"], str) and message["error_message"]
        assert message["text"] == ""
    if "replayed" in message:
        assert message["replayed"] is True
    return message


def parse_stdout(stdout: bytes) -> list[dict[str, Any]]:
    """Every stdout line is one response object (nothing else, ever)."""
    assert stdout == b"" or stdout.endswith(b"\n"), stdout
    return [check_response(json.loads(raw)) for raw in stdout.decode().splitlines()]


def check_line(raw: bytes) -> dict[str, Any]:
    """One stdout line (without its newline): one response object."""
    return parse_stdout(raw + b"\n")[0]


def accepted_by_clawbridge(code: int, responses: list[dict[str, Any]]) -> bool:
    """clawbridge's decode rules for a zene-host-v1 success."""
    if code != 0 or not responses:
        return False
    first = responses[0]
    text = first["text"].strip()
    return (
        first["ok"] is True
        and bool(text)
        and text.lower() not in PLACEHOLDERS
        and first["usage"]["total_tokens"] > 0
    )


async def one_shot(
    workspace: Path,
    stdin: bytes,
    *args: str,
    environment: dict[str, str] | None = None,
    timeout: float = 30,
) -> tuple[int, list[dict[str, Any]], str]:
    """Run one process to its end: (exit code, responses, stderr)."""
    with anyio.fail_after(timeout):
        done = await anyio.run_process(
            host_command(workspace, *(args or ONE_SHOT)),
            input=stdin,
            check=False,
            env=environment or env(),
        )
    return done.returncode, parse_stdout(done.stdout), done.stderr.decode(errors="replace")


def database(workspace: Path) -> sqlite3.Connection:
    return sqlite3.connect(workspace / ".craft" / "appserver.db")


def session_turns(workspace: Path, session_id: str) -> list[tuple[str, str]]:
    """(turn id, status) of the session's thread, in order."""
    with database(workspace) as db:
        row = db.execute(
            "SELECT thread_id FROM face_sessions WHERE face = 'zene' AND key = ?", (session_id,)
        ).fetchone()
        assert row is not None, f"no thread for session {session_id}"
        return [
            (str(turn_id), str(status))
            for turn_id, status in db.execute(
                "SELECT id, status FROM turns WHERE thread_id = ? ORDER BY seq", (row[0],)
            )
        ]


class LongLived:
    """A host process without --single-request: requests in, responses out."""

    def __init__(self, process: Process) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.process = process
        self.lines = JsonLines(process.stdout.receive, check_line, timeout=15)

    async def send(self, data: bytes) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(data)

    async def receive(self, timeout: float = 15) -> dict[str, Any]:
        return await self.lines.next(timeout)

    async def finish(self, timeout: float = 15) -> int:
        """Close stdin; the process answers what it has and exits."""
        assert self.process.stdin is not None
        await self.process.stdin.aclose()
        with anyio.fail_after(timeout):
            left = await self.lines.rest()
            assert left == [], "unexpected output after the last response"
            return await self.process.wait()


async def open_long_lived(workspace: Path, *args: str) -> Process:
    return await anyio.open_process(
        host_command(workspace, "--protocol", "v1", "--bridge-compat", *args), env=env()
    )


# --- clawbridge's one-shot request --------------------------------------------------------


async def test_clawbridge_request_is_answered_and_accepted(workspace: Path) -> None:
    request = clawbridge_request()
    code, responses, _ = await one_shot(workspace, line(request))
    assert code == 0
    assert len(responses) == 1
    answer = responses[0]
    assert answer["request_id"] == request["request_id"]
    assert answer["session_id"] == "qq_user_42"
    assert answer["text"] == "You said: Summarize this issue in one paragraph."
    assert "replayed" not in answer
    assert answer["usage"]["prompt_tokens"] > 0 and answer["usage"]["completion_tokens"] > 0
    assert accepted_by_clawbridge(code, responses)
    # The session is an ordinary thread of the workspace, named by the face.
    assert [status for _, status in session_turns(workspace, "qq_user_42")] == ["completed"]
    with database(workspace) as db:
        origin, user, context = db.execute(
            "SELECT origin_channel, user_id, channel_context FROM threads"
        ).fetchone()
    assert (origin, user, context) == ("zene", "qq_user_42", "qq_group_7")


async def test_a_folded_system_prompt_is_part_of_the_prompt(workspace: Path) -> None:
    """clawbridge folds a system prompt into ``prompt``; it reaches the model as is."""
    prompt = "System instruction:\nbe brief\n\nUser message:\nhello"
    code, responses, _ = await one_shot(workspace, line(clawbridge_request(prompt=prompt)))
    assert accepted_by_clawbridge(code, responses)
    assert responses[0]["text"] == "You said: System instruction: be brief User message: hello"


async def test_request_without_optional_fields_and_with_unknown_ones(workspace: Path) -> None:
    minimal = {"request_id": "req_1", "session_id": "s", "prompt": "hi", "extra": {"x": 1}}
    code, responses, _ = await one_shot(workspace, line(minimal))
    assert code == 0 and accepted_by_clawbridge(code, responses)
    assert responses[0]["request_id"] == "req_1" and responses[0]["text"] == "You said: hi"


async def test_single_request_accepts_an_explicit_value(workspace: Path) -> None:
    """``--single-request true`` answers one line and exits; ``false`` (as
    clawbridge's recovery script passes it) serves every line."""
    two = line(clawbridge_request("a", "one")) + line(clawbridge_request("b", "two"))
    args = ("--protocol", "v1", "--bridge-compat", "--single-request")
    code, responses, _ = await one_shot(workspace, two, *args, "true")
    assert code == 0 and [r["text"] for r in responses] == ["You said: one"]
    code, responses, _ = await one_shot(workspace, two, *args, "false")
    assert code == 0 and sorted(r["text"] for r in responses) == ["You said: one", "You said: two"]
    code, responses, _ = await one_shot(workspace, two, "--protocol", "v1", "--bridge-compat")
    assert code == 0 and len(responses) == 2


async def test_help_lists_the_face_flags(workspace: Path) -> None:
    done = await anyio.run_process([sys.executable, "-m", "appserver", "host", "--help"], env=env())
    text = done.stdout.decode()
    for flag in ("--bridge-compat", "--single-request", "--max-input-bytes", "--stdin-timeout-ms"):
        assert flag in text


# --- invalid input -------------------------------------------------------------------


def _without(name: str) -> bytes:
    request = clawbridge_request(request_id="req_bad")
    del request[name]
    return line(request)


INVALID_LINES = {
    "missing request_id": _without("request_id"),
    "missing session_id": _without("session_id"),
    "missing prompt": _without("prompt"),
    "blank request_id": line(clawbridge_request(request_id="   ")),
    "blank session_id": line(clawbridge_request(session_id=" \t ", request_id="req_bad")),
    "blank prompt": line(clawbridge_request(prompt="\n  ", request_id="req_bad")),
    "prompt not a string": line(clawbridge_request(prompt=42, request_id="req_bad")),
    "null prompt": line(clawbridge_request(prompt=None, request_id="req_bad")),
    "protocol_version 2": line(clawbridge_request(protocol_version=2, request_id="req_bad")),
    "protocol_version '1'": line(clawbridge_request(protocol_version="1", request_id="req_bad")),
    "protocol_version true": line(clawbridge_request(protocol_version=True, request_id="req_bad")),
    "type ping": line(clawbridge_request(type="ping", request_id="req_bad")),
    "timeout_ms negative": line(clawbridge_request(timeout_ms=-5, request_id="req_bad")),
    "timeout_ms string": line(clawbridge_request(timeout_ms="30000", request_id="req_bad")),
    "channel_id not a string": line(clawbridge_request(channel_id=7, request_id="req_bad")),
    "unparsable JSON": b'{"request_id": "req_bad", "prompt": \n',
    "truncated JSON": line(clawbridge_request())[:40] + b"\n",
    "JSON array": b"[1, 2]\n",
    "JSON string": b'"run"\n',
    "NaN timeout": b'{"request_id":"req_bad","session_id":"s","prompt":"p","timeout_ms":NaN}\n',
    "invalid UTF-8": b'{"request_id":"\xff\xfe","session_id":"s","prompt":"p"}\n',
    "over --max-input-bytes": line(clawbridge_request(prompt="x" * 5000)),
    "over --max-input-bytes, no newline": line(clawbridge_request(prompt="y" * 5000))[:-1],
}


@pytest.mark.parametrize("case", list(INVALID_LINES))
async def test_invalid_requests_are_answered_invalid_request(workspace: Path, case: str) -> None:
    code, responses, _ = await one_shot(
        workspace, INVALID_LINES[case], *ONE_SHOT, "--max-input-bytes", "4096"
    )
    assert code == 0  # --bridge-compat: a written response always exits 0
    assert len(responses) == 1
    answer = responses[0]
    assert answer["ok"] is False and answer["error_code"] == "INVALID_REQUEST", answer
    fields = ("missing", "blank", "prompt", "null", "protocol", "type", "timeout", "channel")
    if case.startswith(fields) and "request_id" not in case:
        assert answer["request_id"] == "req_bad"  # echoed when it could be read
    assert not (workspace / ".craft").exists()  # refused before the workspace is touched


async def test_without_bridge_compat_an_invalid_request_exits_2(workspace: Path) -> None:
    code, responses, _ = await one_shot(
        workspace, b"not json\n", "--protocol", "v1", "--single-request"
    )
    assert code == 2
    assert [r["error_code"] for r in responses] == ["INVALID_REQUEST"]


@pytest.mark.parametrize("stdin", [b"", b"\n\n  \n"], ids=["empty", "blank lines"])
async def test_no_request_exits_2_with_nothing_on_stdout(workspace: Path, stdin: bytes) -> None:
    code, responses, stderr = await one_shot(workspace, stdin)
    assert (code, responses) == (2, [])
    assert "no request" in stderr


async def test_stdin_timeout_exits_2_with_nothing_on_stdout(workspace: Path) -> None:
    process = await anyio.open_process(
        host_command(workspace, *ONE_SHOT, "--stdin-timeout-ms", "300"), env=env()
    )
    async with process:
        assert process.stdout is not None
        with anyio.fail_after(15):
            code = await process.wait()
            output = b"".join([chunk async for chunk in process.stdout])
    assert (code, output) == (2, b"")


async def test_long_lived_mode_answers_bad_lines_and_goes_on(workspace: Path) -> None:
    async with await open_long_lived(workspace) as process:
        host = LongLived(process)
        await host.send(b"{oops\n" + line(clawbridge_request(prompt="still here")))
        assert (await host.receive())["error_code"] == "INVALID_REQUEST"
        assert (await host.receive())["text"] == "You said: still here"
        assert await host.finish() == 0


# --- errors of the model provider, timeouts --------------------------------------------


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("auth", "PROVIDER_AUTH"),
        ("rate_limit", "PROVIDER_RATE_LIMIT"),
        ("unavailable", "PROVIDER_DOWN"),
        ("timeout", "PROVIDER_DOWN"),
        ("other", "INTERNAL"),
    ],
)
async def test_provider_errors_map_to_error_codes(
    workspace: Path, kind: str, expected: str
) -> None:
    request = clawbridge_request(prompt=f"?fail {kind}")
    code, responses, _ = await one_shot(workspace, line(request))
    assert code == 0
    assert len(responses) == 1
    answer = responses[0]
    assert (answer["ok"], answer["error_code"]) == (False, expected)
    assert answer["request_id"] == request["request_id"] and answer["text"] == ""
    assert kind in answer["error_message"]
    assert not accepted_by_clawbridge(code, responses)


CHAT = "POST /v1/chat/completions"


def openai_args(base_url: str) -> tuple[str, ...]:
    return (*ONE_SHOT, "--provider", "openai", "--base-url", base_url, "--api-key", "sk-test")


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (openai_error(401, "bad key", type_="invalid_request_error"), "PROVIDER_AUTH"),
        (openai_error(403, "forbidden", type_="permission_error"), "PROVIDER_AUTH"),
        (openai_error(429, "slow down", type_="rate_limit_exceeded"), "PROVIDER_RATE_LIMIT"),
        (openai_error(500, "boom", type_="server_error"), "PROVIDER_DOWN"),
        (openai_error(503, "overloaded", type_="server_error"), "PROVIDER_DOWN"),
        (openai_error(400, "bad request", type_="invalid_request_error"), "INTERNAL"),
    ],
    ids=["401", "403", "429", "500", "503", "400"],
)
async def test_real_provider_http_errors_map_to_error_codes(
    workspace: Path, reply: Reply, expected: str
) -> None:
    """The OpenAI provider against a scripted HTTP server: status -> error code."""
    async with fake_model_server() as fake:
        fake.script(CHAT, reply)
        code, responses, _ = await one_shot(
            workspace,
            line(clawbridge_request()),
            *openai_args(fake.openai_base_url),
            environment=env(APPSERVER_MAX_RETRIES="0"),
        )
    assert code == 0
    assert responses[0]["error_code"] == expected
    assert f"HTTP {reply.status}" in responses[0]["error_message"]


async def test_real_provider_connection_refused_is_provider_down(workspace: Path) -> None:
    code, responses, _ = await one_shot(
        workspace,
        line(clawbridge_request()),
        *openai_args(f"http://127.0.0.1:{closed_port()}/v1"),
        environment=env(APPSERVER_MAX_RETRIES="0"),
    )
    assert code == 0 and responses[0]["error_code"] == "PROVIDER_DOWN"


async def test_real_provider_success_reports_its_usage(workspace: Path) -> None:
    async with fake_model_server() as fake:
        fake.script(CHAT, openai_text_reply(["Hello ", "from ", "the model."], usage=(120, 86)))
        code, responses, _ = await one_shot(
            workspace, line(clawbridge_request()), *openai_args(fake.openai_base_url)
        )
    assert accepted_by_clawbridge(code, responses)
    assert responses[0]["text"] == "Hello from the model."
    assert responses[0]["usage"] == {
        "prompt_tokens": 120,
        "completion_tokens": 86,
        "total_tokens": 206,
    }


async def test_a_provider_without_usage_gets_an_estimate(workspace: Path) -> None:
    """Some OpenAI-compatible servers report no usage; clawbridge would refuse a
    zero-token success as suspicious, so the face estimates (~4 chars a token)."""
    chunks = [
        openai_chunk({"role": "assistant", "content": ""}),
        openai_chunk({"content": "An answer without usage."}),
        openai_chunk({}, finish_reason="stop"),
    ]
    async with fake_model_server() as fake:
        fake.script(CHAT, openai_stream(chunks))
        code, responses, _ = await one_shot(
            workspace, line(clawbridge_request()), *openai_args(fake.openai_base_url)
        )
    assert accepted_by_clawbridge(code, responses)
    usage = responses[0]["usage"]
    assert usage["completion_tokens"] == -(-len("An answer without usage.") // 4)  # ceil
    assert usage["prompt_tokens"] > 0


async def test_a_turn_without_text_is_not_a_success(workspace: Path) -> None:
    """An empty answer would be refused by clawbridge as suspicious: INTERNAL."""
    code, responses, _ = await one_shot(workspace, line(clawbridge_request(prompt="?stream 0")))
    assert code == 0
    assert (responses[0]["error_code"], responses[0]["error_message"]) == (
        "INTERNAL",
        "empty response",
    )


async def test_timeout_interrupts_the_turn_with_one_timeout_response(workspace: Path) -> None:
    request = clawbridge_request(prompt="?stream 1000\n?delay 20", timeout_ms=600)
    started = anyio.current_time()
    code, responses, _ = await one_shot(workspace, line(request))
    elapsed = anyio.current_time() - started
    assert code == 0
    assert len(responses) == 1
    assert responses[0]["error_code"] == "TIMEOUT" and responses[0]["ok"] is False
    assert responses[0]["request_id"] == request["request_id"]
    assert elapsed < 15  # the 20 s stream was cut short
    assert [status for _, status in session_turns(workspace, "qq_user_42")] == ["cancelled"]


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads the process table in /proc")
async def test_timeout_kills_a_running_command(workspace: Path) -> None:
    """In a long-lived process (which outlives the request) the interrupted
    turn's command is killed by the time TIMEOUT is written; the session then
    goes on."""
    async with await open_long_lived(workspace, "--approval-policy", "autoApprove") as process:
        host = LongLived(process)
        slow = clawbridge_request(prompt="!echo $$ > shell.pid; exec sleep 30", timeout_ms=2500)
        await host.send(line(slow))
        answer = await host.receive()
        assert (answer["error_code"], answer["request_id"]) == ("TIMEOUT", slow["request_id"])
        pid = int((workspace / "shell.pid").read_text())
        with anyio.fail_after(5):
            while alive(pid):
                await anyio.sleep(0.02)  # another process's fate: poll, bounded
        await host.send(line(clawbridge_request(prompt="after the timeout")))
        assert (await host.receive())["text"] == "You said: after the timeout"
        assert await host.finish() == 0
    assert [status for _, status in session_turns(workspace, "qq_user_42")] == [
        "cancelled",
        "completed",
    ]


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads the process table in /proc")
async def test_one_shot_timeout_leaves_no_command_running(workspace: Path) -> None:
    # The deadline counts from the spawn: room for a loaded machine's start (a
    # cold one-shot's imports) before the command runs, and well short of its 30 s.
    request = clawbridge_request(prompt="!echo $$ > shell.pid; exec sleep 30", timeout_ms=6000)
    code, responses, _ = await one_shot(
        workspace, line(request), *ONE_SHOT, "--approval-policy", "autoApprove"
    )
    assert code == 0 and [r["error_code"] for r in responses] == ["TIMEOUT"]
    pid = int((workspace / "shell.pid").read_text())
    assert not alive(pid)  # killed with its turn, before the response was written


async def test_workspace_held_past_the_deadline_is_a_timeout(workspace: Path) -> None:
    lock = WorkspaceLock(workspace / ".craft" / "appserver.lock")
    lock.acquire({})
    try:
        request = clawbridge_request(timeout_ms=500)
        code, responses, _ = await one_shot(workspace, line(request))
    finally:
        lock.release()
    assert code == 0
    assert responses[0]["error_code"] == "TIMEOUT"
    assert "workspace" in responses[0]["error_message"]


# --- configuration and runtime failures ---------------------------------------------------


async def test_provider_configuration_failure_is_answered_and_exits_3(workspace: Path) -> None:
    request = clawbridge_request()
    code, responses, stderr = await one_shot(
        workspace, line(request), *ONE_SHOT, "--provider", "openai"
    )
    assert code == 3
    assert len(responses) == 1
    answer = responses[0]
    assert (answer["ok"], answer["error_code"]) == (False, "INTERNAL")
    assert answer["request_id"] == request["request_id"]
    assert "API key" in answer["error_message"] and "API key" in stderr
    assert not (workspace / ".craft" / "appserver.db").exists()


async def test_long_lived_configuration_failure_answers_the_first_request(
    workspace: Path,
) -> None:
    request = clawbridge_request()
    code, responses, _ = await one_shot(
        workspace, line(request), "--protocol", "v1", "--bridge-compat", "--provider", "openai"
    )
    assert code == 3
    assert [(r["request_id"], r["error_code"]) for r in responses] == [
        (request["request_id"], "INTERNAL")
    ]


async def test_a_runtime_that_cannot_open_is_answered_and_exits_4(workspace: Path) -> None:
    (workspace / ".craft" / "appserver.db").mkdir(parents=True)  # not a database
    request = clawbridge_request()
    code, responses, _ = await one_shot(workspace, line(request))
    assert code == 4
    assert [(r["request_id"], r["error_code"]) for r in responses] == [
        (request["request_id"], "INTERNAL")
    ]


async def test_a_websocket_address_in_use_is_answered_and_exits_4(workspace: Path) -> None:
    """Long-lived mode opens the runtime first; when that fails the first
    request that arrives is answered with the reason."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        request = clawbridge_request()
        code, responses, _ = await one_shot(
            workspace,
            line(request),
            "--protocol",
            "v1",
            "--bridge-compat",
            "--websocket",
            f"ws://127.0.0.1:{port}",
        )
    assert code == 4
    assert [(r["request_id"], r["error_code"]) for r in responses] == [
        (request["request_id"], "INTERNAL")
    ]
    assert "address already in use" in responses[0]["error_message"]


async def test_stdout_carries_responses_only(workspace: Path) -> None:
    """A tool command's output and debug logs never reach stdout."""
    request = clawbridge_request(prompt="!echo leaked-to-stdout; echo and-stderr >&2")
    code, responses, stderr = await one_shot(
        workspace,
        line(request),
        *ONE_SHOT,
        "--approval-policy",
        "autoApprove",
        "--log-level",
        "debug",
    )
    assert code == 0
    assert len(responses) == 1  # parse_stdout checked every line
    assert responses[0]["text"] == "The command exited with code 0."
    assert "DEBUG" in stderr


async def test_gated_tool_call_is_declined_under_the_default_policy(workspace: Path) -> None:
    """No approval frames: nobody can answer, so the call is declined at once."""
    request = clawbridge_request(prompt="!touch approved.txt")
    code, responses, _ = await one_shot(
        workspace, line(request), *ONE_SHOT, "--approval-policy", "default"
    )
    assert code == 0 and responses[0]["text"] == "The shell call was declined."
    assert not (workspace / "approved.txt").exists()


# --- sessions, idempotency, concurrency -----------------------------------------------------


async def test_a_session_continues_across_processes(workspace: Path) -> None:
    first = clawbridge_request(prompt="remember the word anchovy")
    second = clawbridge_request(prompt="what was the word?")
    _, [one], _ = await one_shot(workspace, line(first))
    _, [two], _ = await one_shot(workspace, line(second))
    assert one["ok"] and two["ok"]
    # The second turn's model call carried the first turn as history.
    assert two["usage"]["prompt_tokens"] > one["usage"]["total_tokens"]
    assert [status for _, status in session_turns(workspace, "qq_user_42")] == [
        "completed",
        "completed",
    ]
    # Another session is another thread, with no history.
    _, [other], _ = await one_shot(workspace, line(clawbridge_request("someone_else", "hi")))
    assert other["usage"]["prompt_tokens"] < one["usage"]["prompt_tokens"]
    with database(workspace) as db:
        assert db.execute("SELECT count(*) FROM threads").fetchone()[0] == 2


async def test_an_idempotent_retry_replays_the_stored_response(workspace: Path) -> None:
    first = clawbridge_request()
    retry = {**first, "request_id": str(uuid.uuid4())}  # what a clawbridge retry sends
    _, [original], _ = await one_shot(workspace, line(first))
    code, [replay], _ = await one_shot(workspace, line(retry))
    assert code == 0 and accepted_by_clawbridge(code, [replay])
    assert replay["replayed"] is True and replay["request_id"] == retry["request_id"]
    assert {k: v for k, v in replay.items() if k not in ("replayed", "request_id")} == {
        k: v for k, v in original.items() if k != "request_id"
    }
    assert len(session_turns(workspace, "qq_user_42")) == 1  # not run again
    # The same key in another session is another request.
    _, [elsewhere], _ = await one_shot(workspace, line({**first, "session_id": "other"}))
    assert "replayed" not in elsewhere


async def test_idempotent_replay_within_one_long_lived_process(workspace: Path) -> None:
    request = clawbridge_request()
    async with await open_long_lived(workspace) as process:
        host = LongLived(process)
        await host.send(line(request) + line({**request, "request_id": "retry"}))
        original, replay = await host.receive(), await host.receive()
        assert "replayed" not in original
        assert replay["replayed"] is True and replay["request_id"] == "retry"
        assert replay["text"] == original["text"]
        assert await host.finish() == 0
    assert len(session_turns(workspace, "qq_user_42")) == 1


async def test_expired_and_failed_replies_are_not_replayed(workspace: Path) -> None:
    """The key is derived from the text: after the TTL the same message is a new
    one. Failures are never stored, so a retry of one runs again."""
    request = clawbridge_request()
    await one_shot(workspace, line(request))
    with database(workspace) as db:
        db.execute("UPDATE face_replies SET created_at = '2000-01-01T00:00:00.000Z'")
    code, [again], _ = await one_shot(workspace, line(request))
    assert code == 0 and again["ok"] and "replayed" not in again
    assert len(session_turns(workspace, "qq_user_42")) == 2
    with database(workspace) as db:  # the stale reply was pruned, the new one kept
        dates = [row[0] for row in db.execute("SELECT created_at FROM face_replies")]
    assert len(dates) == 1 and not dates[0].startswith("2000")

    failing = clawbridge_request("flaky", prompt="?fail unavailable")
    await one_shot(workspace, line(failing))
    _, [retried], _ = await one_shot(workspace, line(failing))
    assert retried["error_code"] == "PROVIDER_DOWN" and "replayed" not in retried
    assert len(session_turns(workspace, "flaky")) == 2

    # --idempotency-ttl-sec 0 turns replays off.
    code, [fresh], _ = await one_shot(
        workspace, line(request), *ONE_SHOT, "--idempotency-ttl-sec", "0"
    )
    assert "replayed" not in fresh and len(session_turns(workspace, "qq_user_42")) == 3


async def test_racing_processes_on_one_session_take_turns(workspace: Path) -> None:
    """Two one-shot processes at once on one session: the second waits for the
    workspace, both answer, and the thread holds both turns."""
    prompts = ["?stream 5\n?delay 80\nfirst", "?stream 5\n?delay 80\nsecond"]
    results: list[tuple[int, list[dict[str, Any]], str]] = []

    async def run(prompt: str) -> None:
        results.append(await one_shot(workspace, line(clawbridge_request(prompt=prompt))))

    async with anyio.create_task_group() as tg:
        for prompt in prompts:
            tg.start_soon(run, prompt)
    assert [code for code, _, _ in results] == [0, 0]
    assert all(accepted_by_clawbridge(code, responses) for code, responses, _ in results)
    assert [status for _, status in session_turns(workspace, "qq_user_42")] == [
        "completed",
        "completed",
    ]
    with database(workspace) as db:
        assert db.execute("SELECT count(*) FROM threads").fetchone()[0] == 1
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


async def test_long_lived_mode_serves_sessions_concurrently_and_each_in_order(
    workspace: Path,
) -> None:
    slow_a = clawbridge_request("a", prompt="?stream 8\n?delay 100", request_id="a1")
    fast_a = clawbridge_request("a", prompt="then this", request_id="a2")
    fast_b = clawbridge_request("b", prompt="meanwhile", request_id="b1")
    fast_c = clawbridge_request("c", prompt="and this", request_id="c1")
    async with await open_long_lived(workspace, "--single-request", "false") as process:
        host = LongLived(process)
        await host.send(line(slow_a) + line(fast_a) + line(fast_b) + line(fast_c))
        order = [(await host.receive())["request_id"] for _ in range(4)]
        assert await host.finish() == 0
    # b and c did not wait for a's slow turn; a's second request waited for its first.
    assert order.index("b1") < order.index("a1") and order.index("c1") < order.index("a1")
    assert order.index("a1") < order.index("a2")
    assert [status for _, status in session_turns(workspace, "a")] == ["completed", "completed"]


async def test_waiting_behind_the_session_counts_towards_timeout_ms(workspace: Path) -> None:
    """A request queued behind a slow one of its session times out on its own
    clock, not after the slow one ends; the next one still keeps the order."""
    slow = clawbridge_request("a", prompt="?stream 40\n?delay 100", request_id="a1")
    queued = {**clawbridge_request("a", prompt="short", request_id="a2"), "timeout_ms": 300}
    after = clawbridge_request("a", prompt="later", request_id="a3")
    async with await open_long_lived(workspace, "--single-request", "false") as process:
        host = LongLived(process)
        await host.send(line(slow) + line(queued) + line(after))
        first = await host.receive()
        assert (first["request_id"], first["error_code"]) == ("a2", "TIMEOUT")
        rest = [await host.receive() for _ in range(2)]
        assert [r["request_id"] for r in rest] == ["a1", "a3"]
        assert all(r["ok"] for r in rest)
        assert await host.finish() == 0


async def test_lone_surrogates_are_invalid_requests(workspace: Path) -> None:
    async with await open_long_lived(workspace, "--single-request", "false") as process:
        host = LongLived(process)
        await host.send(
            b'{"request_id":"x","session_id":"s","prompt":"\\ud800"}\n'
            b'{"request_id":"y","session_id":"\\udfff","prompt":"hi"}\n'
            + line(clawbridge_request(prompt="fine"))
        )
        for _ in range(2):
            assert (await host.receive())["error_code"] == "INVALID_REQUEST"
        assert (await host.receive())["text"] == "You said: fine"
        assert await host.finish() == 0


async def test_a_one_shot_process_answers_beside_a_long_lived_one(workspace: Path) -> None:
    """Issue 28: a long-lived process no longer keeps one-shot processes out of
    the workspace (they used to wait their timeout out and answer TIMEOUT)."""
    async with await open_long_lived(workspace) as process:
        host = LongLived(process)
        await host.send(line(clawbridge_request("warm")))
        assert (await host.receive())["ok"]
        request = clawbridge_request(prompt="beside it", timeout_ms=20000)
        code, responses, _ = await one_shot(workspace, line(request))
        assert code == 0 and responses[0]["ok"], responses
        assert responses[0]["text"] == "You said: beside it"
        assert await host.finish() == 0


# --- the same threads over JSON-RPC -------------------------------------------------------


async def test_a_websocket_client_watches_the_session_thread(workspace: Path) -> None:
    process = await open_long_lived(workspace, "--websocket", "ws://127.0.0.1:0")
    async with process:
        host = LongLived(process)
        url = await read_listening_url(process)
        await host.send(line(clawbridge_request(prompt="first")))
        assert (await host.receive())["ok"]
        async with ws_client(url, "watcher") as client:
            identity = {
                "channelName": "zene",
                "userId": "qq_user_42",
                "channelContext": "qq_group_7",
            }
            listed = await client.request("thread/list", {"identity": identity})
            assert len(listed["data"]) == 1
            thread_id = listed["data"][0]["id"]
            assert listed["data"][0]["originChannel"] == "zene"
            await client.request("thread/subscribe", {"threadId": thread_id})
            mark = client.mark()
            await host.send(line(clawbridge_request(prompt="?stream 4")))
            answer = await host.receive()
            completed = await client.wait(lambda m: m.get("method") == "turn/completed", start=mark)
            turn_id = completed["params"]["turn"]["id"]
            deltas = [
                m["params"]["delta"]
                for m in client.since(mark, "item/agentMessage/delta")
                if m["params"]["turnId"] == turn_id
            ]
            assert "".join(deltas) == answer["text"] == "chunk 1 chunk 2 chunk 3 chunk 4 "
            read = await client.request(
                "thread/read", {"threadId": thread_id, "includeTurns": True}
            )
            assert [t["status"] for t in read["thread"]["turns"]] == ["completed", "completed"]
        assert await host.finish() == 0


async def test_paused_archived_and_deleted_session_threads(workspace: Path) -> None:
    """A paused session thread is resumed; an archived or deleted one is
    replaced by a new thread for the session."""
    process = await open_long_lived(workspace, "--websocket", "ws://127.0.0.1:0")
    async with process:
        host = LongLived(process)
        url = await read_listening_url(process)

        async def ask(prompt: str) -> dict[str, Any]:
            await host.send(line(clawbridge_request(prompt=prompt)))
            return await host.receive()

        def thread_of_session() -> str:
            with database(workspace) as db:
                row = db.execute("SELECT thread_id FROM face_sessions WHERE key = 'qq_user_42'")
                return str(row.fetchone()[0])

        assert (await ask("one"))["ok"]
        first = thread_of_session()
        async with ws_client(url, "admin") as client:
            await client.request("thread/pause", {"threadId": first})
            assert (await ask("two"))["ok"]
            assert thread_of_session() == first
            read = await client.request("thread/read", {"threadId": first})
            assert read["thread"]["status"] == "active"

            await client.request("thread/archive", {"threadId": first})
            assert (await ask("three"))["ok"]
            second = thread_of_session()
            assert second != first

            await client.request("thread/delete", {"threadId": second})
            answer = await ask("four")
            assert answer["ok"] and answer["text"] == "You said: four"
            assert thread_of_session() not in (first, second)
        assert await host.finish() == 0
    assert [status for _, status in session_turns(workspace, "qq_user_42")] == ["completed"]


async def test_a_long_answer_reaches_a_client_that_reads_late(workspace: Path) -> None:
    """The process waits, as it exits, until its last answer is read: a 300 KB
    answer arrives whole though the client starts reading after a while."""
    prompt = "z" * 300_000
    command = host_command(workspace, *ONE_SHOT)
    async with await anyio.open_process(command, env=env()) as process:
        assert process.stdin is not None and process.stdout is not None
        await process.stdin.send(line(clawbridge_request(prompt=prompt)))
        await process.stdin.aclose()
        await anyio.sleep(1)  # the scenario: the client reads late (not a wait)
        received = bytearray()
        with anyio.fail_after(60):
            async for chunk in process.stdout:
                received += chunk
            code = await process.wait()
    assert code == 0
    (answer,) = parse_stdout(bytes(received))
    assert answer["text"] == f"You said: {prompt}"
