"""``appserver acp``: the Agent Client Protocol, driven as a real subprocess by the
``agent-client-protocol`` package's own client (``connect_to_agent`` over the
package's ``spawn_stdio_transport``).

Every line the agent writes is captured raw and checked: one JSON-RPC 2.0
message, and its params or result valid against the package's schema models
(the JSON Schema pydantic derives from them, and a lossless round trip through
the model, so nothing the lenient models would "salvage" slips through).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import cache
from pathlib import Path
from typing import Any, cast

import anyio
import jsonschema
import pytest
from acp import PROTOCOL_VERSION, RequestError, connect_to_agent
from acp.connection import StreamDirection, StreamEvent
from acp.helpers import (
    embedded_text_resource,
    image_block,
    resource_block,
    resource_link_block,
    text_block,
)
from acp.schema import (
    AgentErrorMessage,
    AllowedOutcome,
    AudioContentBlock,
    DeniedOutcome,
    Implementation,
    InitializeResponse,
    ListSessionsResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptResponse,
    RequestPermissionRequest,
    RequestPermissionResponse,
    SessionNotification,
)
from acp.transports import spawn_stdio_transport
from pydantic import BaseModel, TypeAdapter

from appserver.storage.lock import WorkspaceLock
from tests.support.helpers import IDENTITY
from tests.support.processes import ws_client, ws_server
from tests.support.servers import child_env
from tests.support.turns import run_turn, wait_terminal

TIMEOUT = 20.0
SLOW = "?stream 1000\n?delay 20"  # ~20 s of text unless cancelled
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
DOC = Path(__file__).resolve().parents[3] / "docs" / "faces.md"
DOC_MARK = "<!-- tested: tests/faces/acp/test_acp.py -->"

Json = dict[str, Any]

# --- what the agent may send, and the models its frames must match -----------------------

RESULTS: dict[str, type[BaseModel]] = {
    "initialize": InitializeResponse,
    "session/new": NewSessionResponse,
    "session/load": LoadSessionResponse,
    "session/prompt": PromptResponse,
    "session/list": ListSessionsResponse,
}
NOTIFICATIONS: dict[str, type[BaseModel]] = {"session/update": SessionNotification}
REQUESTS: dict[str, type[BaseModel]] = {"session/request_permission": RequestPermissionRequest}


@cache
def validator(model: type[BaseModel]) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(TypeAdapter(model).json_schema())


def conforms(model: type[BaseModel], value: Any) -> None:
    """``value`` is valid JSON for ``model``: by its JSON Schema, and unchanged by the model."""
    errors = [error.message for error in validator(model).iter_errors(value)]
    assert not errors, (model.__name__, errors[:3], value)
    parsed = model.model_validate(value)
    assert parsed.model_dump(mode="json", by_alias=True, exclude_unset=True) == value, value


def check_frame(line: bytes, methods: dict[Any, str]) -> Json:
    """One stdout line: one JSON-RPC message of ACP's agent side (``methods``: the
    client's request ids -> their methods)."""
    assert line.endswith(b"\n"), line  # whole lines only
    frame = json.loads(line)
    assert isinstance(frame, dict) and frame.get("jsonrpc") == "2.0", frame
    if "method" in frame:
        method = frame["method"]
        if "id" in frame:
            assert set(frame) == {"jsonrpc", "id", "method", "params"}, frame
            conforms(REQUESTS[method], frame["params"])
        else:
            assert set(frame) == {"jsonrpc", "method", "params"}, frame
            conforms(NOTIFICATIONS[method], frame["params"])
    elif "error" in frame:
        assert set(frame) == {"jsonrpc", "id", "error"}, frame
        conforms(AgentErrorMessage, {"id": frame["id"], "error": frame["error"]})
        assert frame["id"] is None or frame["id"] in methods, frame
    else:
        assert set(frame) == {"jsonrpc", "id", "result"}, frame
        conforms(RESULTS[methods[frame["id"]]], frame["result"])
    return frame


def check_output(data: bytes, methods: dict[Any, str]) -> list[Json]:
    lines = data.splitlines(keepends=True)
    return [check_frame(line, methods) for line in lines]


# --- a client ----------------------------------------------------------------------------


class Recorder:
    """An ACP ``Client``: records session updates, answers permission requests
    with the next of ``answers`` (an option id, ``cancelled`` or ``error``)."""

    def __init__(self, answers: list[str] | None = None) -> None:
        self.updates: list[tuple[str, Json]] = []
        self.answers = list(answers or [])
        self.permissions: list[Json] = []
        self.changed = anyio.Event()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append((session_id, update.model_dump(mode="json", by_alias=True)))
        self.changed.set()
        self.changed = anyio.Event()

    async def request_permission(
        self, options: list[Any], session_id: str, tool_call: Any, **kwargs: Any
    ) -> RequestPermissionResponse:
        self.permissions.append(
            {
                "sessionId": session_id,
                "toolCall": tool_call.model_dump(mode="json", by_alias=True, exclude_none=True),
                "options": [o.model_dump(mode="json", by_alias=True) for o in options],
            }
        )
        answer = self.answers.pop(0) if self.answers else "reject_once"
        if answer == "error":
            raise RequestError(-32603, "the client failed")
        if answer == "cancelled":
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=answer)
        )

    async def wait_for(self, predicate: Callable[[Json], bool]) -> Json:
        with anyio.fail_after(TIMEOUT):
            seen = 0
            while True:
                changed = self.changed
                for _, update in self.updates[seen:]:
                    if predicate(update):
                        return update
                seen = len(self.updates)
                await changed.wait()

    def mark(self) -> int:
        return len(self.updates)

    def since(self, mark: int, session_id: str | None = None) -> list[Json]:
        """Updates from ``mark`` on (of one session, or all)."""
        return [u for sid, u in self.updates[mark:] if session_id in (None, sid)]


def text_of(updates: list[Json], kind: str = "agent_message_chunk") -> str:
    return "".join(u["content"]["text"] for u in updates if u["sessionUpdate"] == kind)


def tool_updates(updates: list[Json]) -> list[Json]:
    return [u for u in updates if u["sessionUpdate"] in ("tool_call", "tool_call_update")]


class Tee:
    """Copies the agent's stdout into a fresh reader for the client, keeping the bytes."""

    def __init__(self, source: asyncio.StreamReader) -> None:
        self.reader = asyncio.StreamReader(limit=64 * 1024 * 1024)
        self.data = b""
        self.task = asyncio.ensure_future(self._pump(source))

    async def _pump(self, source: asyncio.StreamReader) -> None:
        while chunk := await source.read(65536):
            self.data += chunk
            self.reader.feed_data(chunk)
        self.reader.feed_eof()


class Agent:
    """One ``appserver acp`` process and the package's client connection to it."""

    def __init__(self, conn: Any, process: Any, client: Recorder, workspace: Path) -> None:
        self.conn = conn
        self.process = process
        self.client = client
        self.workspace = workspace

    async def start(self) -> str:
        """``initialize`` and ``session/new`` in the workspace; the session id."""
        await self.conn.initialize(
            protocol_version=PROTOCOL_VERSION,
            client_info=Implementation(name="tests", title="Tests", version="1"),
        )
        session = await self.conn.new_session(cwd=str(self.workspace), mcp_servers=[])
        return str(session.session_id)

    async def prompt(self, session_id: str, *blocks: Any) -> tuple[str, list[Json]]:
        """One prompt; its stop reason and the updates it streamed."""
        mark = self.client.mark()
        parts = [text_block(b) if isinstance(b, str) else b for b in blocks]
        with anyio.fail_after(TIMEOUT):
            response = await self.conn.prompt(session_id=session_id, prompt=parts)
        return str(response.stop_reason), self.client.since(mark, session_id)


def acp_command(workspace: Path, *flags: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "appserver",
        "acp",
        "--workspace",
        str(workspace),
        "--provider",
        "offline",
        *flags,
    ]


@asynccontextmanager
async def acp_agent(
    workspace: Path, *flags: str, client: Recorder | None = None, stderr: Any = None
) -> AsyncIterator[Agent]:
    """Run ``appserver acp``; on exit close its stdin, check it exits 0 and that
    every line it wrote was a valid ACP frame."""
    client = client or Recorder()
    methods: dict[Any, str] = {}

    def record(event: StreamEvent) -> None:
        message = event.message
        if event.direction is StreamDirection.OUTGOING and "method" in message and "id" in message:
            methods[message["id"]] = message["method"]

    command = acp_command(workspace, *flags)
    with open(workspace.parent / "acp-stderr.log", "ab") as log:
        async with spawn_stdio_transport(
            command[0],
            *command[1:],
            env=child_env(),
            stderr=stderr if stderr is not None else log.fileno(),
            shutdown_timeout=TIMEOUT,
        ) as (reader, writer, process):
            tee = Tee(reader)
            conn = connect_to_agent(cast(Any, client), writer, tee.reader, observers=[record])
            try:
                yield Agent(conn, process, client, workspace)
            finally:
                await conn.close()
        with anyio.fail_after(TIMEOUT):
            await tee.task
    assert process.returncode == 0, process.returncode
    check_output(tee.data, methods)


# --- initialize, sessions, prompts ---------------------------------------------------------


async def test_initialize_new_session_and_a_plain_prompt(workspace: Path) -> None:
    async with acp_agent(workspace) as agent:
        init = await agent.conn.initialize(protocol_version=PROTOCOL_VERSION)
        assert init.protocol_version == 1
        caps = init.agent_capabilities
        assert caps is not None and caps.load_session is True
        prompts = caps.prompt_capabilities
        assert prompts is not None
        assert (prompts.image, prompts.audio, prompts.embedded_context) == (True, False, True)
        assert init.auth_methods == []
        assert init.agent_info is not None and init.agent_info.name == "appserver"
        # Version negotiation: we speak 1 only, so that is the answer to any version.
        for asked in (0, 2, 7):
            again = await agent.conn.initialize(protocol_version=asked)
            assert again.protocol_version == 1
        session = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[])
        assert re.fullmatch(r"thread_\d{8}_[a-z0-9]{6}", session.session_id)
        stop, updates = await agent.prompt(session.session_id, "hello there")
        assert stop == "end_turn"
        assert text_of(updates) == "You said: hello there"
        # Streamed: several chunks of one message; the prompt itself is not echoed.
        assert len(updates) >= 3
        assert {u["sessionUpdate"] for u in updates} == {"agent_message_chunk"}
        assert len({u["messageId"] for u in updates}) == 1
        stop, updates = await agent.prompt(session.session_id, "?think pondering hard\nok")
        assert stop == "end_turn"
        assert text_of(updates, "agent_thought_chunk") == "pondering hard"
        assert text_of(updates) == "You said: ok"
        kinds = [u["sessionUpdate"] for u in updates]
        assert kinds.index("agent_thought_chunk") < kinds.index("agent_message_chunk")


async def test_session_cwd_must_be_an_absolute_directory(workspace: Path, tmp_path: Path) -> None:
    # A directory outside the workspace is served too (issue 28:
    # tests/faces/acp/test_acp_workspaces.py); a relative path or a missing
    # directory is refused.
    (workspace / "sub").mkdir()
    async with acp_agent(workspace) as agent:
        await agent.conn.initialize(protocol_version=PROTOCOL_VERSION)
        inside = await agent.conn.new_session(cwd=str(workspace / "sub"), mcp_servers=[])
        assert inside.session_id
        for cwd in ("relative/dir", str(workspace / ".." / "elsewhere")):
            with pytest.raises(RequestError) as caught:
                await agent.conn.new_session(cwd=cwd, mcp_servers=[])
            assert caught.value.code == -32602, cwd
            assert "cwd" in str(caught.value)
        # Another directory's workspace does not hold this session.
        with pytest.raises(RequestError) as caught:
            await agent.conn.load_session(cwd=str(tmp_path), session_id=inside.session_id)
        assert caught.value.code == -32002


async def test_unknown_sessions_are_refused(workspace: Path) -> None:
    async with acp_agent(workspace) as agent:
        await agent.start()
        with pytest.raises(RequestError) as caught:
            await agent.conn.prompt(session_id="thread_20200101_nosuch", prompt=[text_block("x")])
        assert caught.value.code == -32002
        with pytest.raises(RequestError) as caught:
            await agent.conn.load_session(cwd=str(workspace), session_id="thread_20200101_nosuch")
        assert caught.value.code == -32002
        with pytest.raises(RequestError) as caught:  # no Unicode: not found, no internal error
            await agent.conn.load_session(cwd=str(workspace), session_id="thread_\ud800")
        assert caught.value.code == -32002


async def test_session_list_shows_the_workspace_threads(workspace: Path, tmp_path: Path) -> None:
    async with acp_agent(workspace) as agent:
        init = await agent.conn.initialize(protocol_version=PROTOCOL_VERSION)
        assert init.agent_capabilities is not None
        capabilities = init.agent_capabilities.session_capabilities
        assert capabilities is not None and capabilities.list is not None
        first = await agent.start()
        second = str((await agent.conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id)
        await agent.prompt(first, "make it the most recent")
        listed = await agent.conn.list_sessions(cwd=str(workspace))
        assert [s.session_id for s in listed.sessions] == [first, second]
        assert {s.cwd for s in listed.sessions} == {str(workspace)}
        assert listed.sessions[0].title == "ACP session (Tests)"
        assert (await agent.conn.list_sessions()).sessions == listed.sessions
        assert (await agent.conn.list_sessions(cwd=str(tmp_path))).sessions == []
        with pytest.raises(RequestError) as caught:
            await agent.conn.list_sessions(cursor="not-a-cursor")
        assert caught.value.code == -32602


async def test_one_prompt_at_a_time_per_session(workspace: Path) -> None:
    client = Recorder()
    async with acp_agent(workspace, client=client) as agent:
        session_id = await agent.start()
        other = str((await agent.conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id)
        result: dict[str, Any] = {}

        async def slow() -> None:
            result["stop"], _ = await agent.prompt(session_id, SLOW)

        async with anyio.create_task_group() as tg:
            tg.start_soon(slow)
            await client.wait_for(lambda u: u["sessionUpdate"] == "agent_message_chunk")
            with pytest.raises(RequestError) as caught:
                await agent.conn.prompt(session_id=session_id, prompt=[text_block("again")])
            assert caught.value.code == -32600
            # Another session (another thread) runs meanwhile.
            stop, updates = await agent.prompt(other, "in parallel")
            assert stop == "end_turn" and text_of(updates) == "You said: in parallel"
            await agent.conn.cancel(session_id=session_id)
        assert result["stop"] == "cancelled"


# --- tools and permissions ---------------------------------------------------------------


async def test_permission_allow_runs_the_tool(workspace: Path) -> None:
    client = Recorder(["allow_once"])
    async with acp_agent(workspace, client=client) as agent:
        session_id = await agent.start()
        stop, updates = await agent.prompt(session_id, "!echo hi")
    assert stop == "end_turn"
    (asked,) = client.permissions
    tools = tool_updates(updates)
    start = tools[0]
    assert start["sessionUpdate"] == "tool_call" and start["status"] == "pending"
    assert start["kind"] == "execute"
    call_id = start["toolCallId"]
    # The question names the call the client was just told about.
    assert asked["sessionId"] == session_id
    assert asked["toolCall"]["toolCallId"] == call_id
    assert asked["toolCall"]["title"] == "echo hi"
    assert [(o["optionId"], o["kind"]) for o in asked["options"]] == [
        ("allow_once", "allow_once"),
        ("allow_always", "allow_always"),
        ("reject_once", "reject_once"),
        ("reject_always", "reject_always"),
    ]
    assert {u["toolCallId"] for u in tools} == {call_id}
    statuses = [u["status"] for u in tools if u.get("status")]
    assert statuses[0] == "pending" and "in_progress" in statuses and statuses[-1] == "completed"
    final = tools[-1]
    assert "hi" in final["content"][0]["content"]["text"]
    assert final["rawOutput"]["success"] is True
    assert text_of(updates) == "The command exited with code 0."


async def test_permission_reject_declines_the_tool(workspace: Path) -> None:
    client = Recorder(["reject_once"])
    async with acp_agent(workspace, client=client) as agent:
        session_id = await agent.start()
        stop, updates = await agent.prompt(session_id, "!touch rejected.txt")
    assert stop == "end_turn"
    assert len(client.permissions) == 1
    final = tool_updates(updates)[-1]
    assert final["status"] == "failed"
    assert final["content"][0]["content"]["text"].startswith("Declined")
    assert not (workspace / "rejected.txt").exists()
    assert text_of(updates) == "The shell call was declined."


async def test_always_answers_hold_for_the_session(workspace: Path) -> None:
    client = Recorder(["allow_always", "reject_always"])
    async with acp_agent(workspace, client=client) as agent:
        first = await agent.start()
        # allow_always = acceptForSession: later shell calls of this session run unasked.
        assert (await agent.prompt(first, "!touch one.txt"))[0] == "end_turn"
        assert (await agent.prompt(first, "!touch two.txt"))[0] == "end_turn"
        assert len(client.permissions) == 1
        assert (workspace / "one.txt").exists() and (workspace / "two.txt").exists()
        # reject_always: declined, and not asked again in this session.
        second = str((await agent.conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id)
        _, updates = await agent.prompt(second, "!touch three.txt")
        _, again = await agent.prompt(second, "!touch four.txt")
        assert len(client.permissions) == 2
        for done in (updates, again):
            assert tool_updates(done)[-1]["status"] == "failed"
        assert not (workspace / "three.txt").exists() and not (workspace / "four.txt").exists()


@pytest.mark.parametrize("answer", ["cancelled", "error"])
async def test_a_cancelled_or_failed_permission_answer(workspace: Path, answer: str) -> None:
    client = Recorder([answer])
    async with acp_agent(workspace, client=client) as agent:
        session_id = await agent.start()
        stop, updates = await agent.prompt(session_id, "!touch never.txt")
    assert not (workspace / "never.txt").exists()
    assert tool_updates(updates)[-1]["status"] == "failed"
    # cancelled -> the turn is cancelled; an error answer -> declined, the turn goes on.
    assert stop == ("cancelled" if answer == "cancelled" else "end_turn")


async def test_auto_approve_policy_asks_nothing(workspace: Path) -> None:
    client = Recorder()
    async with acp_agent(workspace, "--approval-policy", "autoApprove", client=client) as agent:
        session_id = await agent.start()
        stop, updates = await agent.prompt(session_id, ">notes.txt\nline one")
    assert stop == "end_turn" and client.permissions == []
    start = tool_updates(updates)[0]
    assert start["kind"] == "edit"
    final = tool_updates(updates)[-1]
    assert final["status"] == "completed"
    diff = final["content"][0]
    assert diff["type"] == "diff" and diff["path"] == str(workspace / "notes.txt")
    assert diff["newText"] == "line one\n"
    assert (workspace / "notes.txt").read_text() == "line one\n"


async def test_interrupt_policy_cancels_the_prompt(workspace: Path) -> None:
    client = Recorder()
    async with acp_agent(workspace, "--approval-policy", "interrupt", client=client) as agent:
        session_id = await agent.start()
        stop, updates = await agent.prompt(session_id, "!touch no.txt")
        assert stop == "cancelled" and client.permissions == []
        assert tool_updates(updates)[-1]["status"] == "failed"
        assert (await agent.prompt(session_id, "still here"))[0] == "end_turn"
    assert not (workspace / "no.txt").exists()


async def test_max_turn_requests(workspace: Path) -> None:
    flags = ("--approval-policy", "autoApprove", "--max-turn-requests", "1")
    async with acp_agent(workspace, *flags) as agent:
        session_id = await agent.start()
        stop, updates = await agent.prompt(session_id, "!echo once")
    assert stop == "max_turn_requests"
    assert tool_updates(updates)[-1]["status"] == "completed"


async def test_a_provider_failure_is_a_json_rpc_error(workspace: Path) -> None:
    async with acp_agent(workspace) as agent:
        session_id = await agent.start()
        with pytest.raises(RequestError) as caught:
            await agent.prompt(session_id, "?fail rate_limit slow down")
        assert caught.value.code == -32603
        assert "slow down" in str(caught.value)
        data = caught.value.data
        assert isinstance(data, dict) and data["code"] == "provider_rate_limit"
        # The session goes on.
        assert (await agent.prompt(session_id, "again"))[0] == "end_turn"


# --- cancel ----------------------------------------------------------------------------


async def test_cancel_mid_stream(workspace: Path) -> None:
    client = Recorder()
    async with acp_agent(workspace, client=client) as agent:
        session_id = await agent.start()
        result: dict[str, Any] = {}

        async def prompt() -> None:
            result["stop"], result["updates"] = await agent.prompt(session_id, SLOW)

        async with anyio.create_task_group() as tg:
            tg.start_soon(prompt)
            await client.wait_for(lambda u: u["sessionUpdate"] == "agent_message_chunk")
            await agent.conn.cancel(session_id=session_id)
        assert result["stop"] == "cancelled"
        assert 0 < len(result["updates"]) < 1000
        # The session takes the next prompt.
        assert (await agent.prompt(session_id, "next"))[0] == "end_turn"


async def test_cancel_while_a_permission_is_pending(workspace: Path) -> None:
    """The spec's order: session/cancel, then the client answers the pending
    permission request "cancelled"; the prompt stops with ``cancelled``."""
    gate = anyio.Event()
    release = anyio.Event()

    class Waiting(Recorder):
        async def request_permission(
            self, options: list[Any], session_id: str, tool_call: Any, **kwargs: Any
        ) -> RequestPermissionResponse:
            gate.set()
            await release.wait()
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))

    async with acp_agent(workspace, client=Waiting()) as agent:
        session_id = await agent.start()
        result: dict[str, Any] = {}

        async def prompt() -> None:
            result["stop"], result["updates"] = await agent.prompt(session_id, "!touch x.txt")

        async with anyio.create_task_group() as tg:
            tg.start_soon(prompt)
            with anyio.fail_after(TIMEOUT):
                await gate.wait()
            await agent.conn.cancel(session_id=session_id)
            release.set()
        assert result["stop"] == "cancelled"
        assert tool_updates(result["updates"])[-1]["status"] == "failed"
    assert not (workspace / "x.txt").exists()


# --- prompt content ----------------------------------------------------------------------


async def test_images_resources_and_refused_blocks(workspace: Path) -> None:
    (workspace / "notes.md").write_text("remember the milk\n")
    async with acp_agent(workspace) as agent:
        session_id = await agent.start()
        image = image_block(base64.b64encode(PNG).decode(), "image/png")
        stop, updates = await agent.prompt(session_id, "look", image)
        assert stop == "end_turn"
        assert text_of(updates) == "You said: look [1 image attached]"
        stored = workspace / ".craft" / "attachments" / "images"
        assert (stored / f"{hashlib.sha256(PNG).hexdigest()}.png").read_bytes() == PNG
        # A link to a workspace file is inlined; an embedded text resource is text.
        link = resource_link_block("notes.md", (workspace / "notes.md").as_uri())
        embedded = resource_block(embedded_text_resource("file:///x/y.txt", "embedded words"))
        _, updates = await agent.prompt(session_id, "read these", link, embedded)
        answer = text_of(updates)
        assert "remember the milk" in answer and "embedded words" in answer
        # Audio is not offered, bad base64 is refused: -32602, nothing runs.
        audio = AudioContentBlock(type="audio", data="AAAA", mime_type="audio/wav")
        bad = image_block("not base64!", "image/png")
        not_image = image_block(base64.b64encode(b"plain text").decode(), "image/png")
        for block in (audio, bad, not_image):
            with pytest.raises(RequestError) as caught:
                await agent.conn.prompt(session_id=session_id, prompt=[block])
            assert caught.value.code == -32602
        with pytest.raises(RequestError) as caught:
            await agent.conn.prompt(session_id=session_id, prompt=[])
        assert caught.value.code == -32602


# --- session/load --------------------------------------------------------------------------


def by_message(updates: list[Json], kind: str) -> dict[str, str]:
    texts: dict[str, str] = {}
    for u in updates:
        if u["sessionUpdate"] == kind:
            texts[u["messageId"]] = texts.get(u["messageId"], "") + u["content"]["text"]
    return texts


def final_tools(updates: list[Json]) -> dict[str, Json]:
    """Each tool call's state after all its updates (what a client shows)."""
    state: dict[str, Json] = {}
    for u in tool_updates(updates):
        merged = state.setdefault(u["toolCallId"], {})
        merged.update({k: v for k, v in u.items() if v is not None and k != "sessionUpdate"})
    return state


async def test_a_history_larger_than_the_backlog_loads(workspace: Path) -> None:
    """A replay goes at the client's pace: two stored messages larger together
    than the client's backlog bound no longer end the loading process."""
    backlog = ("--max-client-backlog", "400000")
    big = [f"?stream 1\n{letter * 300_000}" for letter in "ab"]
    async with acp_agent(workspace, *backlog) as agent:
        session_id = await agent.start()
        for text in big:
            await agent.prompt(session_id, text)
    replayer = Recorder()
    async with acp_agent(workspace, *backlog, client=replayer) as agent:
        await agent.conn.initialize(protocol_version=PROTOCOL_VERSION)
        await agent.conn.load_session(cwd=str(workspace), session_id=session_id)
        users = [u for u in replayer.since(0) if u["sessionUpdate"] == "user_message_chunk"]
        assert [u["content"]["text"] for u in users] == big


async def test_load_a_session_made_by_an_earlier_acp_process(workspace: Path) -> None:
    client = Recorder(["allow_once"])
    async with acp_agent(workspace, client=client) as agent:
        session_id = await agent.start()
        live: list[Json] = []
        for text in ("hello", "?think pondering\nhmm", "!echo hi"):
            live += (await agent.prompt(session_id, text))[1]
        image = image_block(base64.b64encode(PNG).decode(), "image/png")
        live += (await agent.prompt(session_id, "see", image))[1]
    replayer = Recorder()
    async with acp_agent(workspace, client=replayer) as agent:
        await agent.conn.initialize(protocol_version=PROTOCOL_VERSION)
        loaded = await agent.conn.load_session(cwd=str(workspace), session_id=session_id)
        assert loaded.modes is None
        replay = replayer.since(0)
        assert {sid for sid, _ in replayer.updates} == {session_id}
        users = [u for u in replay if u["sessionUpdate"] == "user_message_chunk"]
        assert [u["content"].get("text") for u in users] == [
            "hello",
            "?think pondering\nhmm",
            "!echo hi",
            "see",
            None,
        ]
        assert users[-1]["content"]["type"] == "image"
        assert base64.b64decode(users[-1]["content"]["data"]) == PNG
        # The same messages, thoughts and tool calls as the client saw live.
        for kind in ("agent_message_chunk", "agent_thought_chunk"):
            assert by_message(replay, kind) == by_message(live, kind)
        replayed, seen = final_tools(replay), final_tools(live)
        assert replayed.keys() == seen.keys() and len(seen) == 1
        for call_id in seen:
            for key in ("title", "kind", "status", "content", "rawInput", "rawOutput"):
                assert replayed[call_id][key] == seen[call_id][key], key
        # Loaded, it takes prompts again.
        stop, updates = await agent.prompt(session_id, "welcome back")
        assert stop == "end_turn" and text_of(updates) == "You said: welcome back"


async def test_load_a_thread_made_over_json_rpc_and_read_an_acp_thread_back(
    workspace: Path,
) -> None:
    async with ws_server(workspace) as (_, url), ws_client(url, "ws") as ws:
        thread = (await ws.request("thread/start", {"identity": IDENTITY}))["thread"]
        await run_turn(ws, thread["id"], "?think first thoughts\nhello from json-rpc")
    replayer = Recorder()
    async with acp_agent(workspace, client=replayer) as agent:
        await agent.conn.initialize(protocol_version=PROTOCOL_VERSION)
        await agent.conn.load_session(cwd=str(workspace), session_id=thread["id"])
        replay = replayer.since(0)
        assert text_of(replay, "user_message_chunk") == "?think first thoughts\nhello from json-rpc"
        assert text_of(replay, "agent_thought_chunk") == "first thoughts"
        assert text_of(replay) == "You said: hello from json-rpc"
        stop, _ = await agent.prompt(thread["id"], "and from acp")
        assert stop == "end_turn"
        acp_session = await agent.start()
        await agent.prompt(acp_session, "made over acp")
    # Both threads read back over JSON-RPC: the ACP one under channel "acp".
    async with ws_server(workspace) as (_, url), ws_client(url, "ws") as ws:
        listed = await ws.request(
            "thread/list", {"identity": {"channelName": "acp", "userId": "local"}}
        )
        origins = {t["id"]: t["originChannel"] for t in listed["data"]}
        assert origins[acp_session] == "acp"
        read = await ws.request("thread/read", {"threadId": thread["id"], "includeTurns": True})
        texts = [
            item["payload"].get("text")
            for turn in read["thread"]["turns"]
            for item in turn["items"]
            if item["type"] == "agentMessage"
        ]
        assert texts == ["You said: hello from json-rpc", "You said: and from acp"]
        read = await ws.request("thread/read", {"threadId": acp_session, "includeTurns": True})
        (turn,) = read["thread"]["turns"]
        assert turn["status"] == "completed"


async def test_a_websocket_client_watches_the_acp_session(workspace: Path) -> None:
    client = Recorder(["allow_once"])
    async with acp_agent(
        workspace, "--websocket", "ws://127.0.0.1:0", client=client, stderr=subprocess.PIPE
    ) as agent:
        url = await listening_url(agent.process.stderr)
        session_id = await agent.start()
        async with ws_client(url, "watcher") as ws:
            await ws.request("thread/subscribe", {"threadId": session_id})
            mark = ws.mark()
            stop, updates = await agent.prompt(session_id, "?stream 5")
            assert stop == "end_turn"
            completed = await ws.wait(
                lambda m: (
                    m.get("method") == "turn/completed"
                    and m["params"]["turn"]["threadId"] == session_id
                ),
                start=mark,
            )
            deltas = [
                m["params"]["delta"]
                for m in ws.since(mark)
                if m.get("method") == "item/agentMessage/delta"
            ]
            assert "".join(deltas) == text_of(updates) == "chunk 1 chunk 2 chunk 3 chunk 4 chunk 5 "
            assert completed["params"]["turn"]["originChannel"] == "acp"
            # A turn started over JSON-RPC on the session's thread: ACP prompts wait for it.
            mark = ws.mark()
            turn_id, _ = await run_turn(ws, session_id, "from the watcher")
            stop, updates = await agent.prompt(session_id, "after it")
            assert text_of(updates) == "You said: after it"
            await wait_terminal(ws, turn_id, start=mark)


async def listening_url(stderr: asyncio.StreamReader | None) -> str:
    assert stderr is not None
    with anyio.fail_after(TIMEOUT):
        while True:
            line = await stderr.readline()
            assert line, "the agent exited"
            match = re.search(rb"listening on (ws://\S+)", line)
            if match:
                return match.group(1).decode()


# --- bad input, raw ------------------------------------------------------------------


async def test_bad_input_gets_json_rpc_errors_and_the_process_survives(workspace: Path) -> None:
    cwd = json.dumps(str(workspace))
    lines = [
        b"this is not json",
        b"[]",
        b'[{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}]',
        b'"a string"',
        b'{"jsonrpc":"2.0","id":{"x":1},"method":"initialize"}',
        b'{"jsonrpc":"2.0","id":2,"method":42}',
        b'{"jsonrpc":"1.0","id":3,"method":"initialize","params":{"protocolVersion":1}}',
        b'{"jsonrpc":"2.0","id":4,"method":"no/such/method","params":{}}',
        b'{"jsonrpc":"2.0","method":"no/such/notification","params":{}}',
        b'{"jsonrpc":"2.0","id":5,"method":"session/new","params":{"mcpServers":[]}}',
        b'{"jsonrpc":"2.0","id":6,"method":"session/new","params":[1,2]}',
        b'{"jsonrpc":"2.0","id":7,"method":"session/prompt"}',
        b'{"jsonrpc":"2.0","id":8,"method":"authenticate","params":{"methodId":"x"}}',
        b'{"jsonrpc":"2.0","id":9}',
        b"\xff\xfe not utf-8",
        b'{"jsonrpc":"2.0","id":11,"method":"initialize","params":{"protocolVersion":1e999}}',
        b'{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"nope"}}',
        b"",
        b'{"jsonrpc":"2.0","id":"ok","method":"initialize","params":{"protocolVersion":1}}',
        b'{"jsonrpc":"2.0","id":10,"method":"session/new","params":{"cwd":'
        + cwd.encode()
        + b',"mcpServers":[]}}',
    ]
    methods: dict[Any, str] = {"ok": "initialize", 10: "session/new"}
    for number in range(2, 10):
        methods[number] = "?"  # only errors expected
    with anyio.fail_after(TIMEOUT):
        done = await anyio.run_process(
            acp_command(workspace),
            input=b"\n".join(lines) + b"\n",
            env=child_env(),
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    frames = check_output(done.stdout, methods)
    errors = {f["id"]: f["error"]["code"] for f in frames if "error" in f and f["id"] is not None}
    null_errors = [f["error"]["code"] for f in frames if "error" in f and f["id"] is None]
    # not JSON, not UTF-8, a number past a double (its id unreadable too); a batch
    # (empty or not), a string, an object id.
    assert sorted(null_errors) == [-32700, -32700, -32700, -32600, -32600, -32600, -32600]
    assert errors == {
        2: -32600,  # a method that is not a string
        3: -32600,  # jsonrpc 1.0
        4: -32601,
        5: -32602,  # no cwd
        6: -32602,  # params not an object
        7: -32602,  # no params
        8: -32601,  # no auth methods, so no authenticate
        9: -32600,  # neither a request nor a response
    }
    results = {f["id"]: f["result"] for f in frames if "result" in f}
    assert results["ok"]["protocolVersion"] == 1
    assert results[10]["sessionId"].startswith("thread_")
    # Notifications (even unknown ones) and blank lines get no answer.
    assert len(frames) == len(null_errors) + len(errors) + len(results)


async def test_a_line_over_the_size_cap_is_refused(workspace: Path) -> None:
    from appserver.faces.acp.agent import MAX_LINE_BYTES

    huge = b'{"jsonrpc":"2.0","id":1,"method":"x","params":{"p":"' + b"a" * MAX_LINE_BYTES + b'"}}'
    ok = b'{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":1}}'
    with anyio.fail_after(TIMEOUT * 2):
        done = await anyio.run_process(
            acp_command(workspace), input=huge + b"\n" + ok + b"\n", env=child_env(), check=False
        )
    assert done.returncode == 0
    frames = check_output(done.stdout, {2: "initialize"})
    assert [f.get("id") for f in frames] == [None, 2]
    assert frames[0]["error"]["code"] == -32600


async def test_start_up_failures_exit_without_output(workspace: Path) -> None:
    prefixes = ("APPSERVER_", "OPENAI_", "DASHSCOPE_")
    env = {k: v for k, v in child_env().items() if not k.startswith(prefixes)}
    command = [*acp_command(workspace)[:-2], "--provider", "openai"]
    with anyio.fail_after(TIMEOUT):
        done = await anyio.run_process(command, input=b"", env=env, check=False)
    assert done.returncode == 2 and done.stdout == b""
    assert b"API key" in done.stderr
    # Another agent serving the workspace no longer keeps a second out (issue 28)...
    async with acp_agent(workspace) as agent:
        await agent.start()
        with anyio.fail_after(TIMEOUT):
            done = await anyio.run_process(
                acp_command(workspace), input=b"", env=child_env(), check=False
            )
        assert done.returncode == 0 and done.stdout == b"", done.stderr
    # ...but a process holding the workspace lock exclusively does: exit 1, and
    # the client's initialize gets an error answer (issue 28), not silence.
    lock = WorkspaceLock(workspace / ".craft" / "appserver.lock")
    lock.acquire({})
    initialize = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n'
    try:
        with anyio.fail_after(TIMEOUT):
            done = await anyio.run_process(
                acp_command(workspace), input=initialize, env=child_env(), check=False
            )
    finally:
        lock.release()
    assert done.returncode == 1
    frames = check_output(done.stdout, {1: "initialize"})
    assert [frame["id"] for frame in frames] == [1]
    assert frames[0]["error"]["code"] == -32603
    assert "appserver cannot start" in frames[0]["error"]["message"]


async def test_help_does_not_load_the_acp_package() -> None:
    code = (
        "import sys\n"
        "from appserver.cli import build_parser\n"
        "build_parser()\n"
        "print('acp' in sys.modules, 'appserver.faces.acp.agent' in sys.modules)\n"
    )
    done = await anyio.run_process([sys.executable, "-c", code], env=child_env())
    assert done.stdout.decode().split() == ["False", "False"]


# --- the documented example ----------------------------------------------------------------


def documented_example() -> str | None:
    if not DOC.exists():
        return None
    match = re.search(
        re.escape(DOC_MARK) + r"\n```python\n(.*?)\n```", DOC.read_text("utf-8"), re.S
    )
    return match.group(1) if match else None


async def test_the_documented_client_example_runs(tmp_path: Path) -> None:
    example = documented_example()
    if example is None:
        pytest.skip("docs/faces.md has no ACP example yet")
    script = tmp_path / "example.py"
    script.write_text(example)
    env = child_env()
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    with anyio.fail_after(60):
        done = await anyio.run_process(
            [sys.executable, str(script)], cwd=tmp_path, env=env, check=False
        )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert "You said:" in done.stdout.decode()


def run_lines(workspace: Path, lines: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    """``appserver acp`` given ``lines`` and then the end of its input."""
    return subprocess.run(
        acp_command(workspace),
        input="".join(json.dumps(line) + "\n" for line in lines),
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=workspace,
        timeout=60,
        check=False,
    )


def test_a_reused_request_id_is_answered_each_time_before_the_end(workspace: Path) -> None:
    """Input ends right after two requests with one id: both are answered (the
    first answer used to count for both, and the second was never written)."""
    lines = [
        {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}},
        {"jsonrpc": "2.0", "id": "X", "method": "no/such", "params": {}},
        {"jsonrpc": "2.0", "id": "X", "method": "session/list", "params": {}},
    ]
    done = run_lines(workspace, lines)
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    to_x = [answer for answer in answers if answer.get("id") == "X"]
    assert [("error" in answer, "result" in answer) for answer in to_x] == [
        (True, False),
        (False, True),
    ], answers


def test_a_malformed_cancel_is_one_line_on_stderr(workspace: Path) -> None:
    lines = [
        {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}},
        {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": 5}},
        {"jsonrpc": "2.0", "method": "session/cancel", "params": "x"},
    ]
    done = run_lines(workspace, lines)
    assert done.returncode == 0 and "Traceback" not in done.stderr
    assert done.stderr.count("dropped a session/cancel without a string sessionId") == 2
