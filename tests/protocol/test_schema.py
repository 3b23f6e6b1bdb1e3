"""The generated JSON Schema is valid, complete, current, and describes real traffic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
from referencing import Registry, Resource

from appserver.cli import main
from appserver.protocol.methods import METHODS, NOTIFICATIONS, SERVER_REQUESTS
from appserver.protocol.schema import SCHEMA_FILE, build_schema
from tests.conftest import IDENTITY
from tests.support.servers import ServerUnderTest

SCHEMA = build_schema()
REPO = Path(__file__).resolve().parents[2]


def validator_for(ref: dict[str, Any]) -> jsonschema.Draft202012Validator:
    resource = Resource.from_contents(SCHEMA)
    registry: Registry[Any] = Registry().with_resource(SCHEMA["$id"], resource)
    return jsonschema.Draft202012Validator({"$ref": SCHEMA["$id"] + ref["$ref"]}, registry=registry)


def test_schema_is_valid_draft_2020_12() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_every_message_is_described() -> None:
    assert set(SCHEMA["x-methods"]) == set(METHODS)
    assert set(SCHEMA["x-notifications"]) == set(NOTIFICATIONS)
    assert set(SCHEMA["x-serverRequests"]) == set(SERVER_REQUESTS)
    for entry in SCHEMA["x-methods"].values():
        assert entry["params"]["$ref"].startswith("#/$defs/")
        assert entry["result"]["$ref"].startswith("#/$defs/")


def test_committed_copy_is_current() -> None:
    assert main(["schema", "--out", str(REPO / "schema"), "--check"]) == 0


def test_check_reports_a_stale_copy(tmp_path: Path) -> None:
    (tmp_path / SCHEMA_FILE).write_text("{}")
    assert main(["schema", "--out", str(tmp_path), "--check"]) == 1
    assert main(["schema", "--out", str(tmp_path)]) == 0
    assert main(["schema", "--out", str(tmp_path), "--check"]) == 0


@pytest.mark.parametrize("transport", ["memory"])
async def test_real_traffic_matches_the_schema(server: ServerUnderTest, transport: str) -> None:
    async with server.connect() as client:
        started = await client.request("thread/start", {"identity": IDENTITY})
        validator_for(SCHEMA["x-methods"]["thread/start"]["result"]).validate(started)
        thread_id = started["thread"]["id"]
        turn = await client.request(
            "turn/start", {"threadId": thread_id, "input": [{"type": "text", "text": "hi"}]}
        )
        validator_for(SCHEMA["x-methods"]["turn/start"]["result"]).validate(turn)
        await client.notification("turn/completed")
        listed = await client.request("thread/list", {"identity": IDENTITY})
        validator_for(SCHEMA["x-methods"]["thread/list"]["result"]).validate(listed)
        for message in client.notifications():
            spec = SCHEMA["x-notifications"].get(message["method"])
            assert spec is not None, message["method"]
            validator_for(spec["params"]).validate(message["params"])


def _properties() -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (name, key, prop)
        for name, definition in SCHEMA["$defs"].items()
        for key, prop in definition.get("properties", {}).items()
    ]


def test_every_property_has_a_description() -> None:
    missing = [f"{name}.{key}" for name, key, prop in _properties() if not prop.get("description")]
    assert not missing, f"add a field docstring to these wire model fields: {missing}"


def test_titles_are_type_names_not_mangled_field_names() -> None:
    # pydantic titles each field after its Python name ("Userid"); only types carry a title.
    titled = [f"{name}.{key}" for name, key, prop in _properties() if "title" in prop]
    assert not titled
    for name, definition in SCHEMA["$defs"].items():
        assert definition.get("title", name) == name
