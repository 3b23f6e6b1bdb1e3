"""``appserver router``: the Codeswarm router protocol ``codeswarm.router.v1``.

Real subprocesses over stdio and TCP. Every line the router writes is
parsed and validated against ``schema/faces/codeswarm.router.v1.schema.json``
(Draft 2020-12, with a date-time format checker), and every valid command
the tests send is validated against it too.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process, SocketStream
from jsonschema import Draft202012Validator, FormatChecker
from referencing import Registry, Resource

from appserver.cli import main as cli_main
from appserver.faces.codeswarm.wire import COMMANDS, EVENTS, event_frame
from tests.support.helpers import IDENTITY
from tests.support.json_lines import JsonLines
from tests.support.processes import ws_client
from tests.support.servers import child_env

REPO = Path(__file__).resolve().parents[3]
SCHEMA = json.loads((REPO / "schema" / "faces" / "codeswarm.router.v1.schema.json").read_text())
PROTOCOL = "codeswarm.router.v1"
TIMEOUT = 20
FORMATS = FormatChecker()
_RFC3339 = re.compile(
    r"(\d{4}-\d{2}-\d{2})[Tt](\d{2}:\d{2}:\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})", re.ASCII
)


@FORMATS.checks("date-time", raises=ValueError)
def _date_time(value: object) -> bool:
    """RFC 3339 date-time (jsonschema needs an extra package for this one)."""
    if not isinstance(value, str):
        return True
    match = _RFC3339.fullmatch(value)
    if match is None:
        return False
    datetime.strptime(f"{match[1]}T{match[2]}", "%Y-%m-%dT%H:%M:%S")  # ranges
    return True


def _validator(name: str) -> Draft202012Validator:
    registry: Registry[Any] = Registry().with_resource(
        SCHEMA["$id"], Resource.from_contents(SCHEMA)
    )
    return Draft202012Validator(
        {"$ref": f"{SCHEMA['$id']}#/$defs/{name}"}, registry=registry, format_checker=FORMATS
    )


EVENT = _validator("event")
COMMAND = _validator("command")


def check_event(line: bytes) -> dict[str, Any]:
    """One line the router wrote: a single JSON object, an event of the schema."""
    message = json.loads(line)
    assert isinstance(message, dict), line
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in EVENT.iter_errors(message)]
    assert not errors, (errors, message)
    return message


def command(name: str, payload: Any = None, request_id: str | None = None, **fields: Any) -> Any:
    """A command envelope (valid unless ``fields`` break it)."""
    message: dict[str, Any] = {
        "protocol": PROTOCOL,
        "type": "command",
        "timestamp": "2026-02-25T15:00:00Z",
        "command": name,
        "request_id": request_id or f"req-{uuid.uuid4().hex[:8]}",
    }
    if payload is not None:
        message["payload"] = payload
    message.update(fields)
    return message


def inject(job_id: str, node_id: int, content: str, request_id: str | None = None) -> Any:
    return command("inject", {"job_id": job_id, "node_id": node_id, "content": content}, request_id)


# --- reading frames -------------------------------------------------------------------------------


def event_lines(receive: Callable[[], Awaitable[bytes]]) -> JsonLines:
    """The router's events from one byte stream, each checked on arrival."""
    return JsonLines(receive, check_event, TIMEOUT, wait_timeout=TIMEOUT)


def is_event(name: str, **data: Any) -> Callable[[dict[str, Any]], bool]:
    return lambda e: e["event"] == name and all(e["data"].get(k) == v for k, v in data.items())


def names(events: list[dict[str, Any]]) -> list[str]:
    return [event["event"] for event in events]


# --- the router process ---------------------------------------------------------------------------


class RouterProcess:
    def __init__(self, process: Process) -> None:
        self.process = process
        assert process.stdout is not None
        self.frames = event_lines(process.stdout.receive)
        self.stderr = b""
        self._stderr_changed = anyio.Event()

    async def send(self, message: Any) -> None:
        """Send a valid command (checked against the schema first)."""
        errors = [e.message for e in COMMAND.iter_errors(message)]
        assert not errors, (errors, message)
        await self.send_raw(json.dumps(message).encode() + b"\n")

    async def send_raw(self, data: bytes) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(data)

    async def close_stdin(self) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.aclose()

    async def exit_code(self) -> int:
        with anyio.fail_after(TIMEOUT):
            return await self.process.wait()

    async def read_stderr(self) -> None:
        assert self.process.stderr is not None
        try:
            async for chunk in self.process.stderr:
                self.stderr += chunk
                self._stderr_changed.set()
                self._stderr_changed = anyio.Event()
        except anyio.BrokenResourceError:
            pass
        self._stderr_changed.set()

    async def stderr_match(self, pattern: str) -> re.Match[bytes]:
        with anyio.fail_after(TIMEOUT):
            while True:
                changed = self._stderr_changed
                found = re.search(pattern.encode(), self.stderr)
                if found:
                    return found
                assert self.process.returncode is None, self.stderr.decode()
                await changed.wait()

    async def tcp_port(self) -> int:
        found = await self.stderr_match(r"appserver: listening on tcp://127\.0\.0\.1:(\d+)\n")
        return int(found[1])


@asynccontextmanager
async def router(workspace: Path, *extra: str, tcp: bool = False) -> AsyncIterator[RouterProcess]:
    """``appserver router`` on ``workspace`` (TCP on a free port with ``tcp``)."""
    args = [sys.executable, "-m", "appserver", "router", "--workspace", str(workspace)]
    args += ["--provider", "offline", "--log-level", "info", *extra]
    if tcp:
        args += ["--listen", "tcp://127.0.0.1:0"]
    process = await anyio.open_process(
        args, env=child_env(), stdin=subprocess.DEVNULL if tcp else subprocess.PIPE
    )
    async with process, anyio.create_task_group() as tg:
        sut = RouterProcess(process)
        tg.start_soon(sut.read_stderr)
        try:
            yield sut
            if process.returncode is None:
                process.kill()
            # Whatever the test did not read is still checked, line by line;
            # in TCP mode stdout carries nothing at all.
            left = await sut.frames.rest()
            assert not (tcp and left), left
        finally:
            if process.returncode is None:
                process.kill()
            with anyio.fail_after(TIMEOUT):
                await process.wait()
            tg.cancel_scope.cancel()


class TcpClient:
    def __init__(self, stream: SocketStream) -> None:
        self.stream = stream
        self.frames = event_lines(lambda: stream.receive(1 << 16))

    async def send(self, message: Any) -> None:
        errors = [e.message for e in COMMAND.iter_errors(message)]
        assert not errors, (errors, message)
        await self.stream.send(json.dumps(message).encode() + b"\n")


@asynccontextmanager
async def tcp_client(port: int) -> AsyncIterator[TcpClient]:
    """A client the router has registered: it answered the client's first command
    (a client only gets the events sent after the router accepted it)."""
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        client = TcpClient(stream)
        hello = f"hello-{uuid.uuid4().hex[:8]}"
        await client.send(command("providers_list", {}, hello))
        await client.frames.until(is_event("providers_list", request_id=hello))
        yield client


async def stop(sut: RouterProcess, signum: int = signal.SIGTERM) -> int:
    sut.process.send_signal(signum)
    return await sut.exit_code()


def one_turn(events: list[dict[str, Any]], injection_id: str) -> list[dict[str, Any]]:
    return [e for e in events if e["data"].get("injection_id") == injection_id]


# --- the reference client's sequence --------------------------------------------------------------


async def test_inject_answers_with_the_reference_sequence(workspace: Path) -> None:
    async with router(workspace) as sut:
        await sut.send(inject("272900", 0, "Hello", request_id="req-123"))
        events = await sut.frames.until(is_event("turn_complete"))
        await sut.close_stdin()
        assert await sut.frames.rest() == []
        assert await sut.exit_code() == 0

    kinds = names(events)
    deltas = kinds.count("assistant_delta")
    assert deltas >= 1
    assert kinds == [
        "inject_ack",
        "inject_delivered",
        "turn_started",
        *["assistant_delta"] * deltas,
        "assistant",
        "usage",
        "turn_complete",
    ]
    ack, delivered = events[0]["data"], events[1]["data"]
    injection_id = ack["injection_id"]
    assert uuid.UUID(injection_id).version == 4
    target = {"injection_id": injection_id, "job_id": "272900", "node_id": 0}
    assert ack == {"request_id": "req-123", **target}
    assert delivered == {"request_id": "req-123", **target}
    for event in events[2:]:
        assert {key: event["data"][key] for key in target} == target
    text = "".join(e["data"]["content"] for e in events if e["event"] == "assistant_delta")
    assert text == "You said: Hello"
    assert events[-3]["data"]["content"] == text
    usage = events[-2]["data"]
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert events[-1]["data"]["status"] == "completed"
    assert events[2]["data"]["thread_id"] == events[-1]["data"]["thread_id"]


async def test_stdin_eof_waits_for_turns_in_flight_and_queued(workspace: Path) -> None:
    async with router(workspace) as sut:
        await sut.send(inject("job", 0, "?stream 5\n?delay 50", request_id="slow"))
        await sut.send(inject("job", 0, "after", request_id="queued"))
        await sut.close_stdin()
        events = await sut.frames.rest()
        assert await sut.exit_code() == 0
    completes = [e for e in events if e["event"] == "turn_complete"]
    assert [e["data"]["status"] for e in completes] == ["completed", "completed"]
    assert [e["data"]["turn_id"] for e in completes] == ["turn_001", "turn_002"]


async def test_injections_to_one_node_queue_in_order_other_nodes_run_alongside(
    workspace: Path,
) -> None:
    async with router(workspace) as sut:
        await sut.send(inject("job", 0, "?stream 4\n?delay 100", request_id="first"))
        await sut.send(inject("job", 0, "second", request_id="second"))
        await sut.send(inject("job", 1, "other node", request_id="other"))
        await sut.close_stdin()
        events = await sut.frames.rest()
        assert await sut.exit_code() == 0

    acks = [e["data"] for e in events if e["event"] == "inject_ack"]
    assert [a["request_id"] for a in acks] == ["first", "second", "other"]
    first, second, other = (a["injection_id"] for a in acks)
    # One node: the second injection is delivered only once the first turn ended.
    node0 = [e for e in events if e["data"].get("node_id") == 0]
    first_done = node0.index(next(e for e in node0 if is_event("turn_complete")(e)))
    assert node0[first_done]["data"]["injection_id"] == first
    assert node0[first_done + 1]["event"] == "inject_delivered"
    assert node0[first_done + 1]["data"]["injection_id"] == second
    # Another node does not wait for it.
    other_done = events.index(
        next(e for e in events if is_event("turn_complete", injection_id=other)(e))
    )
    assert other_done < events.index(
        next(e for e in events if is_event("turn_complete", injection_id=first)(e))
    )
    threads = {
        e["data"]["node_id"]: e["data"]["thread_id"] for e in events if "thread_id" in e["data"]
    }
    assert threads[0] != threads[1]
    for injection_id in (first, second, other):
        assert names(one_turn(events, injection_id))[-1] == "turn_complete"


async def test_a_failed_turn_reports_agent_error_then_completes(workspace: Path) -> None:
    async with router(workspace) as sut:
        await sut.send(inject("job", 0, "?fail auth the key was refused"))
        events = await sut.frames.until(is_event("turn_complete"))
        await sut.close_stdin()
        assert await sut.exit_code() == 0
    assert names(events) == [
        "inject_ack",
        "inject_delivered",
        "turn_started",
        "agent_error",
        "usage",
        "turn_complete",
    ]
    error = events[3]["data"]
    assert error["message"] == "model provider error (auth): the key was refused"
    assert error["error_code"] == "provider_auth"
    assert events[-1]["data"]["status"] == "failed"


async def test_reasoning_is_relayed_before_the_answer(workspace: Path) -> None:
    async with router(workspace) as sut:
        await sut.send(inject("job", 0, "?think weighing options\nhello"))
        events = await sut.frames.until(is_event("turn_complete"))
        await sut.close_stdin()
        assert await sut.exit_code() == 0
    kinds = names(events)
    assert kinds.index("reasoning_delta") < kinds.index("reasoning") < kinds.index("assistant")
    thought = "".join(e["data"]["content"] for e in events if e["event"] == "reasoning_delta")
    reasoning = next(e["data"]["content"] for e in events if e["event"] == "reasoning")
    assert thought == reasoning == "weighing options"
    assert next(e["data"]["content"] for e in events if e["event"] == "assistant") == (
        "You said: hello"
    )


@pytest.mark.parametrize(
    ("policy", "success", "answer", "status"),
    [
        ("autoApprove", True, "The command exited with code 0.", "completed"),
        ("default", False, "The shell call was declined.", "completed"),
        ("interrupt", None, None, "cancelled"),
    ],
)
async def test_tool_calls_follow_the_approval_policy(
    workspace: Path, policy: str, success: bool | None, answer: str | None, status: str
) -> None:
    async with router(workspace, "--approval-policy", policy) as sut:
        await sut.send(inject("job", 0, "!echo from-the-router"))
        events = await sut.frames.until(is_event("turn_complete"))
        await sut.close_stdin()
        assert await sut.exit_code() == 0
    call = next(e["data"] for e in events if e["event"] == "tool_call")
    assert (call["tool"], call["arguments"]) == ("shell", {"command": "echo from-the-router"})
    results = [e["data"] for e in events if e["event"] == "tool_result"]
    assessed = [e["data"]["content"] for e in events if e["event"] == "assistant"]
    if success is None:
        assert results == [] and assessed == []
        assert events[-1]["data"]["reason"] == "approvalCancelled"
    else:
        assert results[0]["success"] is success
        assert results[0]["call_id"] == call["call_id"]
        if success:
            assert "from-the-router" in results[0]["result"]
        else:
            assert results[0]["result"].startswith("Declined")
        assert assessed == [answer]
    assert events[-1]["data"]["status"] == status


# --- bad input ------------------------------------------------------------------------------------

GOOD = inject("272900", 0, "Hello")
BAD_ENVELOPES: list[tuple[str, Any, str | None, str]] = [
    # (case, message, request_id echoed, part of the reason)
    ("array", [GOOD], None, "must be a JSON object"),
    ("string", "inject", None, "must be a JSON object"),
    ("number", 42, None, "must be a JSON object"),
    ("wrong protocol", {**GOOD, "protocol": "codeswarm.router.v2"}, "r", "unsupported protocol"),
    ("missing protocol", {k: v for k, v in GOOD.items() if k != "protocol"}, "r", "protocol"),
    ("event type", {**GOOD, "type": "event"}, "r", '"type" must be "command"'),
    ("missing type", {k: v for k, v in GOOD.items() if k != "type"}, "r", '"type"'),
    ("missing timestamp", {k: v for k, v in GOOD.items() if k != "timestamp"}, "r", "timestamp"),
    ("blank timestamp", {**GOOD, "timestamp": ""}, "r", "timestamp"),
    ("spaces timestamp", {**GOOD, "timestamp": "   "}, "r", "timestamp"),
    ("naive timestamp", {**GOOD, "timestamp": "2026-02-25T15:00:00"}, "r", "timestamp"),
    ("offset timestamp", {**GOOD, "timestamp": "2026-02-25T17:00:00+02:00"}, "r", "timestamp"),
    ("date only", {**GOOD, "timestamp": "2026-02-25"}, "r", "timestamp"),
    ("impossible date", {**GOOD, "timestamp": "2026-02-30T15:00:00Z"}, "r", "timestamp"),
    ("space separator", {**GOOD, "timestamp": "2026-02-25 15:00:00Z"}, "r", "timestamp"),
    ("numeric timestamp", {**GOOD, "timestamp": 1772031600}, "r", "timestamp"),
    ("missing command", {k: v for k, v in GOOD.items() if k != "command"}, "r", '"command"'),
    ("numeric command", {**GOOD, "command": 7}, "r", '"command"'),
    (
        "missing request_id",
        {k: v for k, v in GOOD.items() if k != "request_id"},
        None,
        "request_id",
    ),
    ("numeric request_id", {**GOOD, "request_id": 5}, None, "request_id"),
    ("empty request_id", {**GOOD, "request_id": ""}, "", "request_id"),
    ("list payload", {**GOOD, "payload": []}, "r", '"payload" must be an object'),
    ("null payload", {**GOOD, "payload": None}, "r", '"payload" must be an object'),
    ("string payload", {**GOOD, "payload": "hi"}, "r", '"payload" must be an object'),
    ("unknown command", {**GOOD, "command": "frobnicate"}, "r", "unknown command"),
]
_P = GOOD["payload"]
BAD_INJECTS: list[tuple[str, Any, str]] = [
    ("no job_id", {k: v for k, v in _P.items() if k != "job_id"}, "job_id"),
    ("numeric job_id", {**_P, "job_id": 272900}, "job_id"),
    ("empty job_id", {**_P, "job_id": ""}, "job_id"),
    ("blank job_id", {**_P, "job_id": "  "}, "job_id"),
    ("no node_id", {k: v for k, v in _P.items() if k != "node_id"}, "node_id"),
    ("string node_id", {**_P, "node_id": "0"}, "node_id"),
    ("float node_id", {**_P, "node_id": 1.5}, "node_id"),
    ("negative node_id", {**_P, "node_id": -1}, "node_id"),
    ("true node_id", {**_P, "node_id": True}, "node_id"),
    ("false node_id", {**_P, "node_id": False}, "node_id"),
    ("huge node_id", {**_P, "node_id": 2**31}, "node_id"),
    ("null node_id", {**_P, "node_id": None}, "node_id"),
    ("no content", {k: v for k, v in _P.items() if k != "content"}, "content"),
    ("numeric content", {**_P, "content": 1}, "content"),
    ("null content", {**_P, "content": None}, "content"),
    ("list content", {**_P, "content": ["Hello"]}, "content"),
    ("unknown swarm", {"swarm_id": "no-such-swarm", "content": "hi"}, "unknown swarm_id"),
]
BAD_LINES: list[tuple[str, bytes, str]] = [
    ("not JSON", b"hello router", "invalid JSON"),
    ("truncated JSON", json.dumps(GOOD).encode()[:-1], "invalid JSON"),
    ("two objects", json.dumps(GOOD).encode() * 2, "invalid JSON"),
    ("NaN", json.dumps(GOOD).encode()[:-1] + b',"x":NaN}', "invalid JSON"),
    (
        "lone surrogate",
        json.dumps({**GOOD, "payload": {**_P, "content": "\ud800"}}).encode(),
        "surrogate",
    ),
    ("invalid UTF-8", b'{"protocol":"\xff\xfe"}', "UTF-8"),
    ("over 4 MiB", b'{"x":"' + b"a" * (4 * 1024 * 1024) + b'"}', "exceeds"),
]


async def test_bad_input_is_rejected_and_the_router_keeps_going(workspace: Path) -> None:
    cases: list[tuple[str, bytes, str | None, str]] = []
    for case, message, request_id, reason in BAD_ENVELOPES:
        if isinstance(message, dict) and "request_id" in message and request_id == "r":
            message = {**message, "request_id": f"r-{len(cases)}"}
            request_id = message["request_id"]
        # The schema refuses what the router refuses.
        assert not COMMAND.is_valid(message), case
        cases.append((case, json.dumps(message).encode(), request_id, reason))
    for case, payload, reason in BAD_INJECTS:
        message = command("inject", payload, request_id=f"r-{len(cases)}")
        assert not COMMAND.is_valid(message) or case == "unknown swarm", case
        cases.append((case, json.dumps(message).encode(), message["request_id"], reason))
    for case, line, reason in BAD_LINES:
        cases.append((case, line, None, reason))

    async with router(workspace) as sut:
        for case, line, request_id, reason in cases:
            await sut.send_raw(line + b"\n")
            rejected = await sut.frames.next()
            assert rejected["event"] == "command_rejected", case
            assert rejected["data"]["request_id"] == request_id, case
            assert reason in rejected["data"]["reason"], (case, rejected["data"]["reason"])
        # Blank lines are no commands (keep-alives): nothing answers them.
        await sut.send_raw(b"\n  \r\n")
        # Still serving: a good command after all of that.
        await sut.send(inject("272900", 0, "still here", request_id="good"))
        events = await sut.frames.until(is_event("turn_complete"))
        assert names(events)[0] == "inject_ack"
        assert events[0]["data"]["request_id"] == "good"
        await sut.close_stdin()
        assert await sut.exit_code() == 0
    assert b"Traceback" not in sut.stderr


async def test_envelope_variants_that_are_accepted(workspace: Path) -> None:
    timestamps = [
        "2026-02-25T15:00:00Z",
        "2026-02-25T15:00:00.5Z",
        "2026-02-25T15:00:00.123456789Z",
        "2026-02-25T15:00:00+00:00",
        "2026-02-25T15:00:00.250+00:00",
        "2026-02-25t15:00:00z",
    ]
    async with router(workspace) as sut:
        for index, timestamp in enumerate(timestamps):
            await sut.send(command("providers_list", {}, f"ts-{index}", timestamp=timestamp))
            answer = await sut.frames.next()
            assert (answer["event"], answer["data"]["request_id"]) == (
                "providers_list",
                f"ts-{index}",
            )
        # No payload means {}; unknown fields are ignored.
        await sut.send(command("swarm_list", None, "no-payload", extra={"future": True}))
        answer = await sut.frames.next()
        assert (answer["event"], answer["data"]) == (
            "swarm_list",
            {"request_id": "no-payload", "swarms": {}},
        )
        # The last line may lack its newline.
        await sut.send_raw(json.dumps(command("swarm_list", {}, "no-newline")).encode())
        await sut.close_stdin()
        assert (await sut.frames.next())["data"]["request_id"] == "no-newline"
        assert await sut.exit_code() == 0


async def test_missing_timestamps_are_accepted_only_when_asked(workspace: Path) -> None:
    no_timestamp = {k: v for k, v in command("providers_list", {}, "p").items() if k != "timestamp"}
    async with router(workspace, "--allow-missing-timestamp") as sut:
        await sut.send_raw(json.dumps(no_timestamp).encode() + b"\n")
        assert (await sut.frames.next())["event"] == "providers_list"
        naive = command("providers_list", {}, "naive", timestamp="2026-02-25T15:00:00")
        await sut.send_raw(json.dumps(naive).encode() + b"\n")
        rejected = await sut.frames.next()
        assert rejected["event"] == "command_rejected"
        assert rejected["data"]["request_id"] == "naive"
        await sut.close_stdin()
        assert await sut.exit_code() == 0


def test_listen_accepts_loopback_tcp_only(capsys: pytest.CaptureFixture[str]) -> None:
    for value in ("tcp://0.0.0.0:8765", "tcp://example.com:8765", "ws://127.0.0.1:1", "8765"):
        with pytest.raises(SystemExit) as exit_info:
            cli_main(["router", "--listen", value])
        assert exit_info.value.code == 2, value
        assert "--listen" in capsys.readouterr().err


# --- persistence ----------------------------------------------------------------------------------


async def test_a_node_keeps_its_thread_across_restarts(workspace: Path) -> None:
    turns = []
    for content in ("first", "second"):
        async with router(workspace) as sut:
            await sut.send(inject("272900", 3, content))
            turns.append(await sut.frames.until(is_event("turn_complete")))
            await sut.close_stdin()
            assert await sut.exit_code() == 0
    started = [next(e["data"] for e in turn if e["event"] == "turn_started") for turn in turns]
    usage = [next(e["data"] for e in turn if e["event"] == "usage") for turn in turns]
    assert started[0]["thread_id"] == started[1]["thread_id"]
    assert [s["turn_id"] for s in started] == ["turn_001", "turn_002"]
    # The second prompt also carries the first exchange ("You said: first"):
    # the offline model counts words, so the history continued.
    assert usage[1]["input_tokens"] == usage[0]["input_tokens"] + 4


# --- TCP ------------------------------------------------------------------------------------------


async def test_tcp_clients_all_receive_every_event(workspace: Path) -> None:
    async with router(workspace, tcp=True) as sut:
        port = await sut.tcp_port()
        async with tcp_client(port) as a, tcp_client(port) as b, tcp_client(port) as c:
            await b.send(command("providers_list", {}, "from-b"))
            for client in (a, b, c):
                await client.frames.until(is_event("providers_list", request_id="from-b"))
            await a.send(inject("272900", 0, "?stream 5", request_id="from-a"))
            seen = [await x.frames.until(is_event("turn_complete")) for x in (a, b, c)]
            assert seen[0] == seen[1] == seen[2]
            assert names(seen[0])[:3] == ["inject_ack", "inject_delivered", "turn_started"]
            assert names(seen[0]).count("assistant_delta") == 5
            assert seen[0][0]["data"]["request_id"] == "from-a"
        # stdin is not the protocol in TCP mode (it is /dev/null here): still running.
        assert sut.process.returncode is None
        assert await stop(sut) == 0


async def test_tcp_lines_are_checked_as_on_stdio(workspace: Path) -> None:
    async with router(workspace, tcp=True) as sut:
        port = await sut.tcp_port()
        async with tcp_client(port) as client:
            for case, line, reason in BAD_LINES:
                await client.stream.send(line + b"\n")
                rejected = await client.frames.next()
                assert rejected["event"] == "command_rejected", case
                assert rejected["data"]["request_id"] is None, case
                assert reason in rejected["data"]["reason"], (case, rejected["data"]["reason"])
            listing = json.dumps(command("swarm_list", {}, "crlf")).encode()
            await client.stream.send(b"\n \r\n" + listing + b"\r\n")
            answer = await client.frames.next()
            assert (answer["event"], answer["data"]["request_id"]) == ("swarm_list", "crlf")
            # A last line without newline, then a half-close: answered, and the
            # client keeps receiving events while it still reads.
            last = inject("job", 0, "?stream 3", request_id="last")
            await client.stream.send(json.dumps(last).encode())
            await client.stream.send_eof()
            events = await client.frames.until(is_event("turn_complete"))
            assert events[0]["data"]["request_id"] == "last"
            assert names(events).count("assistant_delta") == 3
        # An over-long last line, cut by the end of the stream, is refused too.
        async with tcp_client(port) as client:
            await client.stream.send(b'{"x":"' + b"a" * (4 * 1024 * 1024))
            await client.stream.send_eof()
            rejected = await client.frames.next()
            assert rejected["event"] == "command_rejected"
            assert "exceeds" in rejected["data"]["reason"]
        assert await stop(sut) == 0
    assert b"Traceback" not in sut.stderr


async def test_tcp_client_leaving_mid_turn_does_not_disturb_the_others(workspace: Path) -> None:
    async with router(workspace, tcp=True) as sut:
        port = await sut.tcp_port()
        async with tcp_client(port) as b:
            async with tcp_client(port) as a:
                await a.send(inject("job", 0, "?stream 40\n?delay 20", request_id="a"))
                await a.frames.until(is_event("assistant_delta"))
            # a is gone mid-turn; b still gets the whole turn.
            events = await b.frames.until(is_event("turn_complete"))
            assert names(events).count("assistant_delta") == 40
            assert events[-1]["data"]["status"] == "completed"
            await b.send(inject("job", 0, "again", request_id="b"))
            events = await b.frames.until(is_event("turn_complete"))
            assert events[0]["data"]["request_id"] == "b"
            assert events[-1]["data"]["turn_id"] == "turn_002"
        assert await stop(sut, signal.SIGINT) == 0
    assert b"Traceback" not in sut.stderr


async def test_a_tcp_client_that_stops_reading_is_dropped(workspace: Path) -> None:
    backlog = 1024 * 1024
    async with router(workspace, "--max-client-backlog", str(backlog), tcp=True) as sut:
        port = await sut.tcp_port()
        stalled = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            stalled.settimeout(TIMEOUT)
            await anyio.to_thread.run_sync(stalled.connect, ("127.0.0.1", port))
            async with tcp_client(port) as b:
                hello = command("providers_list", {}, "stalled-hello")
                stalled.sendall(json.dumps(hello).encode() + b"\n")
                await b.frames.until(is_event("providers_list", request_id="stalled-hello"))
                # About 8 MB of events: far past the socket buffers and the backlog.
                content = "x" * 200_000
                for index in range(20):
                    await b.send(inject("job", 0, content, request_id=f"big-{index}"))
                    await b.frames.until(is_event("turn_complete"))
                await sut.stderr_match("dropping client 127.0.0.1:")
                assert b.frames.bytes > 8_000_000

                def drain() -> int:
                    total = 0
                    while chunk := stalled.recv(1 << 16):
                        total += len(chunk)
                    return total

                # The stalled client was disconnected: it reads what was in
                # flight, then the end of the stream (a timeout would fail).
                received = await anyio.to_thread.run_sync(drain)
                assert received < b.frames.bytes - backlog
        finally:
            stalled.close()
        assert await stop(sut) == 0


@pytest.mark.parametrize(
    ("transport", "signum"),
    [("tcp", signal.SIGTERM), ("tcp", signal.SIGINT), ("stdio", signal.SIGTERM)],
)
async def test_a_signal_cancels_running_turns_and_exits_cleanly(
    workspace: Path, transport: str, signum: int
) -> None:
    async with router(workspace, tcp=transport == "tcp") as sut:
        client: RouterProcess | TcpClient = sut
        async with contextlib.AsyncExitStack() as stack:
            if transport == "tcp":
                client = await stack.enter_async_context(tcp_client(await sut.tcp_port()))
            await client.send(inject("job", 0, "?stream 200\n?delay 50", request_id="long"))
            await client.send(inject("job", 0, "queued", request_id="queued"))
            await client.frames.until(is_event("assistant_delta"))
            sut.process.send_signal(signum)
            events = await client.frames.rest()
        assert await sut.exit_code() == 0
    queued = next(e["data"] for e in events if e["event"] == "inject_failed")
    assert (queued["request_id"], queued["error"]) == ("queued", "router shutting down")
    done = next(e["data"] for e in events if e["event"] == "turn_complete")
    assert (done["status"], done["reason"]) == ("cancelled", "serverShutdown")
    assert names(events)[-2:] == ["usage", "turn_complete"]


# --- swarms (what the Codeswarm CLI sends: no timestamps) -----------------------------------------


def cli_command(name: str, payload: dict[str, Any], request_id: str) -> dict[str, Any]:
    """As the Codeswarm CLI's RouterClient builds it (no timestamp)."""
    return {
        "protocol": PROTOCOL,
        "type": "command",
        "command": name,
        "request_id": request_id,
        "payload": payload,
    }


async def test_swarm_commands_as_the_codeswarm_cli_sends_them(workspace: Path) -> None:
    async with router(workspace, "--allow-missing-timestamp", tcp=True) as sut:
        port = await sut.tcp_port()
        async with tcp_client(port) as cli:

            async def ask(
                name: str, payload: dict[str, Any], rid: str, schema_valid: bool = True
            ) -> dict[str, Any]:
                message = cli_command(name, payload, rid)
                # With a timestamp added, the schema agrees about the payload.
                stamped = {**message, "timestamp": "2026-02-25T15:00:00Z"}
                assert COMMAND.is_valid(stamped) is schema_valid, message
                await cli.stream.send(json.dumps(message).encode() + b"\n")
                return (await cli.frames.until(lambda e: e["data"].get("request_id") == rid))[-1]

            providers = await ask("providers_list", {}, "p")
            assert providers["event"] == "providers_list"
            (provider,) = providers["data"]["providers"]
            assert (provider["id"], provider["model_provider"]) == ("appserver", "offline")

            launch = {
                "nodes": 2,
                "system_prompt": "You are a careful reviewer.",
                "provider": "appserver",
                "provider_params": {"model": "offline"},
            }
            launched = await ask("swarm_launch", launch, "launch")
            assert launched["event"] == "swarm_launched"
            swarm = launched["data"]
            swarm_id, job_id = swarm["swarm_id"], swarm["job_id"]
            assert swarm["node_count"] == 2 and len(set(swarm["thread_ids"])) == 2

            listed = await ask("swarm_list", {}, "list")
            assert listed["data"]["swarms"][swarm_id]["status"] == "running"
            assert listed["data"]["swarms"][swarm_id]["job_id"] == job_id

            status = await ask("swarm_status", {"swarm_id": swarm_id}, "status")
            assert status["event"] == "swarm_status"
            assert status["data"]["thread_ids"] == swarm["thread_ids"]
            assert (status["data"]["running_nodes"], status["data"]["queued_injections"]) == ([], 0)

            # `codeswarm inject <swarm> --nodes all`: one injection per node.
            await cli.stream.send(
                json.dumps(
                    cli_command(
                        "inject", {"swarm_id": swarm_id, "nodes": "all", "content": "hi"}, "all"
                    )
                ).encode()
                + b"\n"
            )
            events: list[dict[str, Any]] = []
            while [e["event"] for e in events].count("turn_complete") < 2:
                events.append(await cli.frames.next())
            acks = [e["data"] for e in events if e["event"] == "inject_ack"]
            assert sorted(a["node_id"] for a in acks) == [0, 1]
            for event in events:
                assert event["data"]["swarm_id"] == swarm_id and event["data"]["job_id"] == job_id
            started = {
                e["data"]["node_id"]: e["data"]["thread_id"]
                for e in events
                if e["event"] == "turn_started"
            }
            assert [started[0], started[1]] == swarm["thread_ids"]

            # The specification's form reaches the same threads, in range only.
            outside = await ask("inject", {"job_id": job_id, "node_id": 2, "content": "x"}, "out")
            assert outside["event"] == "command_rejected"
            assert "out of range" in outside["data"]["reason"]
            for payload, rid in (
                ({"swarm_id": swarm_id, "nodes": [5], "content": "x"}, "out-list"),
                ({"swarm_id": swarm_id, "nodes": "some", "content": "x"}, "bad-nodes"),
                ({"swarm_id": swarm_id, "nodes": [], "content": "x"}, "no-nodes"),
            ):
                answer = await ask("inject", payload, rid, schema_valid=rid == "out-list")
                assert answer["event"] == "command_rejected"

            # Terminate while node 0 runs a long turn and has another queued.
            await cli.send(inject(job_id, 0, "?stream 200\n?delay 50", request_id="long"))
            await cli.send(inject(job_id, 0, "queued", request_id="queued"))
            await cli.frames.until(is_event("assistant_delta"))
            # With a status request and an injection right behind it, in one write:
            # both see the swarm terminating (answered in order).
            behind = [
                cli_command("swarm_terminate", {"swarm_id": swarm_id}, "end"),
                cli_command("swarm_status", {"swarm_id": swarm_id}, "check"),
                cli_command("inject", {"swarm_id": swarm_id, "content": "x"}, "after"),
            ]
            await cli.stream.send(b"".join(json.dumps(c).encode() + b"\n" for c in behind))
            ending = await cli.frames.until(is_event("swarm_terminated"))
            kinds = names(ending)  # deltas of the long turn may come first
            terminating = ending[kinds.index("swarm_status")]["data"]
            assert (terminating["request_id"], terminating["status"]) == ("end", "terminating")
            statuses = [e["data"] for e in ending if e["event"] == "swarm_status"]
            assert [(d["request_id"], d["status"]) for d in statuses[:2]] == [
                ("end", "terminating"),
                ("check", "terminating"),
            ]
            (after,) = [e for e in ending if e["data"].get("request_id") == "after"]
            assert after["event"] == "command_rejected"
            assert kinds.index("swarm_status") < kinds.index("inject_failed")
            assert kinds.index("swarm_status") < kinds.index("turn_complete")
            failed = next(e["data"] for e in ending if e["event"] == "inject_failed")
            assert failed["request_id"] == "queued"
            done = next(e["data"] for e in ending if e["event"] == "turn_complete")
            assert (done["status"], done["reason"]) == ("cancelled", "interrupted")
            assert ending[-1]["data"] == {"request_id": "end", "swarm_id": swarm_id}

            refused = await ask("inject", {"swarm_id": swarm_id, "content": "x"}, "late")
            assert refused["event"] == "command_rejected"
            assert "terminated" in refused["data"]["reason"]
            again = await ask("swarm_terminate", {"swarm_id": swarm_id}, "again")
            assert again["event"] == "swarm_status"
            assert (await cli.frames.next())["event"] == "swarm_terminated"

            for name, payload, reason in (
                ("swarm_status", {"swarm_id": "nope"}, "unknown swarm_id"),
                ("swarm_status", {}, "swarm_id"),
                ("swarm_terminate", {"swarm_id": "nope"}, "unknown swarm_id"),
                ("swarm_launch", {"nodes": 0}, "nodes"),
                ("swarm_launch", {"nodes": True}, "nodes"),
                ("swarm_launch", {"nodes": 65}, "nodes"),
                ("swarm_launch", {"nodes": 1, "provider": "slurm"}, "unknown provider"),
                ("swarm_launch", {"nodes": 1, "provider_params": {"gpus": 2}}, "gpus"),
            ):
                answer = await ask(name, payload, f"bad-{name}", "nope" in str(payload))
                assert answer["event"] == "command_rejected", payload
                assert reason in answer["data"]["reason"], payload
        assert await stop(sut) == 0

    # Swarms outlive the process; a new one lists and drives them.
    async with router(workspace, "--allow-missing-timestamp") as sut:
        await sut.send_raw(json.dumps(cli_command("swarm_list", {}, "list")).encode() + b"\n")
        listed = (await sut.frames.next())["data"]["swarms"]
        # Issue 28: a terminated swarm is pruned from swarm_list (the web backend
        # would show it again); swarm_status still answers it.
        assert swarm_id not in listed
        await sut.send_raw(
            json.dumps(cli_command("swarm_status", {"swarm_id": swarm_id}, "s")).encode() + b"\n"
        )
        status = (await sut.frames.next())["data"]
        assert status["status"] == "terminated"
        await sut.close_stdin()
        assert await sut.exit_code() == 0


async def test_a_launched_swarm_survives_a_restart(workspace: Path) -> None:
    async with router(workspace) as sut:
        await sut.send(command("swarm_launch", {"nodes": 1, "system_prompt": "Be brief."}, "l"))
        swarm = (await sut.frames.next())["data"]
        await sut.close_stdin()
        assert await sut.exit_code() == 0
    async with router(workspace) as sut:
        await sut.send(command("swarm_status", {"swarm_id": swarm["swarm_id"]}, "s"))
        status = (await sut.frames.next())["data"]
        assert status["status"] == "running"
        assert status["thread_ids"] == swarm["thread_ids"]
        await sut.send(
            command("inject", {"swarm_id": swarm["swarm_id"], "nodes": 0, "content": "hi"}, "i")
        )
        events = await sut.frames.until(is_event("turn_complete"))
        assert events[-1]["data"]["thread_id"] == swarm["thread_ids"][0]
        assert events[-1]["data"]["swarm_id"] == swarm["swarm_id"]
        await sut.close_stdin()
        assert await sut.exit_code() == 0


# --- another face on the same threads -------------------------------------------------------------


async def test_a_websocket_client_watches_the_turns_the_router_drives(workspace: Path) -> None:
    async with router(workspace, "--websocket", "ws://127.0.0.1:0") as sut:
        url = (await sut.stderr_match(r"listening on (ws://\S+)"))[1].decode()
        await sut.send(inject("272900", 0, "make the thread"))
        thread_id = (await sut.frames.until(is_event("turn_complete")))[-1]["data"]["thread_id"]
        async with ws_client(url) as client:
            listed = await client.request(
                "thread/list", {"identity": IDENTITY, "crossChannelOrigins": ["codeswarm"]}
            )
            summary = next(t for t in listed["data"] if t["id"] == thread_id)
            assert summary["originChannel"] == "codeswarm"
            assert summary["channelContext"] == "272900/0"
            await client.request("thread/subscribe", {"threadId": thread_id})
            await sut.send(inject("272900", 0, "?stream 3", request_id="watched"))
            events = await sut.frames.until(is_event("turn_complete"))
            delta = await client.notification(
                "item/agentMessage/delta", where=lambda p: p["threadId"] == thread_id
            )
            assert delta["delta"] == "chunk 1 "
            completed = await client.notification(
                "turn/completed", where=lambda p: p["turn"]["threadId"] == thread_id
            )
            assert completed["turn"]["id"] == events[-1]["data"]["turn_id"] == "turn_002"

            # The JSON-RPC side archives the thread: the router reports it per injection.
            await client.request("thread/archive", {"threadId": thread_id})
            await sut.send(inject("272900", 0, "archived?", request_id="archived"))
            refused = await sut.frames.until(is_event("inject_failed"))
            assert names(refused) == ["inject_ack", "inject_failed"]
            assert f"Thread is not active: {thread_id}" in refused[-1]["data"]["error"]
            # ... and deletes it: the node gets a new thread.
            await client.request("thread/delete", {"threadId": thread_id})
            await sut.send(inject("272900", 0, "new thread", request_id="renewed"))
            renewed = await sut.frames.until(is_event("turn_complete"))
            assert renewed[-1]["data"]["thread_id"] != thread_id
            assert renewed[-1]["data"]["turn_id"] == "turn_001"
        await sut.close_stdin()
        assert await sut.exit_code() == 0


# --- the schema -----------------------------------------------------------------------------------


def test_the_schema_describes_every_command_and_event() -> None:
    Draft202012Validator.check_schema(SCHEMA)
    definitions = SCHEMA["$defs"]
    assert definitions["command"]["properties"]["command"]["enum"] == list(COMMANDS)
    assert definitions["event"]["properties"]["event"]["enum"] == list(EVENTS)
    for name in COMMANDS:
        assert f"payload.{name}" in definitions, name
    for name in EVENTS:
        assert f"data.{name}" in definitions, name


# --- the documentation's example ------------------------------------------------------------------

DOC_MARK = "<!-- tested: tests/faces/codeswarm/test_face_codeswarm.py -->"


async def test_the_documented_example_runs(workspace: Path) -> None:
    doc = REPO / "docs" / "faces.md"
    text = doc.read_text("utf-8") if doc.is_file() else ""
    blocks = re.findall(re.escape(DOC_MARK) + r"\n```python\n(.*?)\n```", text, re.S)
    assert blocks, "docs/faces.md lost its tested Codeswarm example"
    script = workspace / "example.py"
    script.write_text(blocks[0], "utf-8")
    env = {**child_env(), "PATH": f"{Path(sys.executable).parent}:{child_env().get('PATH', '')}"}
    with anyio.fail_after(60):
        done = await anyio.run_process(
            [sys.executable, str(script)], cwd=workspace, env=env, check=False
        )
    assert done.returncode == 0, done.stderr.decode()
    assert "You said: hello" in done.stdout.decode()


def test_tcp_reads_take_what_asyncio_read_whole() -> None:
    """A receive smaller than the transport's read splits every read in two
    (a slice and a copy of the rest): 12 GB sent without a newline over four
    connections kept ~9 GB resident (figures in the CHANGELOG). The sizes stay equal."""
    from asyncio.selector_events import _SelectorSocketTransport

    from appserver.faces.codeswarm import serve

    assert _SelectorSocketTransport.max_size == serve._READ_CHUNK


def test_an_event_frame_is_json_whatever_floats_it_carries() -> None:
    # A model's tool arguments are parsed leniently (NaN reads as a float).
    frame = event_frame("tool_call", {"arguments": {"a": float("nan"), "b": [float("inf")]}})
    assert '"arguments":{"a":null,"b":[null]}' in frame
    assert json.loads(frame, parse_constant=lambda word: pytest.fail(f"bare {word}"))
