"""Base class for every wire model: camelCase on the wire, nulls omitted."""

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError
from pydantic.alias_generators import to_camel

from appserver.protocol.limits import (
    MAX_LABEL_CHARS,
    MAX_NAME_CHARS,
    MAX_PATH_CHARS,
    MAX_TEXT_CHARS,
)

#: A JSON boolean, and only that: lax validation would read "no" as false and
#: 1 as true (a client's mistyped flag is -32602, as the docs say).
Flag = Annotated[bool, Strict()]
# A client's integer: a JSON number without fraction, never `true` (pydantic reads
# `true` as 1 otherwise: `timeoutMs: true` was one millisecond).
Int = Annotated[int, Strict()]

# Stored strings, bounded (protocol/limits.py says which is which).
Name = Annotated[str, Field(max_length=MAX_NAME_CHARS)]
Label = Annotated[str, Field(max_length=MAX_LABEL_CHARS)]
PathText = Annotated[str, Field(max_length=MAX_PATH_CHARS)]
LongText = Annotated[str, Field(max_length=MAX_TEXT_CHARS)]


class WireModel(BaseModel):
    """A JSON object on the wire.

    Fields are snake_case in Python and camelCase on the wire; unknown
    fields from peers are ignored so newer clients keep working.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        frozen=False,
        defer_build=True,
    )

    def to_wire(self) -> dict[str, Any]:
        """JSON-ready dict with camelCase keys and ``None`` fields left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class OpenWireModel(WireModel):
    """A wire object that keeps fields it does not know (capabilities, metadata)."""

    model_config = ConfigDict(extra="allow")


class Empty(WireModel):
    """``{}`` params or result."""


def first_error(exc: ValidationError) -> str:
    """The first error of a failed validation as ``loc: msg`` (``msg`` without a location)."""
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error.get("loc", ()))
    return f"{where}: {error.get('msg', '')}" if where else str(error.get("msg", ""))
