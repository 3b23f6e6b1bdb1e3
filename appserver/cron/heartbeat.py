"""The heartbeat: ``.craft/HEARTBEAT.md`` as a standing task list.

A heartbeat reads the file; if it is missing or "empty" (only blank lines,
``#`` headings and ``<!-- -->`` comments, which may span lines) nothing
runs. Otherwise one turn runs in the heartbeat's own thread (identity
``heartbeat``/``heartbeat``, kept across restarts) with the file as the task,
and the final agent text is the result. Every run is also broadcast as
``system/jobResult {source: "heartbeat"}``.

Heartbeats happen on demand (``heartbeat/trigger``, ``/heartbeat``) and,
when configured, periodically. On-demand and periodic heartbeats share one
lock, so they never overlap.

Periodic heartbeats are on when ``APPSERVER_HEARTBEAT_INTERVAL`` (seconds,
> 0) is set, or when the workspace config says ``Heartbeat: {Enabled: true,
IntervalSeconds: N}`` (default 1800). The variable wins; ``0`` turns the
timer off whatever the config says. The first periodic heartbeat comes one
interval after start, each next one an interval after the previous ended.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import anyio

from appserver.cron.clock import Clock, SystemClock, sleep_until_or_woken
from appserver.cron.runner import JobRunner, RunOutcome, ShuttingDown, ThreadSpec, Trigger
from appserver.protocol.cron import JobResultNotification
from appserver.runtime.bus import EventBus
from appserver.storage.cron import CronRepository, HeartbeatState

log = logging.getLogger("appserver.heartbeat")

HEARTBEAT_FILE = "HEARTBEAT.md"
HEARTBEAT_OK = "HEARTBEAT_OK"

_THREAD = ThreadSpec(
    channel_name="heartbeat",
    user_id="heartbeat",
    display_name="Heartbeat",
    source={"kind": "heartbeat"},
)


def heartbeat_prompt(content: str) -> str:
    """The turn's prompt for the given HEARTBEAT.md content."""
    return (
        f"Heartbeat check. Current {HEARTBEAT_FILE} content:\n\n{content.strip()}\n\n"
        "Carry out whatever in it needs doing now. "
        f"If nothing needs attention, respond with {HEARTBEAT_OK}."
    )


def is_empty(content: str) -> bool:
    """Only blank lines, ``#`` headings and HTML comments?"""
    in_comment = False
    for line in content.splitlines():
        rest = line.strip()
        while rest:
            if in_comment:
                end = rest.find("-->")
                if end < 0:
                    rest = ""
                else:
                    rest = rest[end + 3 :].strip()
                    in_comment = False
            elif rest.startswith("<!--"):
                rest = rest[4:]
                in_comment = True
            elif rest.startswith("#"):
                rest = ""
            else:
                return False
    return True


class HeartbeatService:
    """On-demand and periodic heartbeats (``server.heartbeat``)."""

    def __init__(
        self,
        craft_dir: Path,
        repo: CronRepository,
        runner: JobRunner,
        bus: EventBus,
        interval_s: float | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.path = craft_dir / HEARTBEAT_FILE
        self.repo = repo
        self.runner = runner
        self.bus = bus
        self.interval_s = interval_s
        self.clock: Clock = clock or SystemClock()
        self._lock = anyio.Lock()
        self._changed = anyio.Event()
        # False while the workspace is not trusted: the periodic timer (set in its
        # .craft/config.json) does not fire; heartbeat/trigger still does.
        self.may_run: Callable[[], bool] = lambda: True

    def use_clock(self, clock: Clock) -> None:
        """Switch the time source (tests); the timer restarts its wait."""
        self.clock = clock
        self._changed.set()

    async def trigger(self) -> dict[str, str]:
        """Run a heartbeat now: ``{}`` (nothing to do), ``{"result": text}`` or
        ``{"error": message}``. Waits for a heartbeat already running."""
        async with self._lock:
            return await self._beat()

    async def run_periodic(self) -> None:
        """The timer task (only started when an interval is configured)."""
        assert self.interval_s is not None
        while True:
            self._changed = changed = anyio.Event()
            deadline = self.clock.now_ms() + int(self.interval_s * 1000)
            if await sleep_until_or_woken(self.clock, deadline, changed):
                continue  # new clock: wait a full interval on it
            try:
                # Several nodes: the one that claims this interval beats.
                if self.may_run() and await self.repo.claim_heartbeat(self.interval_s):
                    await self.trigger()
            except Exception:
                log.exception("periodic heartbeat failed")

    async def _beat(self) -> dict[str, str]:
        try:
            content = await anyio.Path(self.path).read_text("utf-8")
        except FileNotFoundError:
            return {}
        except (OSError, UnicodeDecodeError) as exc:
            return self._announce(RunOutcome(None, error=f"cannot read {self.path}: {exc}"))
        if is_empty(content):
            return {}
        state = await self.repo.heartbeat()
        started = self.clock.now_ms()
        try:
            outcome = await self.runner.run(
                state.thread_id,
                _THREAD,
                Trigger(heartbeat_prompt(content), "heartbeat", "Heartbeat"),
            )
        except ShuttingDown:
            return {"error": "the server is shutting down"}
        except Exception as exc:
            log.exception("heartbeat crashed")
            outcome = RunOutcome(state.thread_id, error=f"internal error: {exc}")
        await self.repo.save_heartbeat(
            HeartbeatState(
                thread_id=outcome.thread_id or state.thread_id,
                last_run_at_ms=started,
                last_result=outcome.result,
                last_error=outcome.error,
            )
        )
        return self._announce(outcome)

    def _announce(self, outcome: RunOutcome) -> dict[str, str]:
        self.bus.publish(
            "system/jobResult",
            JobResultNotification(
                source="heartbeat",
                thread_id=outcome.thread_id,
                result=outcome.result,
                error=outcome.error,
                token_usage=outcome.token_usage,
            ),
            broadcast=True,
        )
        if outcome.error is not None:
            return {"error": outcome.error}
        return {"result": outcome.result or ""}
