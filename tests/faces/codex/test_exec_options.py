"""``codex exec``'s ``--output-schema`` and ``-o/--output-last-message``, and
``appserver codex exec``: the real ``appserver-codex`` (or ``appserver``) binary
run once per turn as ``@openai/codex-sdk`` runs it. The structured answers come
from a scripted OpenAI server (``-c model_provider="openai"``), which also
shows what the model was told; the rest from the offline model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio

from tests.faces.codex.test_exec_jsonl import SDK_FLAGS, _env, run_exec
from tests.support.fake_models import FakeModelServer, fake_model_server, openai_text_reply

SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "integer"}},
    "required": ["answer"],
    "additionalProperties": False,
}
CHAT = "POST /v1/chat/completions"


def _schema_file(tmp_path: Path, schema: Any = SCHEMA) -> Path:
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(schema))
    return path


async def _run_on(
    fake: FakeModelServer, workspace: Path, prompt: str, *extra: str
) -> tuple[int, list[dict[str, Any]], str]:
    script = Path(sys.executable).parent / "appserver-codex"
    command = [str(script), "exec", "--experimental-json", *SDK_FLAGS, "--cd", str(workspace)]
    command += ["-c", 'model_provider="openai"', "-c", f'openai_base_url="{fake.openai_base_url}"']
    env = {**_env(), "CODEX_API_KEY": "test-key"}
    with anyio.fail_after(60):
        done = await anyio.run_process(
            [*command, *extra], input=prompt.encode(), env=env, check=False
        )
    events = [json.loads(line) for line in done.stdout.decode().splitlines()]
    return done.returncode, events, done.stderr.decode()


async def test_a_matching_answer_passes_and_the_model_is_told_the_schema(
    workspace: Path, tmp_path: Path
) -> None:
    schema = _schema_file(tmp_path)
    async with fake_model_server() as fake:
        fake.script(CHAT, openai_text_reply(['{"answer": ', "42}"]))
        code, events, stderr = await _run_on(
            fake, workspace, "what is six times seven?", "--output-schema", str(schema)
        )
    assert code == 0, stderr
    assert [e["type"] for e in events] == [
        "thread.started",
        "turn.started",
        "item.completed",
        "turn.completed",
    ]
    assert json.loads(events[2]["item"]["text"]) == {"answer": 42}
    (body,) = fake.bodies(CHAT)
    system = body["messages"][0]
    assert system["role"] == "system"
    assert "# Output format" in system["content"]
    assert "exactly one JSON value that matches the JSON Schema" in system["content"]
    assert json.dumps(SCHEMA, indent=2) in system["content"]
    # The instruction is the turn's, not the user's words.
    assert body["messages"][-1] == {"role": "user", "content": "what is six times seven?"}


async def test_a_non_matching_answer_fails_the_turn_after_showing_it(
    workspace: Path, tmp_path: Path
) -> None:
    schema = _schema_file(tmp_path)
    async with fake_model_server() as fake:
        fake.script(CHAT, openai_text_reply(['{"answer": "forty-two"}']), openai_text_reply(["hi"]))
        code, events, stderr = await _run_on(fake, workspace, "go", "--output-schema", str(schema))
        assert code == 1
        assert "appserver: the final message does not match --output-schema: at " in stderr
        assert events[2]["item"] == {
            "id": "item_0",
            "type": "agent_message",
            "text": '{"answer": "forty-two"}',
        }
        assert events[-1] == {
            "type": "turn.failed",
            "error": {
                "message": "the final message does not match --output-schema: "
                "at [\"answer\"]: 'forty-two' is not of type 'integer'"
            },
        }
        # The schema was this turn's only: the next one (no flag) is told nothing.
        code, events, _ = await _run_on(fake, workspace, "again", "resume", events[0]["thread_id"])
        assert code == 0 and events[-1]["type"] == "turn.completed"
        assert "# Output format" not in fake.bodies(CHAT)[1]["messages"][0]["content"]


def test_an_answer_that_is_not_json_fails_the_turn(workspace: Path, tmp_path: Path) -> None:
    # The offline model answers "You said: ..." whatever it is told.
    code, events, _ = run_exec(workspace, "hello", "--output-schema", str(_schema_file(tmp_path)))
    assert code == 1
    assert events[-2]["item"]["text"] == "You said: hello"
    message = events[-1]["error"]["message"]
    assert events[-1]["type"] == "turn.failed"
    assert message.startswith("the final message does not match --output-schema: not JSON (")


def test_a_bad_schema_file_refuses_the_run_before_it_starts(
    workspace: Path, tmp_path: Path
) -> None:
    not_json = tmp_path / "broken.json"
    not_json.write_text("{nope")
    cases = {
        str(tmp_path / "missing.json"): "No such file or directory",
        str(not_json): "not JSON",
        str(_schema_file(tmp_path, ["a list"])): "a JSON Schema is a JSON object",
        str(_schema_file(tmp_path, {"type": "no-such-type"})): "not a JSON Schema",
    }
    for path, why in cases.items():
        code, events, stderr = run_exec(workspace, "hello", "--output-schema", path)
        assert (code, events) == (1, [])
        assert f"appserver: --output-schema {path}: " in stderr and why in stderr


def test_output_last_message_writes_the_last_agent_message(workspace: Path, tmp_path: Path) -> None:
    last = tmp_path / "last.txt"
    code, events, _ = run_exec(workspace, "hello there", "-o", str(last))
    assert code == 0 and last.read_text() == "You said: hello there"
    # The long name, and a turn that ends in failure still writes what was said.
    code, events, stderr = run_exec(
        workspace, "?fail other boom", "--output-last-message", str(last)
    )
    assert code == 1 and events[-1]["type"] == "turn.failed"
    assert last.read_text() == ""
    assert f"no last agent message; wrote empty content to {last}" in stderr
    # A file that cannot be written is said on stderr; the turn is unaffected.
    code, events, stderr = run_exec(workspace, "hi", "-o", str(tmp_path / "no" / "dir.txt"))
    assert code == 0 and events[-1]["type"] == "turn.completed"
    assert f"appserver: -o {tmp_path / 'no' / 'dir.txt'}: " in stderr


def test_appserver_codex_exec_is_the_same_command(workspace: Path) -> None:
    script = Path(sys.executable).parent / "appserver"
    command = [str(script), "codex", "exec", "--experimental-json", "--cd", str(workspace)]
    done = subprocess.run(
        command, input=b"hello", capture_output=True, env=_env(), timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    events = [json.loads(line) for line in done.stdout.decode().splitlines()]
    assert [e["type"] for e in events] == [
        "thread.started",
        "turn.started",
        "item.completed",
        "turn.completed",
    ]
    assert events[2]["item"]["text"] == "You said: hello"
