"""The generated protocol reference is current and its examples are accepted."""

from __future__ import annotations

import json
import re
from pathlib import Path

from appserver.protocol import errors as rpc_errors
from appserver.protocol.reference import reference_is_current, render_reference
from tests.support.client import RpcFailure
from tests.support.servers import running_server

REPO = Path(__file__).resolve().parents[2]


def test_committed_reference_is_current() -> None:
    assert reference_is_current(REPO / "docs" / "protocol.md"), "run `make schema`"


def examples() -> list[dict[str, object]]:
    blocks = re.findall(r"Example request:\n\n```json\n(.*?)\n```", render_reference(), re.S)
    return [json.loads(block) for block in blocks]


async def test_every_example_is_well_formed(workspace: Path) -> None:
    found = examples()
    assert len(found) >= 20
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        for example in found:
            if example["method"] == "initialize":
                continue
            try:
                await client.request(str(example["method"]), example["params"])
            except RpcFailure as failure:
                # Domain errors (unknown thread, ...) are fine; the shape must not be.
                assert failure.code not in (
                    rpc_errors.INVALID_PARAMS,
                    rpc_errors.METHOD_NOT_FOUND,
                ), (
                    example,
                    failure,
                )


def _cells(row: str) -> list[str]:
    """A Markdown table row's cells, split as GitHub does: on every ``|`` not escaped."""
    return re.split(r"(?<!\\)\|", row.strip())[1:-1]


def _types_section(text: str) -> str:
    return text.split("\n## Types\n", 1)[1].split("\n## ", 1)[0]


def test_every_type_in_a_table_is_defined_under_types() -> None:
    text = render_reference()
    defined = set(re.findall(r"^### `(\w+)`$", _types_section(text), re.M))
    assert {"SessionIdentity", "ClientInfo", "TextPart", "Thread", "Turn", "Item"} <= defined
    used: set[str] = set()
    for table in re.findall(r"(?:^\|.*\|\n)+", text, re.M):
        header, _, *rows = table.strip().split("\n")
        if _cells(header)[1].strip() != "type":
            continue
        for row in rows:
            cell = re.sub(r"\(#[^)]*\)", "", _cells(row)[1])
            used |= set(re.findall(r"\b[A-Z][A-Za-z0-9]+\b", cell))
    used |= set(re.findall(r"\*\*(?:Params|Result|Answer with)\*\* \(\[`(\w+)`\]", text))
    assert used, "no type names found in the tables"
    assert used <= defined, sorted(used - defined)
    # Every link into the Types section lands on a heading.
    anchors = {name.lower() for name in defined}
    targets = set(re.findall(r"\]\(#([a-z0-9_-]+)\)", text))
    assert targets <= anchors, sorted(targets - anchors)


def test_types_section_gives_fields_and_descriptions() -> None:
    section = _types_section(render_reference())
    identity = section.split("### `SessionIdentity`", 1)[1].split("\n### ", 1)[0]
    assert "| `channelName` | `string` | required; at most" in identity
    assert "| `channelContext` | `string` | optional" in identity
    rows = re.findall(r"^\| `\w+` \|.*\|$", section, re.M)
    assert rows
    assert all(_cells(row)[3].strip() for row in rows), "a field without a description"


def test_pipes_in_table_cells_are_escaped() -> None:
    text = render_reference()
    assert '`"server" \\| "client"`' in text
    for table in re.findall(r"(?:^\|.*\|\n)+", text, re.M):
        rows = table.strip().split("\n")
        width = len(_cells(rows[0]))
        for row in rows:
            assert len(_cells(row)) == width, row


def _notification_params() -> dict[str, dict[str, object]]:
    from appserver.protocol.schema import build_schema

    schema = build_schema()
    defs = schema["$defs"]
    return {
        name: defs[spec["params"]["$ref"].rsplit("/", 1)[-1]]
        for name, spec in schema["x-notifications"].items()
    }


def test_clients_md_routing_by_thread_id_is_true() -> None:
    """docs/clients.md: route by ``params.threadId``; it names the few that carry none."""
    params = _notification_params()
    text = (REPO / "docs" / "clients.md").read_text("utf-8")
    step = text.split("5. **Notifications.**", 1)[1].split("\n6. ", 1)[0]
    assert "Route by `params.threadId`" in step
    for name, definition in params.items():
        required = set(definition.get("required", []))  # type: ignore[arg-type]
        if name.split("/", 1)[0] in ("thread", "turn", "item"):
            assert "threadId" in required, name
        if name.startswith("item/"):
            assert "turnId" in required, name
        if name == "turn/diff/updated":  # Codex's shape, named in the step
            assert {"turnId", "diff"} <= required, name
            assert f"`{name}`" in step
        elif name.startswith("turn/"):
            assert "turn" in required, name
    without = {
        name
        for name, definition in params.items()
        if "threadId" not in definition["properties"]  # type: ignore[operator]
    }
    named = step.split("Only ", 1)[1].split("are not about a thread", 1)[0]
    assert set(re.findall(r"`([\w/]+)`", named)) == without
    optional = {
        name
        for name, definition in params.items()
        if name not in without and "threadId" not in definition.get("required", [])  # type: ignore[operator]
    }
    assert optional == {"system/event", "system/jobResult"}
    assert all(f"`{name}`" in step for name in optional)


def test_hand_written_docs_tables_keep_their_columns() -> None:
    for name in ("quickstart.md", "clients.md"):
        text = (REPO / "docs" / name).read_text("utf-8")
        for table in re.findall(r"(?:^\|.*\|\n)+", text, re.M):
            rows = table.strip().split("\n")
            assert all(len(_cells(row)) == len(_cells(rows[0])) for row in rows), (name, table)


def test_quickstart_starts_a_server_on_a_real_project() -> None:
    """docs/quickstart.md: ``make run`` is the try-it-here form; a real project is
    ``appserver app-server --listen ... --workspace DIR``, and those flags parse."""
    import shlex

    from appserver.cli import build_parser

    text = (REPO / "docs" / "quickstart.md").read_text("utf-8")
    start = text.split("## 1. Start the server", 1)[1].split("\n## ", 1)[0]
    assert "in the directory you want the agent to work in" not in start.lower()
    assert "make run" in start
    commands = [
        line for line in re.findall(r"^\S*appserver app-server .*$", start, re.M) if "--" in line
    ]
    assert commands, "document `appserver app-server --listen ... --workspace DIR`"
    for line in commands:
        words = shlex.split(line, comments=True)
        assert words[0].endswith("appserver")
        args = build_parser("app-server").parse_args(words[1:])
        assert args.command == "app-server"
        assert str(args.workspace) == "~/code/myproject"
        assert "--listen" in words
