"""Envelope and error behaviour of the JSON-RPC core (reference §1, §7;
DotCraft's AppServerErrorTests), over every transport."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import anyio
import pytest

from appserver.protocol import errors as rpc_errors
from appserver.rpc.connection import Limits
from tests.support.client import RpcClient
from tests.support.helpers import IDENTITY, assert_error_frame, raw, start_thread
from tests.support.servers import ProcessStream, ServerUnderTest, running_server

LIST = {"identity": IDENTITY}


def request(request_id: Any, method: str = "thread/list", params: Any = LIST) -> str:
    return raw({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})


async def expect_null_id_error(client: RpcClient, frame: str, code: int) -> dict[str, Any]:
    mark = client.mark()
    reply = await client.exchange(frame, None)
    error = assert_error_frame(reply, code, None)
    # Exactly one answer: nothing else came back for this frame.
    await client.settle()
    assert len(client.messages) - mark == 2
    return error


# --- parse errors and malformed envelopes -----------------------------------


UNPARSABLE = [
    "{",
    "{not json}",
    '{"jsonrpc": "2.0", "id": 1, "method": "thread/list"',
    "[1,",
    "nul",
    "'single quotes'",
    '{"jsonrpc":"2.0","id":1,"method":"thread/list"}}',
    "\x00",
]


async def test_unparsable_json_is_parse_error_with_null_id(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        for frame in UNPARSABLE:
            error = await expect_null_id_error(client, frame, rpc_errors.PARSE_ERROR)
            assert error["message"] == "Parse error"
        assert (await client.request("thread/list", LIST))["data"] == []


async def test_deeply_nested_json_does_not_kill_the_server(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        depth = 100_000
        await expect_null_id_error(client, "[" * depth + "]" * depth, rpc_errors.PARSE_ERROR)
        # Deep but reasonable nesting inside params is fine (unknown fields are ignored).
        nested: Any = "leaf"
        for _ in range(200):
            nested = {"n": nested}
        reply = await client.exchange(request(5, params={**LIST, "extra": nested}), 5)
        assert reply["result"] == {"data": []}


async def test_non_object_is_invalid_request(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        for frame in ["42", '"text"', "null", "true", "3.5"]:
            error = await expect_null_id_error(client, frame, rpc_errors.INVALID_REQUEST)
            assert error["message"] == "Invalid request"
            assert error["data"] == {"detail": "expected an object"}


async def test_wrong_jsonrpc_version_echoes_id(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        for version in [None, "1.0", 2.0, "2", ""]:
            message: dict[str, Any] = {"id": 7, "method": "thread/list", "params": LIST}
            if version is not None:
                message["jsonrpc"] = version
            reply = await client.exchange(raw(message), 7)
            error = assert_error_frame(reply, rpc_errors.INVALID_REQUEST, 7)
            assert error["data"] == {"detail": "'jsonrpc' must be \"2.0\""}
            # Without an id it is a (broken) notification: no answer at all.
            mark = client.mark()
            del message["id"]
            await client.send(message)
            await client.quiet_after(mark)


async def test_missing_method(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        reply = await client.exchange(raw({"jsonrpc": "2.0", "id": "m"}), "m")
        error = assert_error_frame(reply, rpc_errors.INVALID_REQUEST, "m")
        assert error["data"] == {"detail": "missing 'method'"}
        # Neither id nor method: still invalid, answered with id null.
        error = await expect_null_id_error(
            client, raw({"jsonrpc": "2.0"}), rpc_errors.INVALID_REQUEST
        )
        assert error["data"] == {"detail": "missing 'method'"}


async def test_method_must_be_a_string(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        for method in [5, None, ["thread/list"], {"name": "thread/list"}]:
            reply = await client.exchange(raw({"jsonrpc": "2.0", "id": 3, "method": method}), 3)
            assert_error_frame(reply, rpc_errors.INVALID_REQUEST, 3)


async def test_batches_are_refused(server: ServerUnderTest) -> None:
    """Batches are refused as a whole with one -32600 (id null); nothing in them runs."""
    async with server.connect() as client:
        batch = [
            {"jsonrpc": "2.0", "id": 1, "method": "thread/start", "params": LIST},
            {"jsonrpc": "2.0", "id": 2, "method": "thread/list", "params": LIST},
        ]
        error = await expect_null_id_error(client, raw(batch), rpc_errors.INVALID_REQUEST)
        assert "batch" in error["data"]["detail"]
        await expect_null_id_error(client, "[]", rpc_errors.INVALID_REQUEST)
        assert (await client.request("thread/list", LIST))["data"] == []


async def test_bad_id_types_are_invalid_request_with_null_id(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        for bad_id in [1.5, 1.0, True, False, {}, {"a": 1}, [], [1], None]:
            error = await expect_null_id_error(client, request(bad_id), rpc_errors.INVALID_REQUEST)
            assert error["data"] == {"detail": "'id' must be a string or an integer"}


async def test_ids_are_echoed_unchanged(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        for request_id in ["abc", "", "ü-1", "1", 0, -7, 2**53 + 1, 10**30]:
            reply = await client.exchange(request(request_id), request_id)
            assert reply["result"] == {"data": []}
            assert type(reply["id"]) is type(request_id)
            reply = await client.exchange(request(request_id, "no/such"), request_id)
            assert_error_frame(reply, rpc_errors.METHOD_NOT_FOUND, request_id)
            reply = await client.exchange(request(request_id, "thread/read", {}), request_id)
            assert_error_frame(reply, rpc_errors.INVALID_PARAMS, request_id)


async def test_lone_surrogates_are_echoed_safely(server: ServerUnderTest) -> None:
    """A ``\\ud800`` escape in an echoed string must not break the writer."""
    async with server.connect() as client:
        frame = '{"jsonrpc":"2.0","id":"id-\\ud800","method":"no/\\udc00such"}'
        reply = await client.exchange(frame, "id-\ud800")
        error = assert_error_frame(reply, rpc_errors.METHOD_NOT_FOUND, "id-\ud800")
        assert error["message"] == "Method not found: no/\udc00such"
        assert "\\ud800" in client.raw[-1] and "\\udc00" in client.raw[-1]
        assert (await client.request("thread/list", LIST))["data"] == []


async def test_lone_surrogate_in_a_param_is_invalid_params(server: ServerUnderTest) -> None:
    """It reaches SQLite as text it cannot encode: the client's fault, not -32603."""
    async with server.connect() as client:
        frame = '{"jsonrpc":"2.0","id":7,"method":"thread/read","params":{"threadId":"t\\ud800"}}'
        reply = await client.exchange(frame, 7)
        error = assert_error_frame(reply, rpc_errors.INVALID_PARAMS, 7)
        assert "surrogate" in error["data"]["detail"]
        assert (await client.request("thread/list", LIST))["data"] == []


# --- params --------------------------------------------------------------------


async def test_invalid_params_name_the_field(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        cases: list[tuple[str, Any, str]] = [
            ("thread/start", {}, "'identity' is required."),
            ("thread/start", None, "'identity' is required."),
            ("thread/start", {"identity": {"userId": "u"}}, "'identity.channelName' is required."),
            ("thread/read", {"threadId": 5}, "'threadId': Input should be a valid string"),
            ("thread/list", {**LIST, "limit": 0}, "'limit': "),
            ("thread/list", {**LIST, "includeArchived": "maybe"}, "'includeArchived': "),
            ("thread/start", [1, 2], "'params' must be an object"),
            ("thread/start", "identity", "'params' must be an object"),
            ("thread/rollback", {"threadId": "t", "numTurns": 0}, "'numTurns': "),
        ]
        for method, params, detail in cases:
            failure = await client.fail(method, params)
            assert failure.code == rpc_errors.INVALID_PARAMS, (method, params)
            assert failure.message == "Invalid params"
            text = failure.data["detail"]
            assert text.startswith(detail), (method, params, text)
            assert "\n" not in text and len(text) < 200


async def test_wrong_type_for_object_field(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        failure = await client.fail("thread/start", {"identity": "cli"})
        assert failure.code == rpc_errors.INVALID_PARAMS
        assert failure.data["detail"].startswith("'identity': ")
        assert "pydantic" not in failure.data["detail"]


async def test_method_not_found_format(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        for method in ("foo", "thread/explode", "thread/list/", "THREAD/LIST", ""):
            failure = await client.fail(method, {})
            assert failure.code == rpc_errors.METHOD_NOT_FOUND
            assert failure.message == f"Method not found: {method}"
            assert failure.data is None


async def test_unknown_thread_errors(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        for method in (
            "thread/read",
            "thread/resume",
            "thread/pause",
            "thread/archive",
            "thread/unarchive",
            "thread/delete",
            "thread/subscribe",
        ):
            failure = await client.fail(method, {"threadId": "thread_19700101_nope00"})
            assert failure.code == rpc_errors.THREAD_NOT_FOUND, method
            assert failure.message == "Thread not found: thread_19700101_nope00"


# --- things that get no answer ----------------------------------------------------


async def test_unknown_notifications_and_stray_responses_are_ignored(
    server: ServerUnderTest,
) -> None:
    async with server.connect() as client:
        mark = client.mark()
        for message in [
            {"jsonrpc": "2.0", "method": "no/such/notification", "params": {"x": 1}},
            {"jsonrpc": "2.0", "method": "initialized"},
            {"jsonrpc": "2.0", "method": "thread/start", "params": LIST},
            {"jsonrpc": "2.0", "method": 12},
            {"jsonrpc": "2.0", "id": 999, "result": {}},
            {"jsonrpc": "2.0", "id": "nobody", "result": None},
            {"jsonrpc": "2.0", "id": 9995, "error": {"code": 1, "message": "m"}},
        ]:
            await client.send(message)
        await client.quiet_after(mark)
        # The notification-shaped thread/start did not create anything.
        assert (await client.request("thread/list", LIST))["data"] == []


async def test_stdio_line_handling(workspace: Path) -> None:
    async with running_server("stdio", workspace) as sut, sut.connect() as client:
        stream = client.stream
        assert isinstance(stream, ProcessStream)
        mark = client.mark()
        # Blank lines are skipped; CRLF line endings are accepted.
        await stream.send_bytes(b"\n   \n\t\r\n")
        await stream.send_bytes(request("crlf").encode() + b"\r\n")
        assert (await client.response("crlf"))["result"] == {"data": []}
        assert len(client.messages) - mark == 1
        # Invalid UTF-8 is a parse error.
        await stream.send_bytes(b'{"jsonrpc":"2.0","id":1,"method":"\xff\xfe"}\n')
        reply = await client.wait(lambda m: m.get("id", 0) is None, start=mark)
        error = assert_error_frame(reply, rpc_errors.PARSE_ERROR, None)
        assert "UTF-8" in error["data"]["detail"]
        # An over-long line is skipped with one -32600 and the stream recovers.
        mark = client.mark()
        await stream.send_bytes(b'{"x":"' + b"a" * (4 * 1024 * 1024 + 10) + b'"}\n')
        await stream.send_bytes(request("after").encode() + b"\n")
        assert (await client.response("after"))["result"] == {"data": []}
        errors = [m for m in client.since(mark) if "error" in m]
        assert len(errors) == 1
        assert_error_frame(errors[0], rpc_errors.INVALID_REQUEST, None)
        assert "limit" in errors[0]["error"]["data"]["detail"]


# --- server-side failures ------------------------------------------------------------


@pytest.mark.parametrize("kind", ["memory", "websocket"])
async def test_in_flight_gate_answers_overloaded(kind: str, workspace: Path) -> None:
    async with (
        running_server(kind, workspace, Limits(max_in_flight=1)) as sut,
        sut.connect() as client,
    ):
        assert sut.app is not None
        lock = sut.app.db._write_lock
        await lock.acquire()
        try:
            # thread/start needs the write lock, so it stays in flight.
            await client.send_raw(request("slow", "thread/start"))
            reply = await client.exchange(request("fast"), "fast")
            error = assert_error_frame(reply, rpc_errors.SERVER_OVERLOADED, "fast")
            assert error["message"] == "Server overloaded; retry later."
            assert not any(m.get("id") == "slow" for m in client.messages)
        finally:
            lock.release()
        slow = await client.response("slow")
        thread = slow["result"]["thread"]
        # The slot is held until the request's after-response work (the
        # thread/started notification) is done.
        await client.notification("thread/started")
        listed = await client.request("thread/list", LIST)
        assert [summary["id"] for summary in listed["data"]] == [thread["id"]]


@pytest.mark.parametrize("kind", ["memory", "websocket"])
async def test_internal_error_hides_details_and_keeps_serving(
    kind: str,
    workspace: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with running_server(kind, workspace) as sut, sut.connect() as client:
        assert sut.app is not None
        thread = await start_thread(client)

        async def boom(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("disk on fire at /secret/path")

        monkeypatch.setattr(sut.app.threads.repo, "get", boom)
        with caplog.at_level(logging.ERROR, logger="appserver.rpc"):
            failure = await client.fail("thread/read", {"threadId": thread["id"]})
        assert failure.code == rpc_errors.INTERNAL_ERROR
        assert failure.message == "Internal error"
        wire = json.dumps(failure.error)
        for leak in ("disk on fire", "/secret/path", "RuntimeError", "Traceback", "File "):
            assert leak not in wire
        ref = failure.data["detail"].rsplit(" ", 1)[-1]
        logged = [r for r in caplog.records if ref in r.getMessage()]
        assert logged and logged[0].exc_info is not None

        # Other requests keep working while the fault persists, and after it is gone.
        assert len((await client.request("thread/list", LIST))["data"]) == 1
        monkeypatch.undo()
        read = await client.request("thread/read", {"threadId": thread["id"]})
        assert read["thread"]["id"] == thread["id"]


async def test_errors_are_answered_promptly(server: ServerUnderTest) -> None:
    """A burst of bad frames gets one answer each, in order, quickly."""
    async with server.connect() as client:
        with anyio.fail_after(5):
            frames = ["{", "42", request(1.5), raw({"jsonrpc": "2.0", "id": "x"}), "[]"]
            mark = client.mark()
            for frame in frames:
                await client.send_raw(frame)
            await client.settle()
        answers = client.since(mark)
        codes = [m["error"]["code"] if "error" in m else "ok" for m in answers]
        assert codes == [-32700, -32600, -32600, -32600, -32600, "ok"]


def test_an_over_long_last_line_without_newline_is_refused_not_dropped() -> None:
    """At end of input, a final line that was too long is reported like any
    other over-long line, not mistaken for a quiet end of input."""
    from appserver.transport.base import FrameTooLarge
    from appserver.transport.stdio import LineReader

    reader = LineReader(max_line_bytes=8)
    reader.feed(b"short\n" + b"x" * 20)
    assert reader.next_line() == b"short"
    assert reader.next_line() is None
    with pytest.raises(FrameTooLarge):
        reader.rest()
    assert reader.rest() is None
    reader.feed(b"tail")
    assert reader.next_line() is None
    assert reader.rest() == b"tail"
