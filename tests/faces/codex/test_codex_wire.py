"""Codex's envelope over a real ``appserver codex app-server`` process: frames
without ``"jsonrpc"``, answers without it, Codex's refusals."""

from __future__ import annotations

import contextlib
import json
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tests.support.servers import child_env


def _exchange(workspace: Path, *frames: str) -> list[dict[str, object]]:
    command = [sys.executable, "-m", "appserver", "codex", "app-server", "--provider", "offline"]
    done = subprocess.run(
        command,
        input="\n".join(frames) + "\n",
        capture_output=True,
        text=True,
        cwd=workspace,
        env=child_env(),
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


class CodexProcess:
    """A live ``appserver codex app-server`` on pipes: frames in, frames out."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.process, self.stdin, self.stdout = process, process.stdin, process.stdout
        self.seen: list[dict[str, Any]] = []

    def send(self, *frames: dict[str, Any]) -> None:
        self.stdin.write("".join(json.dumps(frame) + "\n" for frame in frames))
        self.stdin.flush()

    def until(self, match: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """The next frame ``match`` takes (each frame read is kept in ``seen``)."""
        for line in self.stdout:
            frame: dict[str, Any] = json.loads(line)
            self.seen.append(frame)
            if match(frame):
                return frame
        raise AssertionError("the server ended")

    def answer(self, request_id: int) -> dict[str, Any]:
        return self.until(lambda frame: frame.get("id") == request_id and "method" not in frame)

    def thread(self, hello: dict[str, Any] | None = None, **start: Any) -> str:
        """``initialize`` (``hello`` its params) and ``thread/start``; the thread's id."""
        params = hello or {"clientInfo": {"name": "probe"}}
        self.send({"id": 1, "method": "initialize", "params": params})
        self.send({"id": 2, "method": "thread/start", "params": start})
        return str(self.answer(2)["result"]["thread"]["id"])

    def turn(self, thread_id: str, text: str) -> None:
        parts = [{"type": "text", "text": text}]
        self.send(
            {"id": 3, "method": "turn/start", "params": {"threadId": thread_id, "input": parts}}
        )


@contextlib.contextmanager
def codex_process(workspace: Path) -> Iterator[CodexProcess]:
    command = [sys.executable, "-m", "appserver", "codex", "app-server", "--provider", "offline"]
    with subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=workspace,
        env=child_env(),
        text=True,
    ) as process:
        try:
            yield CodexProcess(process)
        finally:
            if process.poll() is None:  # a test that failed midway
                process.kill()


def test_requests_without_jsonrpc_are_answered_without_it(workspace: Path) -> None:
    out = _exchange(
        workspace,
        '{"id": 1, "method": "thread/list", "params": {}}',
        '{"id": "a", "method": "initialize", "params": {"clientInfo": {"name": "probe"}}}',
        '{"id": 2, "method": "initialize", "params": {}}',
        "not json",
        '{"id": 3.5, "method": "thread/list"}',
        '{"id": 4, "method": "fuzzy/none", "params": {}}',
        '{"id": 5, "method": "turn/interrupt", "params": {"threadId": "t", "turnId": "t:x"}}',
        '{"jsonrpc": "2.0", "id": 6, "method": "thread/list"}',
    )
    by_id = {frame["id"]: frame for frame in out}
    assert all("jsonrpc" not in frame for frame in out)
    assert by_id[1]["error"] == {"code": -32600, "message": "Not initialized"}
    result = by_id["a"]["result"]
    assert isinstance(result, dict) and str(result["userAgent"]).startswith("probe/0.169.0 ")
    assert by_id[2]["error"] == {"code": -32600, "message": "Already initialized"}
    assert by_id[4]["error"]["code"] == -32601  # type: ignore[index]
    assert by_id[5]["error"]["code"] == -32600  # type: ignore[index]
    assert by_id[6]["result"] == {"data": [], "nextCursor": None}
    assert set(by_id) == {1, "a", 2, 4, 5, 6}  # the bad lines got no answer


def test_text_with_a_lone_surrogate_is_refused_not_an_internal_error(workspace: Path) -> None:
    out = _exchange(
        workspace,
        '{"id": 1, "method": "initialize", "params": {"clientInfo": {"name": "probe"}}}',
        '{"id": 2, "method": "thread/read", "params": {"threadId": "t\\ud800"}}',
        '{"id": 3, "method": "thread/list", "params": {"searchTerm": "\\udc00"}}',
    )
    by_id = {frame["id"]: frame for frame in out}
    for request in (2, 3):
        assert by_id[request]["error"] == {  # type: ignore[comparison-overlap]
            "code": -32600,
            "message": "Invalid request: params hold a lone UTF-16 surrogate",
        }


def test_a_cwd_other_than_the_workspace_is_refused(workspace: Path, tmp_path: Path) -> None:
    out = _exchange(
        workspace,
        '{"id": 1, "method": "initialize", "params": {}}',
        json.dumps({"id": 2, "method": "thread/start", "params": {"cwd": str(tmp_path)}}),
    )
    error = out[-1]["error"]
    assert isinstance(error, dict) and "workspace" in str(error["message"])


def test_a_large_prompt_does_not_drop_a_client_that_reads(workspace: Path) -> None:
    """A 9 MB text (far under the 64 MiB line limit) comes back twice, in the
    userMessage's item/started and item/completed: the default backlog holds
    both, where a 16 MiB one dropped the client and ended the process."""
    command = [sys.executable, "-m", "appserver", "codex", "app-server", "--provider", "offline"]
    with subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        cwd=workspace, env=child_env(),
    ) as process:  # fmt: skip
        stdin, stdout = process.stdin, process.stdout
        assert stdin is not None and stdout is not None

        def send(frame: dict[str, object]) -> None:
            stdin.write(json.dumps(frame).encode() + b"\n")
            stdin.flush()

        def until(method: str | None = None, answer: int | None = None) -> dict[str, Any]:
            while line := stdout.readline():
                frame: dict[str, Any] = json.loads(line)
                if frame.get("method") == method if method else frame.get("id") == answer:
                    return frame
            raise AssertionError("the process ended")

        try:
            send({"id": 1, "method": "initialize", "params": {"clientInfo": {"name": "big"}}})
            until(answer=1)
            send({"method": "initialized"})
            send({"id": 2, "method": "thread/start", "params": {}})
            thread = until(answer=2)["result"]["thread"]["id"]
            text = "?stream 1\n" + "x" * 9_000_000
            turn = {"threadId": thread, "input": [{"type": "text", "text": text}]}
            send({"id": 3, "method": "turn/start", "params": turn})
            assert until("turn/completed")["params"]["turn"]["status"] == "completed"
            stdin.close()
            assert process.wait(60) == 0
        finally:
            if process.poll() is None:
                process.kill()


def test_the_first_of_two_answers_to_an_approval_counts(workspace: Path) -> None:
    """As on the DotCraft door: a second answer to a request already answered
    is ignored (it decided the command once it was declined)."""
    with codex_process(workspace) as codex:
        codex.turn(codex.thread(approvalPolicy="untrusted"), "!touch twice-answered")
        asked = codex.until(lambda f: f.get("method") == "item/commandExecution/requestApproval")
        codex.send(
            {"id": asked["id"], "result": {"decision": "decline"}},
            {"id": asked["id"], "result": {"decision": "accept"}},
        )
        codex.until(lambda f: f.get("method") == "turn/completed")
        codex.stdin.close()
        assert codex.process.wait(timeout=30) == 0
    assert not (workspace / "twice-answered").exists()


def test_a_search_term_too_long_to_match_finds_nothing(workspace: Path) -> None:
    out = _exchange(
        workspace,
        '{"id": 1, "method": "initialize", "params": {"clientInfo": {"name": "probe"}}}',
        '{"id": 2, "method": "thread/start", "params": {}}',
        '{"id": 3, "method": "thread/list", "params": {"searchTerm": "%s"}}' % ("%" * 50_010),
        '{"id": 4, "method": "thread/list", "params": {"searchTerm": "%s"}}' % ("a" * 9_000),
    )
    by_id = {frame.get("id"): frame for frame in out if "id" in frame}
    assert by_id[3]["result"] == {"data": [], "nextCursor": None}
    assert by_id[4]["result"] == {"data": [], "nextCursor": None}


def test_sigterm_stores_the_turn_in_flight_as_cancelled(workspace: Path) -> None:
    """A supervisor's stop is SIGINT's: the turn is stored cancelled (it was left
    running, as after kill -9, to be failed at the next start), exit 143."""
    with codex_process(workspace) as codex:
        codex.turn(codex.thread(), "?stream 400\n?delay 20")
        codex.until(lambda f: f.get("method") == "item/agentMessage/delta")
        codex.process.send_signal(signal.SIGTERM)
        assert codex.process.wait(timeout=30) == 143
    database = sqlite3.connect(workspace / ".craft" / "appserver.db")
    with contextlib.closing(database):
        statuses = database.execute("SELECT status FROM turns").fetchall()
    assert statuses == [("cancelled",)]


def test_opted_out_notifications_are_not_sent(workspace: Path) -> None:
    quiet = ["item/agentMessage/delta", "thread/started", "thread/status/changed"]
    hello = {"clientInfo": {"name": "probe"}, "capabilities": {"optOutNotificationMethods": quiet}}
    with codex_process(workspace) as codex:
        codex.turn(codex.thread(hello), "?stream 3")
        codex.until(lambda f: f.get("method") == "turn/completed")
        codex.stdin.close()
        assert codex.process.wait(timeout=30) == 0
    seen = codex.seen
    methods = {frame.get("method") for frame in seen}
    assert not methods & set(quiet), methods
    assert {"turn/started", "item/completed", "turn/completed"} <= methods
    # As Codex ends a completed turn: with its final answer, itemsView "summary".
    (ended,) = [
        frame["params"]["turn"] for frame in seen if frame.get("method") == "turn/completed"
    ]
    assert ended["itemsView"] == "summary"
    assert [item["type"] for item in ended["items"]] == ["agentMessage"]
    assert ended["items"][0]["text"] == "chunk 1 chunk 2 chunk 3 "


def test_thread_list_filters_as_codex_does(workspace: Path) -> None:
    lines = [
        '{"id": 1, "method": "initialize", "params": {"clientInfo": {"name": "probe"}}}',
        '{"id": 2, "method": "thread/start", "params": {}}',
        '{"id": 3, "method": "thread/start", "params": {}}',
    ]
    asks = {
        10: {"cwd": "/"},
        11: {"cwd": str(workspace)},
        12: {"sourceKinds": ["cli", "vscode"]},
        13: {"sourceKinds": ["appServer"]},
        14: {"modelProviders": ["someone-else"]},
        15: {"limit": 0},
        16: {"excludedThreadIds": ["EXCLUDED"]},
    }
    first = _exchange(workspace, *lines)  # the threads, then list them in a second process
    excluded = next(f["result"]["thread"]["id"] for f in first if f.get("id") == 2)
    asks[16] = {"excludedThreadIds": [excluded]}
    out = _exchange(
        workspace,
        lines[0],
        *(json.dumps({"id": i, "method": "thread/list", "params": p}) for i, p in asks.items()),
    )
    counts = {frame["id"]: len(frame["result"]["data"]) for frame in out if frame.get("id") in asks}
    assert counts == {10: 0, 11: 2, 12: 0, 13: 2, 14: 0, 15: 1, 16: 1}


def test_a_command_that_printed_nothing_has_no_output(workspace: Path) -> None:
    """As Codex: `aggregatedOutput` is null, not our "(no output)"."""
    with codex_process(workspace) as codex:
        codex.turn(codex.thread(approvalPolicy="untrusted"), "!true")
        asked = codex.until(lambda f: f.get("method") == "item/commandExecution/requestApproval")
        codex.send({"id": asked["id"], "result": {"decision": "accept"}})
        done = codex.until(
            lambda f: (
                f.get("method") == "item/completed"
                and f["params"]["item"]["type"] == "commandExecution"
            )
        )
        codex.stdin.close()
        assert codex.process.wait(timeout=30) == 0
    item = done["params"]["item"]
    assert (item["status"], item["exitCode"], item["aggregatedOutput"]) == ("completed", 0, None)
