"""External-CLI SubAgents (``cli-oneshot``): the command line a profile makes,
the environment, the answer it reads, and how a run ends (runtime/subagent_cli*.py).

What DotCraft's CliOneshotRuntimeTests assert, against a tiny fake CLI (a
Python script in tmp_path) that records what it was given and prints what it
is told to.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from appserver.protocol.subagent_profiles import SubAgentProfileWrite
from appserver.runtime.subagent_cli import (
    TRUNCATION_SUFFIX,
    build_invocation,
    session_id,
    split_arguments,
    tokens,
    truncate,
)
from appserver.runtime.subagent_cli_run import run_profile
from appserver.tools.reaper import group_alive

FAKE = """\
import json, os, subprocess, sys, time
record = os.environ.get("FAKE_RECORD")
data = {
    "argv": sys.argv[1:],
    "env": dict(os.environ),
    "stdin": sys.stdin.read(),
    "cwd": os.getcwd(),
    "pid": os.getpid(),
}
if record:
    with open(record, "w") as f:
        json.dump(data, f)
if "FAKE_FILE_TEXT" in os.environ:
    path = sys.argv[sys.argv.index("-o") + 1]
    with open(path, "w") as f:
        f.write(os.environ["FAKE_FILE_TEXT"])
if os.environ.get("FAKE_HANG"):
    subprocess.Popen(["sleep", "30"])  # keeps stdout open after this exits
if os.environ.get("FAKE_SLEEP"):
    subprocess.Popen(["sleep", "30"])
    time.sleep(float(os.environ["FAKE_SLEEP"]))
sys.stdout.write(os.environ.get("FAKE_STDOUT", "fake answer\\n"))
sys.stderr.write(os.environ.get("FAKE_STDERR", ""))
sys.exit(int(os.environ.get("FAKE_EXIT", "0")))
"""


@pytest.fixture
def fake(tmp_path: Path) -> Path:
    script = tmp_path / "fake-cli"
    script.write_text(f"#!{sys.executable}\n{FAKE}")
    script.chmod(0o755)
    return script


def profile(fake: Path, record: Path | None = None, **fields: Any) -> SubAgentProfileWrite:
    env = dict(fields.pop("env", {}))
    if record is not None:
        env["FAKE_RECORD"] = str(record)
    return SubAgentProfileWrite.model_validate(
        {"runtime": "cli-oneshot", "bin": str(fake), "env": env, **fields}
    )


def recorded(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


async def run(definition: SubAgentProfileWrite, task: str = "do it", **options: Any) -> Any:
    cwd = options.pop("cwd", Path.cwd())
    return await run_profile(definition, "fake", task, cwd, **options)


# --- the command line -------------------------------------------------------------


def test_split_arguments_groups_double_quotes() -> None:
    assert split_arguments('--mode ask  "two words" a"b c"d') == [
        "--mode",
        "ask",
        "two words",
        "ab cd",
    ]
    assert split_arguments('""') == [""]
    assert split_arguments("   ") == []


def test_argument_order_args_resume_permission_output_then_task(tmp_path: Path) -> None:
    definition = SubAgentProfileWrite.model_validate(
        {
            "runtime": "cli-oneshot",
            "bin": "tool",
            "args": ["exec"],
            "resumeArgTemplate": "resume {sessionId}",
            "readOutputFile": True,
            "outputFileArgTemplate": '--out "{path}"',
        }
    )
    out = tmp_path / "with space.txt"
    invocation = build_invocation(
        definition,
        "p",
        "/bin/tool",
        "the task",
        resume_session_id="s-1",
        permission_args=["--sandbox", "read-only"],
        output_file=out,
        environ={},
    )
    assert invocation.argv == [
        "/bin/tool",
        "exec",
        "resume",
        "s-1",
        "--sandbox",
        "read-only",
        "--out",
        str(out),
        "the task",
    ]
    assert invocation.stdin is None and invocation.input_mode == "arg"
    # Without a stored session there are no resume arguments.
    plain = build_invocation(definition, "p", "/bin/tool", "t", output_file=out, environ={})
    assert plain.argv == ["/bin/tool", "exec", "--out", str(out), "t"]


async def test_the_task_as_the_last_argument_stays_one_word(fake: Path, tmp_path: Path) -> None:
    record = tmp_path / "record.json"
    result = await run(profile(fake, record, args=["-p"]), "two words", cwd=tmp_path)
    assert result.text == "fake answer" and not result.is_error
    seen = recorded(record)
    assert seen["argv"] == ["-p", "two words"]
    assert seen["stdin"] == ""  # stdin is closed at once
    assert seen["cwd"] == str(tmp_path.resolve())


async def test_input_modes(fake: Path, tmp_path: Path) -> None:
    record = tmp_path / "record.json"
    await run(profile(fake, record, inputMode="stdin"), "on stdin\nline two")
    assert recorded(record)["stdin"] == "on stdin\nline two"
    assert recorded(record)["argv"] == []
    await run(
        profile(fake, record, inputMode="arg-template", inputArgTemplate="--prompt={task} -q")
    )
    assert recorded(record)["argv"] == ["--prompt=do it", "-q"]
    await run(profile(fake, record, inputMode="env", inputEnvKey="TASK_TEXT"), "in env")
    seen = recorded(record)
    assert seen["env"]["TASK_TEXT"] == "in env" and seen["argv"] == []


async def test_zene_host_v1_wraps_the_task_in_one_request_line(fake: Path, tmp_path: Path) -> None:
    record = tmp_path / "record.json"
    response = {"ok": True, "text": "zene says hi", "usage": {"total_tokens": 9}}
    definition = profile(
        fake,
        record,
        inputMode="stdin",
        inputFormat="zene-host-v1",
        outputFormat="json",
        outputJsonPath="text",
        outputTotalTokensJsonPath="usage.total_tokens",
        timeout=30,
        env={"FAKE_STDOUT": json.dumps(response)},
    )
    result = await run(definition, "hello zene", session="subagent-thr_1")
    request = json.loads(recorded(record)["stdin"])
    assert request["prompt"] == "hello zene" and request["session_id"] == "subagent-thr_1"
    assert request["type"] == "run" and request["protocol_version"] == 1
    assert request["timeout_ms"] == 30_000
    assert (result.text, result.input_tokens, result.output_tokens) == ("zene says hi", 0, 9)
    failed = {"ok": False, "text": "", "error_code": "TIMEOUT", "error_message": "too slow"}
    definition.env = {**(definition.env or {}), "FAKE_STDOUT": json.dumps(failed)}
    result = await run(definition)
    assert result.is_error and result.text == "Error: TIMEOUT: too slow"


# --- the environment --------------------------------------------------------------


async def test_env_is_rebuilt_from_the_allow_list(fake: Path, tmp_path: Path) -> None:
    record = tmp_path / "record.json"
    environ = {
        "PATH": os.environ["PATH"],
        "HOME": "/home/someone",
        "OPENAI_API_KEY": "sk-allowed",
        "SECRET_TOKEN": "never",
        "MY_VAR": "passed",
        "OTHER": "dropped",
    }
    definition = profile(
        fake, record, envPassthrough=["MY_VAR", "ABSENT"], env={"HOME": "/overridden"}
    )
    await run(definition, environ=environ)
    env = recorded(record)["env"]
    assert env["PATH"] == os.environ["PATH"] and env["OPENAI_API_KEY"] == "sk-allowed"
    assert env["MY_VAR"] == "passed" and "ABSENT" not in env
    assert env["HOME"] == "/overridden"  # `env` is applied last
    assert "SECRET_TOKEN" not in env and "OTHER" not in env


# --- the answer -------------------------------------------------------------------


async def test_json_output_and_token_paths(fake: Path) -> None:
    stdout = json.dumps({"result": {"text": "answer"}, "usage": {"in": 3, "out": "5"}})
    definition = profile(
        fake,
        outputFormat="json",
        outputJsonPath="result.text",
        outputInputTokensJsonPath="usage.in",
        outputOutputTokensJsonPath="usage.out",
        env={"FAKE_STDOUT": stdout},
    )
    result = await run(definition)
    assert (result.text, result.input_tokens, result.output_tokens) == ("answer", 3, 5)
    # Not a string: its JSON. A missing path or bad JSON: a warning, then stdout.
    definition.output_json_path = "usage"
    assert (await run(definition)).text == '{"in": 3, "out": "5"}'
    definition.output_json_path = "nope"
    text = (await run(definition)).text
    assert text.startswith("Warning: Failed to extract JSON path 'nope'") and stdout in text
    definition.env = {"FAKE_STDOUT": "not json"}
    text = (await run(definition)).text
    assert text.startswith("Warning: Failed to parse JSON output") and text.endswith("not json")


def test_tokens_total_counts_as_output_only_when_the_others_are_zero() -> None:
    definition = SubAgentProfileWrite(
        runtime="cli-oneshot",
        output_input_tokens_json_path="u.i",
        output_total_tokens_json_path="u.t",
    )
    assert tokens('{"u": {"t": 8}}', definition) == (0, 8)
    assert tokens('{"u": {"i": 2, "t": 8}}', definition) == (2, 0)
    assert tokens("plain text", definition) == (0, 0)


async def test_the_output_file_is_preferred_and_deleted(fake: Path, tmp_path: Path) -> None:
    record = tmp_path / "record.json"
    definition = profile(
        fake,
        record,
        readOutputFile=True,
        deleteOutputFileAfterRead=True,
        outputFileArgTemplate="-o {path}",
        env={"FAKE_FILE_TEXT": "from the file\n", "FAKE_STDOUT": "from stdout"},
    )
    result = await run(definition)
    assert result.text == "from the file"
    argv = recorded(record)["argv"]
    written = Path(argv[argv.index("-o") + 1])
    assert not written.exists()
    # An empty file: a warning, then stdout.
    definition.env = {**(definition.env or {}), "FAKE_FILE_TEXT": ""}
    text = (await run(definition)).text
    assert text.startswith("Warning: Output file '") and text.endswith(
        "was empty. Falling back to stdout.\nfrom stdout"
    )
    # Kept when the profile says so.
    definition.delete_output_file_after_read = False
    definition.env = {**(definition.env or {}), "FAKE_FILE_TEXT": "kept"}
    assert (await run(definition)).text == "kept"
    argv = recorded(record)["argv"]
    kept = Path(argv[argv.index("-o") + 1])
    assert kept.read_text() == "kept"
    kept.unlink()


def test_session_id_by_regex_and_json_path() -> None:
    by_regex = SubAgentProfileWrite(
        runtime="cli-oneshot", resume_session_id_regex=r'"thread_id"\s*:\s*"([^"]+)"'
    )
    jsonl = '{"type":"thread.started","thread_id":"thr_9"}\n{"type":"turn.started"}\n'
    assert session_id(jsonl, by_regex) == "thr_9"
    named = SubAgentProfileWrite(
        runtime="cli-oneshot", resume_session_id_regex=r"^session: (?<sessionId>\S+)$"
    )
    assert session_id("hello\nsession: abc-1\n", named) == "abc-1"  # .NET's named group
    by_path = SubAgentProfileWrite(runtime="cli-oneshot", resume_session_id_json_path="meta.id")
    assert session_id('{"meta": {"id": "s-2"}}', by_path) == "s-2"
    assert session_id("no json", by_path) is None


async def test_a_run_keeps_the_session_it_continued_when_none_is_printed(fake: Path) -> None:
    definition = profile(
        fake,
        resumeArgTemplate="--resume {sessionId}",
        resumeSessionIdJsonPath="session_id",
        supportsResume=True,
    )
    assert (await run(definition, resume_session_id="old")).session_id == "old"
    definition.env = {"FAKE_STDOUT": '{"session_id": "new"}'}
    assert (await run(definition, resume_session_id="old")).session_id == "new"


def test_truncation_keeps_the_limit_in_bytes() -> None:
    text = "é" * 100  # two bytes each
    cut = truncate(text, 60)
    assert cut.endswith(TRUNCATION_SUFFIX) and len(cut.encode()) <= 60
    assert truncate(text, 0) == text and truncate("short", 60) == "short"


async def test_a_long_answer_is_truncated(fake: Path) -> None:
    definition = profile(fake, maxOutputBytes=40, env={"FAKE_STDOUT": "x" * 1000})
    text = (await run(definition)).text
    assert text.endswith(TRUNCATION_SUFFIX) and len(text.encode()) <= 40


# --- how a run ends -----------------------------------------------------------------


async def test_a_non_zero_exit_is_an_error_with_both_streams(fake: Path) -> None:
    definition = profile(
        fake, env={"FAKE_EXIT": "3", "FAKE_STDOUT": "partial", "FAKE_STDERR": "boom"}
    )
    result = await run(definition)
    assert result.is_error
    assert result.text.startswith(
        f"Error: External subagent exited with code 3. Profile='fake', Binary='{fake}'."
    )
    assert result.text.endswith("\n\nSTDOUT:\npartial\n\nSTDERR:\nboom")


async def test_an_unknown_binary_is_an_error(tmp_path: Path) -> None:
    definition = SubAgentProfileWrite(runtime="cli-oneshot", bin="no-such-cli-here")
    result = await run(definition)
    assert result.is_error
    assert result.text == (
        "Error: External subagent binary 'no-such-cli-here' was not found on PATH. Profile='fake'."
    )


async def test_a_pipe_held_open_after_exit_is_killed_and_reported(
    fake: Path, tmp_path: Path
) -> None:
    record = tmp_path / "record.json"
    started = time.monotonic()
    result = await run(profile(fake, record, env={"FAKE_HANG": "1"}), pipe_grace=0.3)
    assert time.monotonic() - started < 10
    assert result.is_error and "output pipe did not close within grace period" in result.text
    assert not group_alive(recorded(record)["pid"])  # the sleep it left is gone


async def test_a_timeout_kills_the_whole_group(fake: Path, tmp_path: Path) -> None:
    record = tmp_path / "record.json"
    result = await run(profile(fake, record, timeout=1, env={"FAKE_SLEEP": "30"}))
    assert result.is_error
    assert result.text.startswith("Error: External subagent timed out after 1 seconds.")
    assert not group_alive(recorded(record)["pid"])


async def test_cancelling_a_run_kills_the_whole_group(fake: Path, tmp_path: Path) -> None:
    record = tmp_path / "record.json"
    stages: list[str] = []
    with anyio.move_on_after(1):
        await run(profile(fake, record, env={"FAKE_SLEEP": "30"}), on_stage=stages.append)
    assert not group_alive(recorded(record)["pid"])
    assert stages[0].startswith("Launching fake-cli (fake) in ") and stages[0].endswith(" via arg.")
    assert stages[-1] == "Waiting for fake-cli to finish."
