"""Input parts never read the server's state directory (issue 24).

``.craft/`` holds the database and ``config.json`` (with API keys): for
``fileRef`` and ``localImage`` it lies outside the workspace, by the same
rule the tools use (``tools.sandbox.in_workspace``), however the path is
spelled and through symlinks too. The one exception is the server's own
image store, ``.craft/attachments/images/``, where the faces keep the images
they receive (only real images are read from it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio

from appserver.protocol.turns import FileRefPart
from appserver.runtime.inputs import InputMaterializer
from tests.runtime.test_inputs import tiny_png
from tests.support.path_swaps import first_open, swapped
from tests.support.servers import running_server
from tests.support.turns import new_thread, one_item, run_turn

KEY = "sk-issue24-DO-NOT-LEAK-0123456789"


async def test_a_file_ref_to_the_servers_config_is_never_inlined(workspace: Path) -> None:
    (workspace / "innocent.txt").symlink_to(workspace / ".craft" / "config.json")
    parts: list[dict[str, Any]] = [
        {"type": "text", "text": "read these"},
        {"type": "fileRef", "path": ".craft/config.json"},
        {"type": "fileRef", "path": str(workspace / ".craft" / "config.json")},
        {"type": "fileRef", "path": "src/../.craft/./config.json"},
        {"type": "fileRef", "path": "innocent.txt", "displayPath": "@innocent.txt"},
    ]
    with anyio.fail_after(30):
        async with running_server("stdio", workspace) as server, server.connect() as client:
            # Written once the server runs: this is about reading, not start-up.
            (workspace / ".craft" / "config.json").write_text(json.dumps({"ApiKey": KEY}))
            thread_id = await new_thread(client)
            mark = client.mark()
            turn_id, terminal = await run_turn(client, thread_id, parts)
            assert terminal["method"] == "turn/completed"
            user = one_item(client, turn_id, "userMessage", mark)["payload"]
            reply = one_item(client, turn_id, "agentMessage", mark)["payload"]["text"]
            stored = await client.request(
                "thread/read", {"threadId": thread_id, "includeTurns": True}
            )
    texts = [part["text"] for part in user["materializedInputParts"][1:]]
    assert texts[0] == "[fileRef:.craft/config.json: outside the workspace]"
    assert texts[3] == "[fileRef:@innocent.txt: outside the workspace]"
    assert all(text.endswith(": outside the workspace]") for text in texts)
    assert KEY not in json.dumps(user)  # stored
    assert KEY not in reply  # the offline model answers with what it was sent
    assert KEY not in json.dumps(stored)  # returned by thread/read
    assert KEY not in json.dumps(client.messages)  # nor in anything else sent


async def test_a_local_image_in_the_state_directory_is_read_only_from_the_image_store(
    workspace: Path,
) -> None:
    craft = workspace / ".craft"
    store = craft / "attachments" / "images"
    parts = [
        {"type": "text", "text": "look"},
        {"type": "localImage", "path": ".craft/elsewhere.png"},
        {"type": "localImage", "path": ".craft/attachments/images/kept.png"},
    ]
    with anyio.fail_after(30):
        async with running_server("stdio", workspace) as server, server.connect() as client:
            (craft / "elsewhere.png").write_bytes(tiny_png())
            store.mkdir(parents=True, exist_ok=True)
            (store / "kept.png").write_bytes(tiny_png())
            thread_id = await new_thread(client)
            mark = client.mark()
            turn_id, terminal = await run_turn(client, thread_id, parts)
            assert terminal["method"] == "turn/completed"
            user = one_item(client, turn_id, "userMessage", mark)["payload"]
    materialized = user["materializedInputParts"]
    assert materialized[1] == {
        "type": "text",
        "text": "[localImage:.craft/elsewhere.png: outside the workspace]",
    }
    assert materialized[2]["type"] == "localImage"
    assert materialized[2]["path"] == str((store / "kept.png").resolve())


async def test_a_file_ref_is_not_read_through_a_link_swapped_in_after_the_check(
    workspace: Path, tmp_path: Path
) -> None:
    """The path is checked, then a directory on it becomes a link outside just
    before the file is opened: the file is not read (``tools.nofollow``)."""
    inner = workspace / "d"
    inner.mkdir()
    (inner / "f.txt").write_text("inside\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text(KEY)
    materializer = InputMaterializer(workspace, workspace / ".craft" / "attachments" / "images")
    with swapped(inner, outside, first_open) as swap:
        result = await materializer.materialize([FileRefPart(type="fileRef", path="d/f.txt")])
    assert swap.done.is_set()
    assert result.materialized_parts == [
        {"type": "text", "text": "[fileRef:d/f.txt: changed while being read]"}
    ]
