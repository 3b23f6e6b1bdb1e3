"""The shapes of the method table's entries."""

from dataclasses import dataclass

from pydantic import BaseModel


@dataclass(frozen=True)
class MethodSpec:
    """A client->server request.

    ``capability`` names the ``initialize`` flag that gates the method; the
    flag is advertised only when every method carrying it has a handler or
    installs one at its first call.
    """

    name: str
    params: type[BaseModel]
    result: type[BaseModel]
    capability: str | None
    summary: str
    errors: tuple[int, ...] = ()
    # Ordering against earlier requests on the same connection: "read",
    # "write" or "detached" (long-running; not ordered).
    access: str = "write"


@dataclass(frozen=True)
class NotificationSpec:
    """A server->client notification and who receives it."""

    name: str
    params: type[BaseModel]
    delivery: str
    summary: str


@dataclass(frozen=True)
class ServerRequestSpec:
    """A server->client request the client must answer."""

    name: str
    params: type[BaseModel]
    result: type[BaseModel]
    summary: str
