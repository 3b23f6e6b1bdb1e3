"""Property tests: whatever a peer sends, the server answers sanely and survives.

One long-lived real server process per transport (stdio and WebSocket) is
driven synchronously by hypothesis. After every example a probe
``thread/list`` must still succeed, which also serves as the barrier that
proves how many answers the example produced.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import queue
import re
import subprocess
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.sync.client import ClientConnection, connect

from appserver.protocol.methods import METHODS
from tests.support.helpers import IDENTITY
from tests.support.servers import child_env, server_command

TIMEOUT = 10.0
FUZZ = settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


class Peer:
    """A synchronous JSON-RPC peer of one server process."""

    kind = ""

    def __init__(self) -> None:
        self.inbox: queue.Queue[dict[str, Any]] = queue.Queue()
        self._probes = itertools.count(1)

    def send(self, frame: str | bytes) -> None:
        raise NotImplementedError

    def receive(self) -> dict[str, Any]:
        try:
            return self.inbox.get(timeout=TIMEOUT)
        except queue.Empty:
            raise AssertionError("the server stopped answering") from None

    def request(self, request_id: Any, method: str, params: Any) -> dict[str, Any]:
        self.send(
            json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        )
        while True:
            message = self.receive()
            if message.get("id") == request_id and "method" not in message:
                return message

    def initialize(self) -> None:
        init = {"clientInfo": {"name": "fuzz", "version": "1"}}
        assert "result" in self.request("init", "initialize", init)
        self.send('{"jsonrpc":"2.0","method":"initialized"}')

    def exchange(self, frame: str | bytes, expected_id: Any = None) -> list[dict[str, Any]]:
        """Send ``frame`` then a probe; return every response that is not the probe's.

        Waits for the probe's answer and, when ``expected_id`` is given, for
        an answer with that id (requests run concurrently, so it may come
        after the probe's).
        """
        self.send(frame)
        probe = f"probe-{next(self._probes)}"
        self.send(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": probe,
                    "method": "thread/list",
                    "params": {"identity": IDENTITY},
                }
            )
        )
        answers: list[dict[str, Any]] = []
        probed = False
        while not probed or (
            expected_id is not None and not any(same_id(a, expected_id) for a in answers)
        ):
            message = self.receive()
            if "method" in message and "id" not in message:
                continue  # a notification
            assert_well_formed(message)
            if message["id"] == probe:
                assert "result" in message, message  # the server still works
                assert isinstance(message["result"]["data"], list)
                probed = True
            else:
                answers.append(message)
        return answers

    def close(self) -> None:
        raise NotImplementedError


def same_id(message: dict[str, Any], request_id: Any) -> bool:
    return message["id"] == request_id and type(message["id"]) is type(request_id)


def assert_well_formed(message: dict[str, Any]) -> None:
    assert message.get("jsonrpc") == "2.0", message
    assert "id" in message, message
    assert ("result" in message) != ("error" in message), message
    keys = set(message)
    assert keys in ({"jsonrpc", "id", "result"}, {"jsonrpc", "id", "error"}), message
    if "error" in message:
        error = message["error"]
        assert isinstance(error["code"], int) and not isinstance(error["code"], bool)
        assert isinstance(error["message"], str)
        assert set(error) <= {"code", "message", "data"}


class StdioPeer(Peer):
    kind = "stdio"

    def __init__(self, workspace: Path) -> None:
        super().__init__()
        self.process = subprocess.Popen(
            server_command(workspace),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=child_env(),
        )
        self.lines: list[bytes] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)
            # Anything on stdout that is not one JSON object fails the next receive.
            self.inbox.put(json.loads(line))

    def send(self, frame: str | bytes) -> None:
        data = frame.encode() if isinstance(frame, str) else frame
        assert b"\n" not in data
        assert self.process.stdin is not None
        self.process.stdin.write(data + b"\n")
        self.process.stdin.flush()

    def close(self) -> None:
        assert self.process.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self.process.stdin.close()
        try:
            code = self.process.wait(timeout=TIMEOUT)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            self._reader.join(timeout=TIMEOUT)
            assert self.process.stdout is not None
            self.process.stdout.close()
        assert code == 0


class WebSocketPeer(Peer):
    kind = "websocket"

    def __init__(self, workspace: Path) -> None:
        super().__init__()
        self.process = subprocess.Popen(
            server_command(workspace, "--listen", "ws://127.0.0.1:0"),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=child_env(),
        )
        self.stderr: list[bytes] = []
        found: queue.Queue[str] = queue.Queue()
        self._drain = threading.Thread(target=self._read_stderr, args=(found,), daemon=True)
        self._drain.start()
        try:
            url = found.get(timeout=20)
        except queue.Empty:
            self.process.kill()
            self.process.wait()
            self._drain.join(timeout=TIMEOUT)
            assert self.process.stderr is not None
            self.process.stderr.close()
            raise RuntimeError(b"".join(self.stderr).decode(errors="replace")) from None
        self._stack = ExitStack()
        # No keepalive: its pings draw from the global ``random`` in a thread,
        # which Hypothesis reads as a strategy using ``random`` (a flaky failure).
        self.ws: ClientConnection = self._stack.enter_context(
            connect(url, max_size=None, ping_interval=None)
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read_stderr(self, found: queue.Queue[str]) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr.append(line)
            match = re.search(rb"listening on (ws://\S+)", line)
            if match:
                found.put(match.group(1).decode())

    def _read(self) -> None:
        for frame in self.ws:
            assert isinstance(frame, str)  # the server only sends text frames
            self.inbox.put(json.loads(frame))

    def send(self, frame: str | bytes) -> None:
        assert isinstance(frame, str)
        self.ws.send(frame)

    def close(self) -> None:
        self._stack.close()
        self._reader.join(timeout=TIMEOUT)
        self.process.terminate()
        try:
            code = self.process.wait(timeout=TIMEOUT)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            self._drain.join(timeout=TIMEOUT)
            assert self.process.stderr is not None
            self.process.stderr.close()
        assert code == 0


@pytest.fixture(scope="module")
def stdio_peer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Peer]:
    peer = StdioPeer(tmp_path_factory.mktemp("fuzz-stdio"))
    try:
        peer.initialize()
        yield peer
    finally:
        peer.close()


@pytest.fixture(scope="module")
def ws_peer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Peer]:
    peer = WebSocketPeer(tmp_path_factory.mktemp("fuzz-ws"))
    try:
        peer.initialize()
        yield peer
    finally:
        peer.close()


# --- inputs -------------------------------------------------------------------------

# Strings may contain lone surrogates: they reach the server as "\ud800" escapes.
any_text = st.text(st.characters(exclude_categories=()), max_size=20)
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | any_text
)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(any_text, children, max_size=4)
    ),
    max_leaves=12,
)
real_methods = st.sampled_from(
    [*sorted(METHODS), "initialized", "cron/list", "skills/list", "turn/start", "turn/interrupt"]
)
request_ids = st.integers() | any_text
request_shaped = st.builds(
    lambda request_id, method, params, with_params: {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": method,
        **({"params": params} if with_params else {}),
    },
    request_ids,
    real_methods | any_text,
    json_values,
    st.booleans(),
)
# Envelope-level near misses: a real request with one member broken.
broken_envelopes = request_shaped.flatmap(
    lambda message: st.sampled_from(["jsonrpc", "id", "method"]).flatmap(
        lambda key: json_values.map(lambda value: {**message, key: value})
    )
)


# Requests to real methods with params shaped by the method's own JSON Schema:
# right member names at every depth, values of the right kind or one step off,
# integers far past 64 bits and strings far past any sane length. They get past
# the envelope checks and exercise params validation and the handlers.
huge_ints = st.sampled_from([2**63, -(2**63) - 1, 2**64, 10**30, -(10**30), 2**63 - 1, -1, 0])
long_text = st.text(max_size=3).map(lambda text: text * 40_000)


def from_schema(schema: dict[str, Any], defs: dict[str, Any], depth: int = 0) -> Any:
    """A strategy for values near ``schema`` (a pydantic JSON Schema fragment)."""
    if "$ref" in schema:
        return from_schema(defs[schema["$ref"].rsplit("/", 1)[-1]], defs, depth)
    options = schema.get("anyOf") or schema.get("oneOf")
    if options:
        return st.one_of([from_schema(option, defs, depth) for option in options])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "const" in schema:
        return st.just(schema["const"])
    kind = schema.get("type")
    if kind == "integer":
        return huge_ints | st.integers(-1000, 10**7)
    if kind == "number":
        return huge_ints | st.floats(allow_nan=False, allow_infinity=False)
    if kind == "string":
        return st.sampled_from(["x", "default", "every"]) | any_text | long_text
    if kind == "boolean":
        return st.booleans()
    if kind == "array" and depth < 4:
        items = schema.get("items", {})
        return st.lists(from_schema(items, defs, depth + 1), max_size=3)
    if kind == "object" and depth < 4:
        properties = schema.get("properties", {})
        if not properties:
            return st.dictionaries(any_text, json_values, max_size=3)
        required = [name for name in properties if name in schema.get("required", ())]
        optional = [name for name in properties if name not in required]
        # The required members and at most two others: models often refuse
        # members that do not go together, which would hide everything else.
        chosen = (
            st.lists(st.sampled_from(optional), max_size=2, unique=True)
            if optional
            else st.just([])
        )
        return chosen.flatmap(
            lambda names: st.fixed_dictionaries(
                {
                    name: from_schema(properties[name], defs, depth + 1)
                    for name in [*required, *names]
                }
            )
        )
    return json_values


def _params_strategy(method: str) -> Any:
    schema = METHODS[method].params.model_json_schema(by_alias=True)
    return from_schema(schema, schema.get("$defs", {}))


# --- the oracle ------------------------------------------------------------------------


def request_id_of(message: Any) -> Any:
    """The id when ``message`` is a well-formed request, else ``None``."""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return None
    request_id = message.get("id")
    valid_id = isinstance(request_id, str | int) and not isinstance(request_id, bool)
    if valid_id and isinstance(message.get("method"), str):
        return request_id
    return None


def check(peer: Peer, frame: str | bytes) -> None:
    """Send one frame and check the answers against what the frame is."""
    if isinstance(frame, bytes):
        if not frame.strip():
            assert peer.exchange(frame) == []  # blank lines are skipped
            return
        try:
            text = frame.rstrip(b"\r").decode("utf-8")
        except UnicodeDecodeError:
            text = None
    else:
        text = frame
    try:
        message = json.loads(text) if text is not None else None
        parsed = text is not None
    except (ValueError, RecursionError):
        parsed = False
    if not parsed:
        answers = peer.exchange(frame)
        assert len(answers) == 1, answers
        assert answers[0]["id"] is None
        assert answers[0]["error"]["code"] == -32700
        return
    request_id = request_id_of(message)
    if request_id is not None:
        answers = peer.exchange(frame, request_id)
        assert len(answers) == 1, answers
        assert same_id(answers[0], request_id)
        return
    answers = peer.exchange(frame)
    # Not a request: at most one -32600, echoing a usable id or null.
    assert len(answers) <= 1, answers
    for answer in answers:
        assert answer["error"]["code"] == -32600, answer
        echoed = message.get("id") if isinstance(message, dict) else None
        assert answer["id"] is None or answer["id"] == echoed


def line(data: bytes) -> bytes:
    return data.replace(b"\n", b" ")


def dumps(value: Any) -> str:
    return json.dumps(value)  # ensure_ascii: surrogates travel as escapes


# --- stdio --------------------------------------------------------------------------------


@FUZZ
@given(data=st.binary(max_size=300))
def test_stdio_random_bytes(stdio_peer: Peer, data: bytes) -> None:
    check(stdio_peer, line(data))


@FUZZ
@given(text=st.text(max_size=300))
def test_stdio_random_text(stdio_peer: Peer, text: str) -> None:
    check(stdio_peer, line(text.encode()))


@FUZZ
@given(value=json_values)
def test_stdio_random_json(stdio_peer: Peer, value: Any) -> None:
    check(stdio_peer, dumps(value))


@FUZZ
@given(message=request_shaped | broken_envelopes)
def test_stdio_request_shaped(stdio_peer: Peer, message: dict[str, Any]) -> None:
    check(stdio_peer, dumps(message))


# --- WebSocket ---------------------------------------------------------------------------


@FUZZ
@given(text=st.text(max_size=300))
def test_ws_random_text(ws_peer: Peer, text: str) -> None:
    check(ws_peer, text)


@FUZZ
@given(value=json_values)
def test_ws_random_json(ws_peer: Peer, value: Any) -> None:
    check(ws_peer, dumps(value))


@FUZZ
@given(message=request_shaped | broken_envelopes)
def test_ws_request_shaped(ws_peer: Peer, message: dict[str, Any]) -> None:
    check(ws_peer, dumps(message))


@pytest.mark.parametrize("method", sorted(METHODS))
@settings(FUZZ, max_examples=15)
@given(data=st.data())
def test_stdio_params_never_cause_an_internal_error(
    stdio_peer: Peer, method: str, data: st.DataObject
) -> None:
    """Bad params are the caller's error (-32602 and friends), never -32603."""
    params = data.draw(_params_strategy(method), label="params")
    message = {"jsonrpc": "2.0", "id": data.draw(request_ids), "method": method, "params": params}
    answers = stdio_peer.exchange(dumps(message), message["id"])
    assert len(answers) == 1, answers
    error = answers[0].get("error")
    assert error is None or error["code"] != -32603, (message, answers)


def test_servers_survived(stdio_peer: Peer, ws_peer: Peer) -> None:
    for peer in (stdio_peer, ws_peer):
        answers = peer.exchange(dumps({"jsonrpc": "2.0", "id": "last", "method": "nope"}), "last")
        assert answers[0]["error"]["code"] == -32601
