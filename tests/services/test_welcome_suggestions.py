"""``welcome/suggestions`` (docs/suggestions.md): turns that complete refresh the
cache in the background with a helper turn; requests only read the cache; the
setting switches it off. The model API is the scripted fake, so every model call
is counted: the second request makes none."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio

from tests.support.client import RpcClient
from tests.support.fake_models import (
    FakeModelServer,
    Reply,
    fake_model_server,
    openai_chunk,
    openai_stream,
    openai_text_reply,
)
from tests.support.helpers import IDENTITY
from tests.support.servers import ServerUnderTest
from tests.support.turns import new_thread, run_turn

CHAT = "POST /v1/chat/completions"
WELCOME = "welcome/suggestions"
UPDATE = "workspace/config/update"
FIRST = "Fix the off-by-one in `parse_header` (src/http/parser.py)"
SECOND = "Add a regression test in tests/test_parser.py for it"
ITEMS = [
    {
        "title": f"Step {n}",
        "prompt": f"Handle case {n} in src/http/parser.py",
        "reason": "You worked on the parser.",
    }
    for n in range(1, 5)
]


def tool_call(name: str, arguments: dict[str, Any]) -> Reply:
    """A streamed Chat Completions answer that calls one tool."""
    opening = {"index": 0, "id": "call_1", "type": "function", "function": {"name": name}}
    rest = {"index": 0, "function": {"arguments": json.dumps(arguments)}}
    return openai_stream(
        [
            openai_chunk({"role": "assistant", "tool_calls": [opening]}),
            openai_chunk({"tool_calls": [rest]}),
            openai_chunk({}, finish_reason="tool_calls"),
            openai_chunk(no_choices=True, usage=(20, 10)),
        ]
    )


def script_two_turns_and_the_helper(fake: FakeModelServer) -> None:
    """Two turns' answers, then the helper turn's suggestions."""
    fake.script(
        CHAT,
        openai_text_reply(["On it."]),
        openai_text_reply(["Done."]),
        tool_call("EmitWelcomeSuggestions", {"items": ITEMS}),  # the helper turn
        openai_text_reply(["Recorded."]),
    )


async def two_turns_until_updated(
    client: RpcClient, fake: FakeModelServer
) -> tuple[str, dict[str, Any]]:
    """Point the server at ``fake``, run two turns on a new thread, and wait for
    ``welcome/suggestionsUpdated``: (the thread, its params)."""
    await client.request(
        UPDATE, {"provider": "openai", "endPoint": fake.openai_base_url, "apiKey": "sk-test"}
    )
    mark = client.mark()
    thread_id = await new_thread(client)
    for said in (FIRST, SECOND):
        await run_turn(client, thread_id, said)
    with anyio.fail_after(20):
        updated = await client.notification("welcome/suggestionsUpdated", start=mark)
    return thread_id, updated


async def test_turns_refresh_the_cache_requests_only_read_it_and_the_setting_stops_it(
    server: ServerUnderTest, workspace: Path
) -> None:
    async with fake_model_server() as fake, server.connect(initialize=False) as client:
        script_two_turns_and_the_helper(fake)
        initialized = await client.initialize()
        assert initialized["capabilities"]["extensions"] == {"welcomeSuggestions": True}
        before = await client.request(WELCOME, {"identity": IDENTITY})
        assert (before["source"], before["items"], before["fingerprint"]) == ("none", [], "")
        thread_id, updated = await two_turns_until_updated(client, fake)
        assert updated["items"] == ITEMS and updated["source"] == "dynamic"

        helper = fake.bodies(CHAT)[2]
        assert [tool["function"]["name"] for tool in helper["tools"]] == ["EmitWelcomeSuggestions"]
        evidence = helper["messages"][-1]["content"]
        assert f"- {FIRST}\n" in evidence and f"- {SECOND}\n" in evidence

        first = await client.request(WELCOME, {"identity": IDENTITY})
        second = await client.request(WELCOME, {"identity": {**IDENTITY, "workspacePath": ""}})
        # Only the workspace of the identity is read: the rest may be absent.
        partial = await client.request(WELCOME, {"identity": {"workspacePath": ""}})
        assert first == second == partial == {key: updated[key] for key in first}
        assert len(first["fingerprint"]) == 64
        two = await client.request(WELCOME, {"identity": IDENTITY, "maxItems": 2})
        assert two["items"] == ITEMS[:2]
        assert len(fake.bodies(CHAT)) == 4  # answered from the cache: no model call
        stored = json.loads((workspace / ".craft/cache/welcome-suggestions.json").read_text())
        assert stored["Result"]["Items"][0] == {
            "Title": "Step 1",
            "Prompt": ITEMS[0]["prompt"],
            "Reason": ITEMS[0]["reason"],
        }
        # Nothing of the helper thread reached the client.
        started = [m["params"]["threadId"] for m in client.notifications("thread/started")]
        assert started == [thread_id]
        assert not client.notifications("thread/deleted")
        other = await client.fail(WELCOME, {"identity": {**IDENTITY, "workspacePath": "/else"}})
        assert other.code == -32600

        mark = client.mark()
        result = await client.request(UPDATE, {"welcomeSuggestionsEnabled": False})
        assert result["welcomeSuggestionsEnabled"] is False
        changed = await client.notification("workspace/configChanged", start=mark)
        assert changed["regions"] == ["welcomeSuggestions"]
        off = await client.request(WELCOME, {"identity": IDENTITY})
        assert (off["source"], off["items"]) == ("none", [])
        await client.request(UPDATE, {"welcomeSuggestionsEnabled": None})
        assert (await client.request(WELCOME, {"identity": IDENTITY}))["items"] == ITEMS


async def test_a_snapshot_on_disk_keeps_turns_refreshing_it_unasked(
    server: ServerUnderTest, workspace: Path
) -> None:
    """After a restart nobody has asked yet, but the snapshot an earlier run
    kept is there: completed turns refresh it (the family, waiting for its
    first call, installs at the first such turn)."""
    from appserver.protocol.suggestions import WelcomeSuggestionsResult
    from appserver.storage.welcome_cache import write_snapshot

    stale = WelcomeSuggestionsResult(
        items=[], source="none", generated_at="2026-01-01T00:00:00Z", fingerprint="old"
    )
    write_snapshot(workspace / ".craft", stale)
    async with fake_model_server() as fake, server.connect() as client:
        script_two_turns_and_the_helper(fake)
        _, updated = await two_turns_until_updated(client, fake)
        assert updated["items"] == ITEMS
        stored = json.loads((workspace / ".craft/cache/welcome-suggestions.json").read_text())
        assert stored["Result"]["Items"][0]["Title"] == "Step 1"
