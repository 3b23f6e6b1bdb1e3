"""``turn/diff/updated`` and ``toolResult.changes`` over a real ``appserver`` process."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.servers import running_server
from tests.support.turns import items_completed, new_thread, run_turn, turn_events


async def test_an_overwrite_sends_the_turns_diff_with_the_removed_lines(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("old one\nold two\n")
    write = {"path": "notes.txt", "content": "new text\n"}
    expected = "--- a/notes.txt\n+++ b/notes.txt\n@@ -1,2 +1 @@\n-old one\n-old two\n+new text\n"
    async with running_server("stdio", tmp_path) as sut, sut.connect() as client:
        thread_id = await new_thread(client, approvalPolicy="autoApprove")
        prompt = f"?tool write_file {json.dumps(write)}"
        turn_id, terminal = await run_turn(client, thread_id, prompt)
        assert terminal["method"] == "turn/completed"
        updates = [m for m in turn_events(client, turn_id) if m["method"] == "turn/diff/updated"]
        assert len(updates) == 1
        params = updates[0]["params"]
        assert (params["threadId"], params["turnId"], params["diff"]) == (
            thread_id,
            turn_id,
            expected,
        )
        assert isinstance(params["seq"], int)
        (result,) = [i for i in items_completed(client, turn_id) if i["type"] == "toolResult"]
        assert result["payload"]["changes"] == [
            {"path": "notes.txt", "kind": "update", "diff": expected}
        ]
    # A client that comes back (here: to a restarted server) replays it with the
    # thread's other stored events.
    async with running_server("stdio", tmp_path) as sut, sut.connect() as client:
        mark = client.mark()
        await client.request("thread/subscribe", {"threadId": thread_id, "afterSeq": 0})
        update = await client.notification("turn/diff/updated", start=mark)
        assert update["diff"] == expected
