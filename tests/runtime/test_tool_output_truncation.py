"""The one truncation rule for tool output to the model (runtime/tool_output.py):
head and tail kept, a marker counting what was cut, the full output in the item."""

from __future__ import annotations

import re
from pathlib import Path

from appserver.providers.openai_compat import OpenAIProvider
from appserver.runtime.engine_config import EngineConfig
from appserver.runtime.tool_output import DEFAULT_TOOL_OUTPUT_MAX_BYTES, truncate_for_model
from appserver.tools.files import ReadFileTool
from tests.support.agent_runs import agent_run, openai_tool_call, tool_messages
from tests.support.fake_models import fake_model_server, openai_text_reply

MARKER = re.compile(r"^\[\.\.\. (\d+) bytes \((\d+) lines\) of output omitted \.\.\.\]$", re.M)


def numbered(count: int) -> str:
    return "".join(f"line {n:04d}\n" for n in range(1, count + 1))


def test_output_within_the_limit_is_untouched() -> None:
    text = numbered(10)
    assert truncate_for_model(text, len(text.encode())) == text
    assert truncate_for_model("", 10) == ""


def test_zero_means_no_limit() -> None:
    text = numbered(5000)
    assert truncate_for_model(text, 0) == text


def test_head_and_tail_are_kept_around_a_marker_counting_the_cut() -> None:
    text = numbered(1000)  # 10 bytes a line
    cut = truncate_for_model(text, 1000)
    match = MARKER.search(cut)
    assert match is not None
    head, tail = cut[: match.start()], cut[match.end() + 1 :]
    assert text.startswith(head) and text.endswith(tail)
    assert head.endswith("\n") and tail.startswith("line ")  # cut at line ends
    omitted, lines = int(match.group(1)), int(match.group(2))
    assert len(head.encode()) + omitted + len(tail.encode()) == len(text.encode())
    assert lines == omitted // 10  # whole lines omitted
    assert len(head.encode()) + len(tail.encode()) <= 1000
    assert head.startswith("line 0001\n") and tail.endswith("line 1000\n")


def test_one_long_line_is_cut_inside_it() -> None:
    text = "x" * 50_000
    cut = truncate_for_model(text, 100)
    assert cut.startswith("x" * 50 + "\n[... 49900 bytes (1 lines)")
    assert cut.endswith("]\n" + "x" * 50)


def test_a_multibyte_character_at_a_cut_is_dropped_not_garbled() -> None:
    text = "é" * 1000  # two bytes each
    cut = truncate_for_model(text, 101)
    head, _marker, tail = cut.split("\n")
    assert set(head) == {"é"} and set(tail) == {"é"}
    assert "\ufffd" not in cut


def test_the_default_is_about_codexs() -> None:
    assert EngineConfig().tool_output_max_bytes == DEFAULT_TOOL_OUTPUT_MAX_BYTES == 10 * 1024


async def test_the_model_reads_the_cut_output_and_the_item_keeps_all(tmp_path: Path) -> None:
    big = numbered(3000)  # 30,000 bytes
    (tmp_path / "big.txt").write_text(big)
    async with fake_model_server() as fake:
        route = "POST /v1/chat/completions"
        fake.script(
            route,
            openai_tool_call("read_file", {"path": "big.txt"}),
            openai_text_reply(["read it"]),
            openai_text_reply(["still here"]),
        )
        provider = OpenAIProvider(api_key="sk-test", base_url=fake.openai_base_url)
        config = EngineConfig(tool_output_max_bytes=2000)
        async with agent_run(tmp_path, provider, [ReadFileTool()], config=config) as run:
            items = await run.turn("read big.txt")
            await run.turn("and now?")  # the history rebuilt from the stored items
        bodies = fake.bodies(route)

    result = next(item for item in items if item.type == "toolResult")
    assert result.payload["result"] == big  # the item holds the whole output
    live = tool_messages(bodies[1])[0]["content"]
    rebuilt = tool_messages(bodies[2])[0]["content"]
    assert live == rebuilt == truncate_for_model(big, 2000)
    match = MARKER.search(live)
    assert match is not None
    assert int(match.group(1)) > 27_000
    assert live.startswith("line 0001\n") and live.endswith("line 3000\n")
