"""Running an external-CLI SubAgent's command once (``cli-oneshot``).

The command starts as the ``shell`` tool's do (:func:`~appserver.tools.groups.open_group_process`):
in a session and process group of its own, in its working directory opened
without following links, and known to the watchdog (``tools.reaper``) while it
runs, so it dies with the server even after a ``kill -9``. Its stdout and
stderr are read apart, each kept up to :data:`STREAM_LIMIT` bytes. A run ends
one of these ways:

* the command exits and both pipes close: its answer
  (:func:`~appserver.runtime.subagent_cli.answer`), or, for an exit code other
  than 0, an error with the code and its ``STDOUT`` and ``STDERR``;
* it exits but something it started keeps a pipe open: after
  :data:`PIPE_GRACE_S` its whole process group is killed, and the run is an error;
* the profile's ``timeout`` passes: the whole group is killed, an error;
* the run is cancelled (the child's turn interrupted or closed, its parent's
  turn interrupted, the server stopping): the whole group is killed, then the
  cancellation goes on.

What it is doing is reported through ``on_stage`` in DotCraft's words
("Launching codex (codex-cli) in /ws via arg.", "Waiting for codex to finish.").
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.to_thread
from anyio.abc import ByteReceiveStream, ByteSendStream

from appserver.protocol.subagent_profiles import SubAgentProfileWrite
from appserver.runtime.subagent_cli import (
    CliAnswer,
    Invocation,
    InvocationError,
    answer,
    build_invocation,
    error,
    exit_error,
    timeout_seconds,
)
from appserver.tools.groups import KILL_GRACE_S, kill_process_group, open_group_process
from appserver.tools.nofollow import PathChanged, open_directory
from appserver.tools.reaper import REAPER

PIPE_GRACE_S = 2.0  # after the command exits, for its pipes to close
STREAM_LIMIT = 16 * 1024 * 1024  # bytes of stdout (and of stderr, and of the file) kept


def resolve_binary(bin_: str) -> str:
    """``bin`` as a path: a name is looked up on the server's PATH, a path (with a
    ``/``; a relative one from the server's directory) must be an executable file."""
    name = bin_.strip()
    found = shutil.which(name)
    if found is not None:
        return os.path.abspath(found)
    if os.sep in name:
        raise InvocationError(f"External subagent binary '{name}' does not exist.")
    raise InvocationError(f"External subagent binary '{name}' was not found on PATH.")


@dataclass
class _Stream:
    """One of the command's pipes, read to its end (kept up to the limit)."""

    chunks: list[bytes] = field(default_factory=list)
    size: int = 0
    done: anyio.Event = field(default_factory=anyio.Event)

    async def pump(self, stream: ByteReceiveStream | None) -> None:
        if stream is not None:
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                async for chunk in stream:
                    if self.size < STREAM_LIMIT:
                        self.chunks.append(chunk[: STREAM_LIMIT - self.size])
                    self.size += len(chunk)
        self.done.set()

    def text(self) -> str:
        return b"".join(self.chunks).decode("utf-8", errors="replace")


async def _feed(stream: ByteSendStream | None, data: bytes) -> None:
    """Write the task to the command's stdin and close it (a command that exits
    without reading it is no error)."""
    if stream is None:
        return
    with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
        await stream.send(data)
        await stream.aclose()


@dataclass(frozen=True)
class _Exited:
    code: int
    stdout: str
    stderr: str


async def run_profile(
    profile: SubAgentProfileWrite,
    name: str,
    task: str,
    cwd: Path,
    *,
    resume_session_id: str | None = None,
    permission_args: Sequence[str] = (),
    session: str = "subagent",
    on_stage: Callable[[str], None] = lambda text: None,
    environ: Mapping[str, str] | None = None,
    pipe_grace: float = PIPE_GRACE_S,
    kill_grace: float = KILL_GRACE_S,
) -> CliAnswer:
    """Run ``profile``'s command once on ``task`` in ``cwd``; its answer.

    ``session``: the Zene session id of a ``zene-host-v1`` request. Failures
    are answers (``is_error``); only cancellation raises.
    """
    try:
        binary = resolve_binary(profile.bin or "")
    except InvocationError as exc:
        return error(f"{exc} Profile='{name}'.")
    output_file: Path | None = None
    if profile.read_output_file:
        handle, path = tempfile.mkstemp(prefix="appserver-subagent-", suffix=".txt")
        os.close(handle)
        output_file = Path(path)
    try:
        try:
            invocation = build_invocation(
                profile,
                name,
                binary,
                task,
                resume_session_id=resume_session_id,
                permission_args=permission_args,
                output_file=output_file,
                environ=os.environ if environ is None else environ,
                session=session,
            )
        except InvocationError as exc:
            return error(str(exc))
        short = Path(binary).name
        on_stage(f"Launching {short} ({name}) in {cwd} via {invocation.input_mode}.")
        timeout = timeout_seconds(profile)
        ran = await _execute(invocation, cwd, timeout, short, on_stage, pipe_grace, kill_grace)
        if isinstance(ran, str):
            on_stage(f"Failed ({name}).")
            return error(f"{ran} Profile='{name}', Binary='{binary}'.")
        if ran.code != 0:
            on_stage(f"Failed ({name}, exit {ran.code}).")
            return exit_error(
                ran.code, ran.stdout, ran.stderr, name, binary, profile.max_output_bytes
            )
        file_text = None
        if output_file is not None:
            on_stage("Reading output file.")
            file_text = await anyio.to_thread.run_sync(_read, output_file)
        elif (profile.output_format or "").strip().lower() == "json":
            on_stage("Parsing JSON output.")
        result = answer(
            profile,
            ran.stdout,
            output_file=output_file,
            file_text=file_text,
            resume_session_id=resume_session_id,
        )
        on_stage(f"Failed ({name})." if result.is_error else f"Completed {name} via {short}.")
        return result
    finally:
        if output_file is not None and profile.delete_output_file_after_read:
            with contextlib.suppress(OSError):
                output_file.unlink()


def _read(path: Path) -> str | None:
    try:
        with path.open("rb") as file:
            return file.read(STREAM_LIMIT).decode("utf-8", errors="replace")
    except FileNotFoundError:
        return None


async def _execute(
    invocation: Invocation,
    cwd: Path,
    timeout: float | None,
    short: str,
    on_stage: Callable[[str], None],
    pipe_grace: float,
    kill_grace: float,
) -> _Exited | str:
    """Run the command to its end; how it exited, or why it did not (a sentence)."""
    # The working directory was checked when the child was spawned: open it
    # without following a link and start in the opened directory itself, so a
    # link swapped in since then fails the run instead of moving it elsewhere.
    try:
        workdir = open_directory(cwd)
    except (PathChanged, OSError) as exc:
        return f"Subagent working directory '{cwd}' cannot be used: {exc}."
    try:
        process = await open_group_process(
            invocation.argv,
            stdin=subprocess.PIPE if invocation.stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=f"/proc/self/fd/{workdir}",
            env=invocation.env,
        )
    except OSError as exc:
        return f"Failed to start the external subagent: {exc}."
    finally:
        os.close(workdir)
    # Until the command ends, its group dies with the server (see tools.reaper).
    REAPER.track(process.pid)
    out, err = _Stream(), _Stream()
    exited: list[int] = []
    drained = False
    try:
        with anyio.move_on_after(timeout if timeout is not None else math.inf):
            async with anyio.create_task_group() as reading:
                reading.start_soon(out.pump, process.stdout)
                reading.start_soon(err.pump, process.stderr)
                if invocation.stdin is not None:
                    on_stage(f"Sending task over stdin to {short}.")
                    reading.start_soon(_feed, process.stdin, invocation.stdin)
                on_stage(f"Waiting for {short} to finish.")
                exited.append(await process.wait())
                # What it wrote just before exiting may still be in the pipes;
                # something it started can hold them open for ever.
                with anyio.move_on_after(pipe_grace):
                    await out.done.wait()
                    await err.done.wait()
                drained = out.done.is_set() and err.done.is_set()
                reading.cancel_scope.cancel()
    finally:
        # Reached on every way out; shielded, so a cancelled run still ends its group.
        with anyio.CancelScope(shield=True):
            if exited and drained:
                REAPER.finished(process.pid)
            else:
                await kill_process_group(process.pid, kill_grace)
                REAPER.untrack(process.pid)
            await process.aclose()
    if not exited:
        return f"External subagent timed out after {timeout:g} seconds."
    if not drained:
        return (
            "External subagent exited but output pipe did not close within grace period; "
            "process tree terminated."
        )
    return _Exited(exited[0], out.text(), err.text())
