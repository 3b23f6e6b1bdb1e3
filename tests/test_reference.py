"""The generated protocol reference is current and its examples are accepted."""

from __future__ import annotations

import json
import re
from pathlib import Path

from appserver.protocol import errors as E
from appserver.protocol.reference import reference_is_current, render_reference
from tests.support.client import RpcFailure
from tests.support.servers import running_server

REPO = Path(__file__).resolve().parents[1]


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
                assert failure.code not in (E.INVALID_PARAMS, E.METHOD_NOT_FOUND), (
                    example,
                    failure,
                )
