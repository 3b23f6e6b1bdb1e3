"""One ``appserver acp`` process serving sessions in several directories (issue 28:
editors with several roots, ``acpx --cwd``), driven by the ACP package's own
client like tests/faces/acp/test_acp.py."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from acp import PROTOCOL_VERSION, RequestError

from appserver.storage.lock import WorkspaceLock
from tests.faces.acp.test_acp import Recorder, acp_agent, text_of


async def test_one_agent_serves_sessions_in_two_directories(
    workspace: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    (other / "sub").mkdir(parents=True)
    (workspace / "sub").mkdir()
    client = Recorder(answers=["allow_once"])
    async with acp_agent(workspace, client=client) as agent:
        await agent.conn.initialize(protocol_version=PROTOCOL_VERSION)
        here = str((await agent.conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id)
        there = str((await agent.conn.new_session(cwd=str(other), mcp_servers=[])).session_id)
        # A cwd inside an open workspace belongs to it, the first one's included.
        below = await agent.conn.new_session(cwd=str(other / "sub"), mcp_servers=[])
        in_sub = await agent.conn.new_session(cwd=str(workspace / "sub"), mcp_servers=[])
        assert (other / ".craft" / "appserver.db").is_file()
        assert not (workspace / "sub" / ".craft").exists()
        assert not (other / "sub" / ".craft").exists()
        replies: dict[str, str] = {}

        async def prompt(session_id: str, text: str) -> None:
            stop, updates = await agent.prompt(session_id, text)
            assert stop == "end_turn"
            replies[session_id] = text_of(updates)

        async with anyio.create_task_group() as tg:  # both at once
            tg.start_soon(prompt, here, "hello first")
            tg.start_soon(prompt, there, "hello second")
        assert replies == {here: "You said: hello first", there: "You said: hello second"}
        # A tool call of the second directory's session runs there.
        stop, _ = await agent.prompt(there, "!touch made.txt")
        assert stop == "end_turn"
        assert (other / "made.txt").exists() and not (workspace / "made.txt").exists()

        listed_here = await agent.conn.list_sessions(cwd=str(workspace))
        listed_there = await agent.conn.list_sessions(cwd=str(other / "sub"))
        assert {s.session_id for s in listed_here.sessions} == {here, in_sub.session_id}
        assert {s.session_id for s in listed_there.sessions} == {there, below.session_id}
        assert {s.cwd for s in listed_there.sessions} == {str(other)}
        every = await agent.conn.list_sessions()
        assert {s.session_id for s in every.sessions} == {
            here,
            there,
            below.session_id,
            in_sub.session_id,
        }
        # A directory no workspace was opened in is not made one by listing.
        bare = tmp_path / "bare"
        bare.mkdir()
        assert (await agent.conn.list_sessions(cwd=str(bare))).sessions == []
        assert not (bare / ".craft").exists()

    # Another agent, started in the first directory, loads the second's session.
    client = Recorder()
    async with acp_agent(workspace, client=client) as agent:
        await agent.conn.initialize(protocol_version=PROTOCOL_VERSION)
        await agent.conn.load_session(cwd=str(other), session_id=there, mcp_servers=[])
        assert "You said: hello second" in text_of(client.since(0, there))
        stop, updates = await agent.prompt(there, "again")
        assert (stop, text_of(updates)) == ("end_turn", "You said: again")


async def test_trust_is_per_workspace(workspace: Path, tmp_path: Path) -> None:
    """``--trust-workspace`` names the first workspace only: another directory whose
    ``.craft/`` came with it stays untrusted."""
    other = tmp_path / "other"
    (other / ".craft").mkdir(parents=True)
    (other / ".craft" / "config.json").write_text("{}")
    async with acp_agent(workspace, "--trust-workspace") as agent:
        await agent.conn.initialize(protocol_version=PROTOCOL_VERSION)
        there = str((await agent.conn.new_session(cwd=str(other), mcp_servers=[])).session_id)
        stop, _ = await agent.prompt(there, "hi")
        assert stop == "end_turn"
    stderr = (workspace.parent / "acp-stderr.log").read_text()
    assert f"workspace {other} is not trusted" in stderr
    assert f"workspace {workspace} is not trusted" not in stderr


async def test_a_directory_that_cannot_open_refuses_only_its_session(
    workspace: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    lock = WorkspaceLock(other / ".craft" / "appserver.lock")
    lock.acquire({}, 0.0, False)  # exclusively, as an old server did
    async with acp_agent(workspace) as agent:
        try:
            await agent.conn.initialize(protocol_version=PROTOCOL_VERSION)
            with pytest.raises(RequestError) as caught:
                await agent.conn.new_session(cwd=str(other), mcp_servers=[])
            assert caught.value.code == -32603
            assert f"cannot open workspace {other}" in str(caught.value)
        finally:
            lock.release()
        # Once free it opens (a failure is not remembered), and the first still serves.
        there = str((await agent.conn.new_session(cwd=str(other), mcp_servers=[])).session_id)
        here = await agent.start()
        for session_id in (there, here):
            stop, updates = await agent.prompt(session_id, "ok")
            assert (stop, text_of(updates)) == ("end_turn", "You said: ok")


async def test_a_cwd_that_is_no_directory_is_refused_inside_a_workspace_too(
    workspace: Path,
) -> None:
    (workspace / "file.txt").write_text("x\n")
    async with acp_agent(workspace) as agent:
        await agent.conn.initialize(protocol_version=PROTOCOL_VERSION)
        for cwd in (workspace / "nonexistent", workspace / "file.txt"):
            with pytest.raises(RequestError) as caught:
                await agent.conn.new_session(cwd=str(cwd), mcp_servers=[])
            assert caught.value.code == -32602, cwd
