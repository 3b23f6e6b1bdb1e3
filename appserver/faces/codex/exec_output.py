"""What ``codex exec`` does with the turn's final answer: ``--output-schema FILE``
and ``-o/--output-last-message FILE``.

``--output-schema``: Codex sends the schema to OpenAI as a strict structured
output format, so the model cannot answer otherwise. Our providers have no
such parameter, so the turn carries a system instruction (:func:`instruction`:
answer with one JSON value matching the schema, the schema itself) and the
final agent message is checked with ``jsonschema`` (:func:`mismatch`). A
final message that is not such JSON fails the turn (``turn.failed``, the
reason also on stderr, exit 1):
the SDK's ``thread.run()`` then throws, so a caller that gets a
``finalResponse`` back can parse it. The message itself was already written as
an ``agent_message`` item. A schema file that cannot be read, is not JSON, is
not an object or is not a valid JSON Schema refuses the run before it starts
(stderr, exit 1), as every start-up error of exec.

``-o FILE``: the last agent message (empty if there was none) is written to
FILE when the turn ends, before the terminal event, whatever the outcome. A
failed write is said on stderr and changes nothing else.

Light at import: ``jsonschema`` loads when a schema is given.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

Json = dict[str, Any]
MAX_SCHEMA_BYTES = 1024 * 1024


class OutputSchemaError(ValueError):
    """The ``--output-schema`` file is not a usable JSON Schema."""


def read_schema(path: Path) -> Json:
    """The JSON Schema in ``path``; :class:`OutputSchemaError` says why not."""
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import validator_for

    try:
        with path.open("rb") as file:
            raw = file.read(MAX_SCHEMA_BYTES + 1)
    except OSError as exc:
        raise OutputSchemaError(f"--output-schema {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_SCHEMA_BYTES:
        raise OutputSchemaError(f"--output-schema {path}: larger than {MAX_SCHEMA_BYTES} bytes")
    try:
        schema = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise OutputSchemaError(f"--output-schema {path}: not JSON ({exc})") from None
    if not isinstance(schema, dict):
        raise OutputSchemaError(f"--output-schema {path}: a JSON Schema is a JSON object")
    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        raise OutputSchemaError(
            f"--output-schema {path}: not a JSON Schema: {exc.message}"
        ) from None
    return schema


def instruction(schema: Json) -> str:
    """The system instruction that asks the model for the structured answer."""
    return (
        "# Output format\n"
        "Your final answer must be exactly one JSON value that matches the JSON Schema "
        "below, and nothing else: no prose before or after it, no Markdown code fence.\n"
        + json.dumps(schema, ensure_ascii=False, indent=2)
    )


def mismatch(schema: Json, text: str) -> str | None:
    """Why ``text`` is not JSON matching ``schema``; ``None`` when it is."""
    from jsonschema.exceptions import best_match
    from jsonschema.validators import validator_for

    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return f"not JSON ({exc})"
    error = best_match(validator_for(schema)(schema).iter_errors(value))
    if error is None:
        return None
    where = "".join(f"[{json.dumps(step)}]" for step in error.absolute_path)
    return f"{'at ' + where + ': ' if where else ''}{error.message}"


def write_last_message(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` as Codex's ``-o`` does (a failure is only said)."""
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        sys.stderr.write(f"appserver: -o {path}: {exc.strerror or exc}\n")
        return
    if not text:
        sys.stderr.write(f"appserver: no last agent message; wrote empty content to {path}\n")


class FinalAnswer:
    """Passes exec events on to ``write``, keeping the last agent message's text,
    and does with it what the flags ask when the turn ends (:meth:`failure`)."""

    def __init__(self, write: Any, schema: Json | None, path: Path | None) -> None:
        self.forward = write
        self.schema = schema
        self.path = path  # -o FILE
        self.text = ""

    def __call__(self, event: Json) -> None:
        item = event.get("item") or {}
        if event.get("type") == "item.completed" and item.get("type") == "agent_message":
            self.text = str(item.get("text", ""))
        self.forward(event)

    def failure(self, completed: bool) -> str | None:
        """Write ``-o``'s file; why a completed turn fails its ``--output-schema``."""
        if self.path is not None:
            write_last_message(self.path, self.text)
        if not completed or self.schema is None:
            return None
        why = mismatch(self.schema, self.text)
        return None if why is None else f"the final message does not match --output-schema: {why}"
