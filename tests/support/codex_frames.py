"""Validate what the Codex face sent against the JSON Schema Codex 0.169 generates
(tests/support/codex_clients.py): notifications against ``ServerNotification``,
server requests against ``ServerRequest``, responses against the ``*Response``
schema of the request they answer (``ClientRequest`` names its params type)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jsonschema import Draft7Validator


class CodexSchema:
    """The validators of one generated schema directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.notifications = self._branches("ServerNotification.json")
        self.requests = self._branches("ServerRequest.json")
        self.params_names = {
            method: branch["properties"]["params"]["$ref"].rsplit("/", 1)[-1]
            for method, branch in self._branches("ClientRequest.json").items()
            if "$ref" in branch["properties"].get("params", {})  # no params type: no name
        }

    def _branches(self, name: str) -> dict[str, Any]:
        document = json.loads((self.root / name).read_text())
        branches: dict[str, Any] = {}
        for branch in document["oneOf"]:
            (method,) = branch["properties"]["method"]["enum"]
            branches[method] = {**branch, "definitions": document["definitions"]}
        return branches

    def errors(self, frame: dict[str, Any], asked: dict[Any, str]) -> list[str]:
        """What is wrong with ``frame``; ``asked`` maps request ids to methods."""
        if "method" in frame:
            table = self.requests if "id" in frame else self.notifications
            schema = table.get(frame["method"])
            if schema is None:
                return [f"{frame['method']}: not a Codex server message"]
            return [e.message for e in Draft7Validator(schema).iter_errors(frame)]
        if "error" in frame:
            return []
        method = asked.get(frame.get("id"))
        if method is None or method not in self.params_names:
            return [] if method is None else [f"{method}: not a Codex request"]
        name = self.params_names[method].removesuffix("Params") + "Response"
        path = self.root / "v2" / f"{name}.json"
        if not path.exists():
            path = self.root / f"{name}.json"
        if not path.exists():
            return []  # e.g. a Params type shared by several methods
        schema = json.loads(path.read_text())
        result = frame.get("result")
        return [f"{method}: {e.message}" for e in Draft7Validator(schema).iter_errors(result)]


def check_frames(schema: CodexSchema, sent: Path) -> list[str]:
    """Every frame in ``sent`` (one JSON per line) checked against the requests
    recorded beside it (``sent`` + ``.in``); the problems found."""
    asked: dict[Any, str] = {}
    received = sent.with_name(sent.name + ".in")
    for line in received.read_text().splitlines() if received.exists() else []:
        message = json.loads(line)
        if "method" in message and "id" in message:
            asked[message["id"]] = message["method"]
    problems = []
    for line in sent.read_text().splitlines():
        frame = json.loads(line)
        problems += [f"{e} in {line[:300]}" for e in schema.errors(frame, asked)]
    return problems
