"""``thread/revert``, ``fuzzyFileSearch`` and ``command/exec`` through OpenAI's
Python SDK (``openai-codex``), behind the recorder: every frame the face sent
validates against Codex 0.169's own schema."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from openai_codex import Codex, CodexConfig
from openai_codex.client import CodexClient
from openai_codex.errors import InvalidRequestError
from openai_codex.generated.v2_all import (
    CommandExecResponse,
    FuzzyFileSearchResult,
    ThreadRevertResponse,
)

from appserver.faces.codex.fuzzy import _search, fuzzy_match

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


@pytest.fixture
def config(config: CodexConfig, every_frame_checked: None) -> CodexConfig:
    """The shared configuration; the session's frames are checked after the test."""
    return config


def _input_tokens(thread: object, text: str) -> int:
    result = thread.run(text)  # type: ignore[attr-defined]
    assert result.usage is not None
    return int(result.usage.last.input_tokens)


# --- thread/revert ---------------------------------------------------------------------


def test_revert_drops_the_turn_and_what_followed(config: CodexConfig, frames: Path) -> None:
    with Codex(config) as codex:
        client: CodexClient = codex._client
        thread = codex.thread_start()
        assert thread.run("the first request").final_response == "You said: the first request"
        second = thread.run("a second request the model must forget " * 20)
        reverted = client.request(
            "thread/revert",
            {"threadId": thread.id, "beforeTurnId": second.id},
            response_model=ThreadRevertResponse,
        )
        assert reverted.thread.id == thread.id and reverted.thread.turns == []
        turns = thread.read(include_turns=True).thread.turns
        assert len(turns) == 1
        assert turns[0].items[0].root.content[0].root.text == "the first request"
        # The next request is as long as in a thread that only ever had the first turn.
        fresh = codex.thread_start()
        fresh.run("the first request")
        assert _input_tokens(thread, "what next") == _input_tokens(fresh, "what next")
        assert len(thread.read(include_turns=True).thread.turns) == 2
    assert f'"method":"thread/reverted","params":{{"threadId":"{thread.id}"}}' in (
        frames.read_text()
    )


def test_revert_refuses_an_unknown_turn_and_a_running_one(config: CodexConfig) -> None:
    with CodexClient(config) as client:
        client.initialize()
        thread_id = client.thread_start({}).thread.id
        other_id = client.thread_start({}).thread.id
        done = client.turn_start(thread_id, "one").turn
        while client.next_turn_notification(done.id).method != "turn/completed":
            pass
        raw = client._request_raw
        for bad in (f"{other_id}:{done.id.rpartition(':')[2]}", f"{thread_id}:nope", "nope"):
            with pytest.raises(InvalidRequestError, match="is not a turn of thread"):
                raw("thread/revert", {"threadId": thread_id, "beforeTurnId": bad})
        running = client.turn_start(thread_id, "?stream 400\n?delay 20").turn
        with pytest.raises(InvalidRequestError, match="already in progress"):
            raw("thread/revert", {"threadId": thread_id, "beforeTurnId": done.id})
        client.turn_interrupt(thread_id, running.id)
        while client.next_turn_notification(running.id).method != "turn/completed":
            pass
        read = client.thread_read(thread_id, include_turns=True).thread
        assert len(read.turns) == 2


# --- fuzzyFileSearch -------------------------------------------------------------------


def test_fuzzy_search_ranks_names_and_respects_gitignore(
    config: CodexConfig, workspace: Path, tmp_path: Path
) -> None:
    for name in (
        "src/main.py",
        "src/domain.py",
        "docs/mail_index.md",
        "build/main.py",
        "notes.txt",
    ):
        (workspace / name).parent.mkdir(parents=True, exist_ok=True)
        (workspace / name).write_text("x\n")
    (workspace / ".gitignore").write_text("build/\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "main.py").write_text("x\n")
    with CodexClient(config) as client:
        client.initialize()
        params = {"query": "main", "roots": [str(workspace), str(outside)]}
        answer = client._request_raw("fuzzyFileSearch", params)
        assert isinstance(answer, dict)
        files = [FuzzyFileSearchResult.model_validate(f) for f in answer["files"]]
        paths = [f.path for f in files]
        assert paths[0] == "src/main.py"  # a whole file name beats scattered letters
        assert set(paths) == {"src/main.py", "src/domain.py", "docs/mail_index.md"}
        top = files[0]
        assert (top.root, top.file_name, top.match_type.value) == (
            str(workspace),
            "main.py",
            "file",
        )
        assert [i.root for i in top.indices or []] == [4, 5, 6, 7]
        assert top.score > files[1].score
        under = client._request_raw("fuzzyFileSearch", {"query": "MIX", "roots": ["docs"]})
        assert isinstance(under, dict)
        assert [(f["root"], f["path"]) for f in under["files"]] == [("docs", "mail_index.md")]
        # A name that is not UTF-8 comes back with U+FFFD, never a lone surrogate.
        os.makedirs(os.fsencode(workspace / "odd"), exist_ok=True)
        with open(os.fsencode(workspace / "odd") + b"/caf\xe9_main.txt", "w") as odd:
            odd.write("x\n")
        named = client._request_raw("fuzzyFileSearch", {"query": "cafmain", "roots": ["odd"]})
        assert isinstance(named, dict)
        assert [f["path"] for f in named["files"]] == ["caf\ufffd_main.txt"]
        nothing = client._request_raw("fuzzyFileSearch", {"query": "", "roots": [str(workspace)]})
        assert nothing == {"files": []}
        for roots in (["bad\u0000root"], [str(outside)], ["no/such/dir"]):
            params = {"query": "main", "roots": roots}
            assert client._request_raw("fuzzyFileSearch", params) == {"files": []}


def test_a_search_cancelled_by_a_later_one_answers_nothing(workspace: Path) -> None:
    (workspace / "main.py").write_text("x\n")
    live, cancelled = threading.Event(), threading.Event()
    cancelled.set()  # what a later search with the same cancellationToken does
    assert [f["path"] for f in _search([(".", ".")], "main", workspace, live)] == ["main.py"]
    assert _search([(".", ".")], "main", workspace, cancelled) == []


def test_the_matcher_scores_runs_and_word_starts_higher() -> None:
    assert fuzzy_match("abc", "xyz") is None
    contiguous, _ = fuzzy_match("main", "src/main.py") or (0, [])
    scattered, _ = fuzzy_match("main", "my/ai/n.txt") or (0, [])
    assert contiguous > scattered
    _, indices = fuzzy_match("fb", "src/FooBar.py") or (0, [])
    assert indices == [4, 7]  # the hump, not the b of nothing


# --- command/exec ----------------------------------------------------------------------


def _gone(pid: int) -> bool:
    """No such process, or only its zombie (dead, not yet reaped by init)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


def test_command_exec_returns_output_and_exit_code(config: CodexConfig, workspace: Path) -> None:
    (workspace / "sub").mkdir()
    with CodexClient(config) as client:
        client.initialize()
        script = "echo out; echo err >&2; pwd; exit 3"
        result = client.request(
            "command/exec",
            {"command": ["sh", "-c", script], "cwd": "sub", "env": {"GREETING": None}},
            response_model=CommandExecResponse,
        )
        assert result.exit_code == 3
        assert result.stdout == f"out\n{(workspace / 'sub').resolve()}\n"
        assert result.stderr == "err\n"
        capped = client.request(
            "command/exec",
            {"command": ["sh", "-c", "printf 0123456789"], "outputBytesCap": 4},
            response_model=CommandExecResponse,
        )
        assert (capped.exit_code, capped.stdout) == (0, "0123")
        raw = client._request_raw
        for params, words in (
            ({"command": []}, "non-empty array"),
            ({"command": ["true"], "cwd": "/"}, "inside the workspace"),
            ({"command": ["true"], "tty": True}, "tty is not supported"),
            ({"command": ["true"], "sandboxPolicy": {"type": "readOnly"}}, "no OS sandbox"),
            ({"command": ["no-such-command-here"]}, "could not start"),
            ({"command": ["true"], "env": {"A=B": "x"}}, "must be a string or null"),
            ({"command": ["true"], "timeoutMs": 1, "disableTimeout": True}, "cannot be combined"),
        ):
            with pytest.raises(InvalidRequestError, match=words):
                raw("command/exec", params)


def test_command_exec_kills_the_group_at_the_timeout(config: CodexConfig, workspace: Path) -> None:
    pid_file = workspace / "child.pid"
    script = f"sleep 60 & echo $! > {pid_file}; wait"
    with CodexClient(config) as client:
        client.initialize()
        started = time.monotonic()
        result = client.request(
            "command/exec",
            {"command": ["sh", "-c", script], "timeoutMs": 300},
            response_model=CommandExecResponse,
        )
        assert time.monotonic() - started < 10
        assert result.exit_code == 124
        assert "timed out" in result.stderr
        assert _gone(int(pid_file.read_text()))  # the background child went with its group


def test_command_exec_is_off_in_an_untrusted_workspace(
    config: CodexConfig, workspace: Path
) -> None:
    # A .craft/ that came with the checkout (not made by the server): not trusted.
    (workspace / ".craft").mkdir()
    (workspace / ".craft" / "HEARTBEAT.md").write_text("# checked in\n")
    with CodexClient(config) as client:
        client.initialize()
        with pytest.raises(InvalidRequestError, match="workspace is not trusted"):
            client._request_raw("command/exec", {"command": ["touch", "made"]})
    assert not (workspace / "made").exists()


def test_a_turn_start_while_a_turn_runs_is_more_input_for_it(config: CodexConfig) -> None:
    """As Codex 0.169: the answer is the running turn, and the input is the
    model's within it (the SDK's thread.turn() while one runs)."""
    with CodexClient(config) as client:
        client.initialize()
        thread_id = client.thread_start({}).thread.id
        running = client.turn_start(thread_id, "?stream 200\n?delay 20").turn
        again = client.turn_start(thread_id, "and this too").turn
        assert again.id == running.id
        while client.next_turn_notification(running.id).method != "turn/completed":
            pass
        (turn,) = client.thread_read(thread_id, include_turns=True).thread.turns
        texts = [
            item.root.content[0].root.text  # type: ignore[union-attr]
            for item in turn.items
            if item.root.type == "userMessage"
        ]
        assert texts == ["?stream 200\n?delay 20", "and this too"]
