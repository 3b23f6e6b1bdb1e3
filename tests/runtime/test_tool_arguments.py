"""A tool call whose arguments are not valid JSON is not run: the model is told why."""

from __future__ import annotations

from pathlib import Path

from tests.support.servers import running_server
from tests.support.turns import items_completed, new_thread, run_turn


async def test_a_call_with_unparsable_arguments_is_not_run(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "inner.txt").write_text("x\n")
    (tmp_path / "top.txt").write_text("y\n")
    async with running_server("stdio", tmp_path) as sut, sut.connect() as client:
        thread_id = await new_thread(client, approvalPolicy="autoApprove")
        # Truncated JSON: parsed as {} it would list the workspace root, not sub.
        turn_id, terminal = await run_turn(client, thread_id, '?tool list_dir {"path": "sub"')
        assert terminal["method"] == "turn/completed"
        done = items_completed(client, turn_id)
        (call,) = [item for item in done if item["type"] == "toolCall"]
        assert "not valid JSON" in call["payload"]["argumentsError"]
        (result,) = [item for item in done if item["type"] == "toolResult"]
        assert result["payload"]["success"] is False
        output = result["payload"]["result"]
        assert output.startswith("Error: the call was not run: ") and "not valid JSON" in output
        assert "top.txt" not in output
