"""SubAgent children in `appserver-client chat` (docs/clients.md), through a
pseudo-terminal against the real server the chat spawns: ``/agents`` lists the
thread's children and ``↳`` lines follow them as they start and end."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

from tests.clients.test_chat import chat, finish

# A read-only child: it lists the workspace and answers.
SPAWN = {
    "agentPrompt": '?tool list_dir {"path": "."}',
    "agentNickname": "scout",
    "agentRole": "explorer",
}


def test_agents_lists_a_spawned_child_and_progress_lines_follow_it(workspace: Path) -> None:
    with chat(cwd=workspace) as child:
        transcript = io.StringIO()
        child.logfile_read = transcript
        child.expect_exact("you> ")
        child.sendline("/agents")
        child.expect_exact("This thread has no SubAgents")
        child.expect_exact("you> ")
        child.sendline(f"?tool SpawnAgent {json.dumps(SPAWN)}")
        # Said while the turn runs (subagent/graphChanged), before the next prompt.
        child.expect_exact("↳ scout started (explorer)")
        child.expect_exact("you> ")
        child.sendline("/agents")
        child.expect_exact("SubAgents of this thread:")
        child.expect(r" 1\) scout  \[explorer, native, open, (?:running|idle)\].*  (thread_\S+)\r")
        scout = child.match.group(1)
        child.expect_exact("you> ")
        # A turn waiting on the child ends with its last snapshot: done, and what it ran.
        child.sendline(f"?tool WaitAgent {json.dumps({'childThreadId': scout})}")
        child.expect_exact("WaitAgent returned:")
        child.expect_exact("you> ")
        child.sendline("/agents")
        child.expect(
            r" 1\) scout  \[explorer, native, open, idle\]  done, list_dir \. "
            r"\(\d+(\.\d)?k? tokens\)  " + re.escape(scout)
        )
        child.expect_exact("you> ")
        # Its thread, which /threads leaves out, is resumed by the id /agents gave.
        child.sendline(f"/resume {scout}")
        child.expect_exact(f"Resumed scout ({scout}, 1 turn(s)).")
        child.expect_exact("agent: list_dir returned:")
        child.expect_exact("you> ")
        child.sendline("/quit")
        assert finish(child) == 0
    said = transcript.getvalue()
    # However the end was heard (the child's runtime, a snapshot), it is said once.
    assert len(re.findall(r"↳ scout done( \(\d+(\.\d)?k? tokens\))?\r\n", said)) == 1, said
    assert said.count("↳ scout started") == 1
