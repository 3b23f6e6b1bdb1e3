"""Two ``zot rpc`` processes in one directory (issue 28): two scripts, an
editor and a terminal. Each answers its own prompts; neither is refused with
"workspace is in use" (docs/architecture.md, "Several processes on one workspace")."""

from __future__ import annotations

from pathlib import Path

import anyio

from tests.faces.zot.test_zot import Zot, of, shim, text, types, zot


async def test_two_zot_processes_in_one_directory_both_answer(
    workspace: Path, tmp_path: Path
) -> None:
    env = shim(tmp_path)
    # As zot's clients spawn it: `zot rpc` with the project as the working directory.
    async with zot(workspace, command=["zot", "rpc"], env=env) as first:
        # The first one holds the workspace now (its answer came through).
        assert (await first.call({"id": "s", "type": "get_state"}))["success"] is True
        async with zot(workspace, command=["zot", "rpc"], env=env) as second:
            answers: dict[str, list[dict[str, object]]] = {}

            async def prompt(name: str, proc: Zot, message: str) -> None:
                await proc.send({"id": name, "type": "prompt", "message": message})
                answers[name] = await proc.until_type("done")

            async with anyio.create_task_group() as tg:
                tg.start_soon(prompt, "a", first, "from the editor")
                tg.start_soon(prompt, "b", second, "from the terminal")
            for name, said in (("a", "from the editor"), ("b", "from the terminal")):
                frames = answers[name]
                assert frames[0]["success"] is True, frames[0]
                assert types(frames[1:])[-2:] == ["turn_end", "done"]
                assert of(frames, "error") == []
                # Each sees its own turn, and only its own.
                assert text(frames) == f"You said: {said}"
                (user,) = of(frames, "user_message")
                assert user["content"] == [{"type": "text", "text": said}]
            # Each process still answers after the other's turn.
            await second.send({"id": "b2", "type": "prompt", "message": "again"})
            assert text(await second.until_type("done")) == "You said: again"
        # The second's exit leaves the first serving.
        await first.send({"id": "a2", "type": "prompt", "message": "still here"})
        assert text(await first.until_type("done")) == "You said: still here"
