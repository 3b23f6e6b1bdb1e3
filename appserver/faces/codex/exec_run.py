"""One ``codex exec --experimental-json`` turn on the ordinary runtime.

Read the prompt (stdin to its end, or the PROMPT words), open the workspace's
runtime (``--cd``, else the current directory), make a thread (channel
``codex``) or resume ``resume ID``, run one turn and write its events as JSONL
(:mod:`~appserver.faces.codex.exec_events`). Exit 0 after ``turn.completed``,
1 after ``turn.failed`` or an error (stderr says why), as Codex does.

Approvals: exec has nobody to ask. As Codex exec, the default policy is
``never``: workspace operations run unasked (our ``autoApprove``) and what
would be asked (anything outside the workspace) is declined. ``-c
approval_policy="untrusted"`` or ``--sandbox read-only`` make every gated call
(writes, commands that are not read-only) asked, so declined. A ``--websocket``
client watching the thread may still answer (docs/faces.md).

SIGTERM/SIGINT (the SDK's ``AbortSignal`` kills the process) interrupt the
turn, so the thread is left idle, not running.

``--output-schema`` and ``-o``: :mod:`~appserver.faces.codex.exec_output`.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import tomllib
from contextlib import AsyncExitStack
from typing import IO, Any

import anyio

from appserver.faces.codex.exec_events import ExecTurn, usage
from appserver.faces.codex.exec_output import FinalAnswer, instruction, read_schema
from appserver.faces.seat import Seat
from appserver.protocol.encoding import dumps_lenient

log = logging.getLogger("appserver.faces.codex")

CHANNEL = "codex"
USER_ID = "codex_sdk_ts"
PROVIDERS = ("offline", "openai", "anthropic")
TERMINAL = ("turn/completed", "turn/failed", "turn/cancelled")


class ExecFailed(Exception):
    """A refusal before the turn runs: one line on stderr, exit 1."""


def _toml(text: str) -> Any:
    try:
        return tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        return text  # a bare word, as Codex also accepts


def settings(args: argparse.Namespace, options: Any) -> str:
    """Apply what the flags and ``-c`` pairs mean here; the threads' approval policy."""
    import os

    codex_policy, sandbox = "never", args.sandbox
    for pair in args.config:
        key, sep, raw = pair.partition("=")
        key, value = key.strip(), _toml(raw.strip()) if sep else None
        if key == "model" and isinstance(value, str) and value:
            options.provider_options.setdefault("model", value)  # --model wins
        elif key == "model_provider" and value in PROVIDERS:
            options.provider_options["provider"] = value
        elif key == "openai_base_url" and isinstance(value, str) and value:
            options.provider_options.setdefault("base_url", value)
        elif key == "approval_policy" and isinstance(value, str):
            codex_policy = value
        elif key == "sandbox_mode" and isinstance(value, str):
            sandbox = sandbox or value
        else:
            log.debug("ignored Codex setting %r", pair)
    api_key = os.environ.get("CODEX_API_KEY")  # the SDK's apiKey option
    if api_key and "api_key" not in options.provider_options:
        options.provider_options["api_key"] = api_key
    for ignored in ("add_dir", "thread_source", "cyber_access_program"):
        if getattr(args, ignored):
            log.debug("ignored --%s", ignored.replace("_", "-"))
    if args.approval_policy:  # our own flag wins
        return str(args.approval_policy)
    return "default" if codex_policy == "untrusted" or sandbox == "read-only" else "autoApprove"


async def _prompt(args: argparse.Namespace, stdin: IO[bytes]) -> tuple[str | None, str]:
    """``(resume thread id or None, prompt)``."""
    words = list(args.words)
    thread_id = None
    if words[:1] == ["resume"]:
        if len(words) < 2:
            raise ExecFailed("resume needs a thread id")
        thread_id, words = words[1], words[2:]
    if words and words != ["-"]:
        return thread_id, " ".join(words)
    from appserver.faces.whole_input import read_in_daemon

    read = await read_in_daemon(stdin.read)  # a stop does not wait for the end of input
    return thread_id, read.decode("utf-8", errors="replace")


async def main(
    args: argparse.Namespace, options: Any, host: Any, stdin: IO[bytes], stdout: IO[bytes]
) -> int:
    """Run one turn; write its JSONL events to ``stdout``."""
    from appserver.providers.base import ProviderConfigError
    from appserver.runtime.errors import Refusal
    from appserver.storage.lock import WorkspaceLocked

    def write(event: dict[str, Any]) -> None:
        # The shared encoder: NaN and infinities (a model's tool arguments) are null.
        stdout.write(dumps_lenient(event).encode() + b"\n")
        stdout.flush()

    try:
        policy = settings(args, options)
        schema = read_schema(args.output_schema) if args.output_schema else None
        thread_id, prompt = await _prompt(args, stdin)
        if not prompt.strip() and not args.image:
            raise ExecFailed("no prompt given on stdin")
        options.warm_provider = False  # one turn, then exit
        async with AsyncExitStack() as stack:
            runtime = await stack.enter_async_context(host())
            try:
                return await _turn(runtime, args, policy, thread_id, prompt, schema, write)
            except (ExecFailed, Refusal) as exc:  # inside: the host's task group would wrap it
                return _refused(exc)
    except (ExecFailed, ProviderConfigError, ValueError, WorkspaceLocked) as exc:
        return _refused(exc)
    return 1  # unreachable: the context manager does not swallow exceptions


def _refused(exc: Exception) -> int:
    message = getattr(exc, "message", None) or str(exc)
    sys.stderr.write(f"appserver: {message}\n")
    return 1


async def _thread(runtime: Any, seat: Seat, thread_id: str | None, policy: str, model: Any) -> str:
    from appserver.runtime.errors import ThreadNotFound
    from appserver.runtime.threads import NewThread

    wanted: dict[str, Any] = {"approvalPolicy": policy}
    if model:
        wanted["model"] = model
    if thread_id is None:
        record = await runtime.threads.create(
            NewThread(user_id=USER_ID, channel_name=CHANNEL, configuration=wanted)
        )
    else:
        try:
            record = await runtime.threads.get(thread_id)
        except ThreadNotFound:
            raise ExecFailed(f"no thread {thread_id} in {runtime.threads.workspace}") from None
        if record.status != "active":
            await runtime.threads.resume(record.id, seat)
        current = dict(record.configuration or {})
        if {**current, **wanted} != current:  # this run's flags, as Codex applies them
            await runtime.threads.configure(record.id, {**current, **wanted})
    await runtime.threads.subscribe(record.id, seat)
    return str(record.id)


async def _earlier_usage(runtime: Any, thread_id: str) -> tuple[int, int]:
    record = await runtime.threads.get(thread_id)
    view = await runtime.threads.view(record, include_turns=True)
    spent = [turn.token_usage for turn in view.thread.turns if turn.token_usage is not None]
    return sum(u.input_tokens for u in spent), sum(u.output_tokens for u in spent)


async def _turn(
    runtime: Any,
    args: argparse.Namespace,
    policy: str,
    thread_id: str | None,
    prompt: str,
    schema: dict[str, Any] | None,
    write: Any,
) -> int:
    from appserver.protocol.turns import LocalImagePart, TextPart

    def prepare(_active: Any, user: Any) -> None:
        if schema is not None:  # for this turn only, as the SDK passes it per turn
            user.instructions.append(instruction(schema))

    seat = Seat(CHANNEL, topics_hidden=frozenset())  # command output included
    runtime.join(seat)
    try:
        thread_id = await _thread(runtime, seat, thread_id, policy, getattr(args, "model", None))
        write({"type": "thread.started", "thread_id": thread_id})
        spent = await _earlier_usage(runtime, thread_id)
        parts: list[Any] = [TextPart(type="text", text=prompt)] if prompt.strip() else []
        parts += [LocalImagePart(type="localImage", path=str(path)) for path in args.image]
        async with anyio.create_task_group() as watching:
            stop = Stop(runtime, thread_id)
            await watching.start(stop.watch)  # before the turn exists: no signal is lost
            active = await runtime.turns.start(thread_id, parts, origin=seat, prepare=prepare)
            await stop.turn_started(active.record.id)
            write({"type": "turn.started"})
            answer = FinalAnswer(write, schema, args.output_last_message)
            code = await _follow(seat, thread_id, active, runtime, spent, answer)
            watching.cancel_scope.cancel()
        return code
    finally:
        seat.close()
        runtime.leave(seat)


class Stop:
    """SIGTERM/SIGINT interrupt the turn (once it exists)."""

    def __init__(self, runtime: Any, thread_id: str) -> None:
        self.runtime = runtime
        self.thread_id = thread_id
        self.turn_id: str | None = None
        self.asked = False

    async def watch(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            task_status.started()
            async for _ in signals:
                self.asked = True
                await self._interrupt()

    async def turn_started(self, turn_id: str) -> None:
        self.turn_id = turn_id
        if self.asked:
            await self._interrupt()

    async def _interrupt(self) -> None:
        from appserver.faces.common import interrupt_quietly

        if self.turn_id is not None:
            await interrupt_quietly(self.runtime, self.thread_id, self.turn_id)


async def _follow(
    seat: Seat,
    thread_id: str,
    active: Any,
    runtime: Any,
    spent: tuple[int, int],
    answer: FinalAnswer,
) -> int:
    """Write the turn's events (through ``answer``) until its end; the exit code."""
    turn_id = active.record.id
    translated = ExecTurn(runtime.threads.workspace, answer)
    async for event in seat.events():
        if event.thread_id != thread_id or event.text is not None:
            continue  # a text delta: exec reports the item once it completes
        turn = getattr(event.params, "turn", None)
        if event.kind in TERMINAL and turn is not None and turn.id == turn_id:
            translated.finish()
            # The end is written once the runtime is done with the turn (its
            # thread idle, a failed turn's queue paused, under its lock file) and
            # with the turns it leaves (SubAgents', stopped as the process is
            # about to): the SDK kills the process and its user may remove the
            # workspace as soon as it reads turn.failed, and nothing may be made
            # there after.
            await active.done.wait()
            await runtime.engine.shutdown()
            return _end(event, translated, spent, answer)
        if getattr(event.params, "turn_id", turn_id) == turn_id:
            translated.feed(event)
    return 1  # the events ended without the turn's end (the runtime closed)


def _end(event: Any, turn: ExecTurn, spent: tuple[int, int], answer: FinalAnswer) -> int:
    write = answer  # the terminal event passes through it too
    failure = answer.failure(event.kind == "turn/completed")
    if failure is not None:
        write({"type": "turn.failed", "error": {"message": failure}})
        sys.stderr.write(f"appserver: {failure}\n")  # in the SDK's error after the stream
        return 1
    if event.kind == "turn/completed":
        totals = usage(spent[0] + turn.input_tokens, spent[1] + turn.output_tokens)
        write({"type": "turn.completed", "usage": totals})
        return 0
    if event.kind == "turn/failed":
        message = str(getattr(event.params, "error", "") or event.params.turn.error or "failed")
    else:
        message = "turn interrupted"
    write({"type": "turn.failed", "error": {"message": message}})
    return 1
