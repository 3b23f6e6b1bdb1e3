"""``command/exec``: one command the client itself runs (an argv, no shell), as
Codex's "run a command" utility. The client is the user, so nothing is asked;
but only in a trusted workspace (docs/security.md), since a checkout's
``.craft/`` must not turn a connection into a way to run its code unasked.

The command runs in its own process group (killed at the timeout, when the
request is cancelled, and when it returns, so nothing it started outlives
it), with the tools' environment (the server's minus its secrets) plus the
request's ``env``, stdin closed, and each of stdout and stderr capped. No OS
sandbox: a ``sandboxPolicy`` that asks for one is refused. The streaming
variants (``tty``, ``streamStdin``, ``streamStdoutStderr``) are not served.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import ByteReceiveStream

from appserver.faces.codex.wire import CodexError, Message
from appserver.tools.environment import tool_environment
from appserver.tools.groups import kill_process_group, open_group_process
from appserver.tools.reaper import REAPER

if TYPE_CHECKING:
    from appserver.faces.codex.session import CodexSession

DEFAULT_TIMEOUT_MS = 10_000  # Codex's default for command/exec
DEFAULT_CAP = 1 << 20  # bytes kept of each of stdout and stderr
MAX_CAP = 64 << 20  # what disableOutputCap or a larger outputBytesCap get
TIMED_OUT_EXIT = 124  # as Codex (and timeout(1)) report a timed-out command
DRAIN_S = 0.5  # after the exit, for output still in the pipes
UNSANDBOXED = (None, "dangerFullAccess", "externalSandbox")
STREAMING = ("tty", "streamStdin", "streamStdoutStderr")


def _refuse(why: str) -> CodexError:
    return CodexError(f"Invalid request: {why}")


def _argv(params: Message) -> list[str]:
    command = params.get("command")
    if not isinstance(command, list) or not command:
        raise _refuse("command must be a non-empty array of strings")
    if not all(isinstance(word, str) and "\0" not in word for word in command):
        raise _refuse("command must be a non-empty array of strings")
    return command


def _cwd(session: CodexSession, params: Message) -> Path:
    workspace = Path(session.workspace).resolve()
    cwd = params.get("cwd")
    if cwd is None:
        return workspace
    if not isinstance(cwd, str) or "\0" in cwd:
        raise _refuse("cwd must be a path")
    try:
        resolved = (workspace / cwd).resolve()
        usable = resolved.is_relative_to(workspace) and resolved.is_dir()
    except OSError:
        usable = False
    if not usable:
        raise _refuse(f"cwd must be a directory inside the workspace ({workspace})")
    return resolved


def _timeout_s(params: Message) -> float | None:
    timeout = params.get("timeoutMs")
    if params.get("disableTimeout") is True:
        if timeout is not None:
            raise _refuse("timeoutMs cannot be combined with disableTimeout")
        return None
    if timeout is None:
        return DEFAULT_TIMEOUT_MS / 1000
    if type(timeout) is not int or timeout <= 0:
        raise _refuse("timeoutMs must be a positive integer")
    return timeout / 1000


def _cap(params: Message) -> int:
    cap = params.get("outputBytesCap")
    if params.get("disableOutputCap") is True:
        if cap is not None:
            raise _refuse("outputBytesCap cannot be combined with disableOutputCap")
        return MAX_CAP
    if cap is None:
        return DEFAULT_CAP
    if type(cap) is not int or cap < 0:
        raise _refuse("outputBytesCap must be a non-negative integer")
    return min(cap, MAX_CAP)


def _environment(params: Message) -> dict[str, str]:
    env = tool_environment()
    overrides = params.get("env")
    if overrides is None:
        return env
    if not isinstance(overrides, dict):
        raise _refuse("env must be an object")
    for name, value in overrides.items():
        if value is None:
            env.pop(name, None)
        elif isinstance(value, str) and "\0" not in value + name and "=" not in name and name:
            env[name] = value
        else:
            raise _refuse(f"env value of {name!r} must be a string or null")
    return env


def _check(session: CodexSession, params: Message) -> None:
    if not session.runtime.workspace_trusted():
        raise _refuse(
            "the workspace is not trusted, so command/exec is off "
            "(start with --trust-workspace, or trust it with workspace/trust)"
        )
    for flag in STREAMING:
        if params.get(flag) is True:
            raise _refuse(f"{flag} is not supported here (buffered command/exec only)")
    policy: Any = params.get("sandboxPolicy")
    kind = policy.get("type") if isinstance(policy, dict) else policy
    if kind not in UNSANDBOXED:
        raise _refuse(
            f"sandboxPolicy {kind} is not available: there is no OS sandbox here "
            "(omit it, or ask for dangerFullAccess)"
        )


async def _read(
    stream: ByteReceiveStream | None, cap: int, into: bytearray, ended: anyio.Event
) -> None:
    """Keep the first ``cap`` bytes; read (and drop) the rest so the command never blocks."""
    try:
        if stream is not None:
            async for chunk in stream:
                if len(into) < cap:
                    into += chunk[: cap - len(into)]
    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
        pass
    ended.set()


async def command_exec(session: CodexSession, params: Message) -> Message:
    _check(session, params)
    argv, cwd = _argv(params), _cwd(session, params)
    timeout_s, cap, env = _timeout_s(params), _cap(params), _environment(params)
    try:
        process = await open_group_process(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=str(cwd),
            env=env,
        )
    except OSError as exc:
        raise _refuse(f"could not start {argv[0]!r}: {exc.strerror or exc}") from None
    REAPER.track(process.pid)
    stdout, stderr = bytearray(), bytearray()
    ended = anyio.Event(), anyio.Event()
    exit_code: int | None = None
    try:
        with anyio.move_on_after(timeout_s):
            async with anyio.create_task_group() as readers:
                readers.start_soon(_read, process.stdout, cap, stdout, ended[0])
                readers.start_soon(_read, process.stderr, cap, stderr, ended[1])
                exit_code = await process.wait()
                # What it wrote just before exiting; a child it left behind
                # may hold the pipes open, so the wait for their end is bounded.
                with anyio.move_on_after(DRAIN_S):
                    for event in ended:
                        await event.wait()
                readers.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await kill_process_group(process.pid)  # what it left running, or all of it
            REAPER.untrack(process.pid)
            await process.aclose()
    err = stderr.decode("utf-8", errors="replace")
    if exit_code is None:
        exit_code = TIMED_OUT_EXIT
        err += f"\ncommand timed out after {timeout_s:g} s; its process group was killed\n"
    elif exit_code < 0:
        exit_code = 128 - exit_code  # killed by a signal, as a shell reports it
    return {
        "exitCode": exit_code,
        "stdout": stdout.decode("utf-8", errors="replace"),
        "stderr": err,
    }
