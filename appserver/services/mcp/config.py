"""MCP server configurations: validation, defaults, and what it takes to launch one.

Validation follows the reference (§3.9) and answers ``-32072`` with a
``data.detail`` naming the first problem. Timeouts not given in the
configuration use Codex's runtime default (10 s to connect and list tools),
DotCraft's ``mcp/test`` default (5 s) and a 60 s tool-call timeout.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from appserver.protocol import errors as rpc_errors
from appserver.protocol.errors import RpcError
from appserver.protocol.mcp import McpServerConfig

DEFAULT_STARTUP_TIMEOUT = 10.0
TEST_STARTUP_TIMEOUT = 5.0
DEFAULT_TOOL_TIMEOUT = 60.0
MAX_NAME_LENGTH = 128

_STDIO_ONLY = ("command", "args", "env", "env_vars", "cwd")
_HTTP_ONLY = ("url", "bearer_token_env_var", "http_headers", "env_http_headers")


def validation_failed(detail: str) -> RpcError:
    """``-32072`` with ``data.detail``."""
    return RpcError(
        rpc_errors.MCP_SERVER_VALIDATION_FAILED, "MCP server validation failed", {"detail": detail}
    )


def not_found(name: str) -> RpcError:
    """``-32070``."""
    return RpcError(rpc_errors.MCP_SERVER_NOT_FOUND, f"MCP server not found: {name}")


def read_only(name: str) -> RpcError:
    """``-32075``: plugin-origin servers are edited through their plugin, not here."""
    return RpcError(rpc_errors.MCP_SERVER_READ_ONLY, f"MCP server is read-only: {name}")


def _wire(field_name: str) -> str:
    head, *rest = field_name.split("_")
    return head + "".join(part.title() for part in rest)


def _present(value: object) -> bool:
    if value is None:
        return False
    if isinstance(value, str | list | dict):
        return bool(value.strip() if isinstance(value, str) else value)
    return True


def _trimmed(value: str | None) -> str | None:
    return (value or "").strip() or None


def normalise(config: McpServerConfig) -> McpServerConfig:
    """A validated copy: names and paths trimmed, empty values dropped and the
    output-only ``origin``/``readOnly`` cleared. Raises ``-32072``."""
    name = config.name.strip()
    if not name:
        raise validation_failed("'name' is required.")
    if len(name) > MAX_NAME_LENGTH:
        raise validation_failed(f"'name' must be at most {MAX_NAME_LENGTH} characters.")
    if any(not char.isprintable() for char in name):
        raise validation_failed("'name' must not contain control characters.")
    stdio = config.transport == "stdio"
    forbidden = _HTTP_ONLY if stdio else _STDIO_ONLY
    for field_name in forbidden:
        if _present(getattr(config, field_name)):
            raise validation_failed(
                f"'{_wire(field_name)}' is not allowed with the {config.transport} transport."
            )
    if stdio and not _present(config.command):
        raise validation_failed("'command' is required for the stdio transport.")
    if not stdio:
        url = (config.url or "").strip()
        if not url:
            raise validation_failed("'url' is required for the streamableHttp transport.")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise validation_failed("'url' must be an absolute http or https URL.")
    for field_name in ("startup_timeout_sec", "tool_timeout_sec"):
        value = getattr(config, field_name)
        if value is not None and not (math.isfinite(value) and value > 0):
            raise validation_failed(f"'{_wire(field_name)}' must be a positive number of seconds.")
    for field_name in ("env", "http_headers", "env_http_headers"):
        mapping = getattr(config, field_name) or {}
        if any(not key.strip() for key in mapping):
            raise validation_failed(f"'{_wire(field_name)}' must not have empty names.")
    if any(not variable.strip() for variable in config.env_vars or []):
        raise validation_failed("'envVars' must not contain empty names.")
    return config.model_copy(
        update={
            "name": name,
            "command": _trimmed(config.command),
            "args": config.args or None,
            "env": config.env or None,
            "env_vars": [v.strip() for v in config.env_vars] if config.env_vars else None,
            "cwd": _trimmed(config.cwd),
            "url": _trimmed(config.url),
            "bearer_token_env_var": _trimmed(config.bearer_token_env_var),
            "http_headers": config.http_headers or None,
            "env_http_headers": config.env_http_headers or None,
            "origin": None,
            "read_only": None,
        }
    )


class LaunchError(Exception):
    """The configuration is valid but cannot be started here (e.g. a missing variable)."""


@dataclass(frozen=True)
class LaunchSpec:
    """Everything needed to open one connection, with the environment resolved."""

    transport: str
    startup_timeout: float
    tool_timeout: float
    command: str = ""
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict)


def launch_spec(
    config: McpServerConfig,
    workspace: Path,
    environ: Mapping[str, str],
    startup_default: float = DEFAULT_STARTUP_TIMEOUT,
) -> LaunchSpec:
    """Resolve ``config`` against the workspace and ``environ``.

    stdio: ``envVars`` are copied from ``environ`` (missing ones skipped), then
    ``env`` on top; a relative ``cwd`` is under the workspace, none means the
    workspace. HTTP: ``httpHeaders``, then ``envHttpHeaders`` read from
    ``environ`` (missing ones skipped), then ``Authorization: Bearer`` from
    ``bearerTokenEnvVar``, which must be set.
    """
    startup = config.startup_timeout_sec or startup_default
    tool = config.tool_timeout_sec or DEFAULT_TOOL_TIMEOUT
    if config.transport == "stdio":
        env = {name: environ[name] for name in config.env_vars or [] if name in environ}
        env.update(config.env or {})
        cwd = workspace / config.cwd if config.cwd else workspace
        return LaunchSpec(
            transport="stdio",
            startup_timeout=startup,
            tool_timeout=tool,
            command=config.command or "",
            args=tuple(config.args or ()),
            env=env,
            cwd=str(cwd),
        )
    headers = dict(config.http_headers or {})
    for header, variable in (config.env_http_headers or {}).items():
        if variable in environ:
            headers[header] = environ[variable]
    if config.bearer_token_env_var:
        token = environ.get(config.bearer_token_env_var)
        if not token:
            raise LaunchError(
                f"environment variable {config.bearer_token_env_var} (bearerTokenEnvVar) is not set"
            )
        headers["Authorization"] = f"Bearer {token}"
    return LaunchSpec(
        transport="streamableHttp",
        startup_timeout=startup,
        tool_timeout=tool,
        url=config.url or "",
        headers=headers,
    )
