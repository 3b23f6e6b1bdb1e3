"""Opening the connection, and re-opening it when it is lost: backoff, a new
handshake, and re-subscribing each followed thread from the last ``seq`` seen so
notification iterators go on with no gap and no duplicate.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
from collections.abc import Awaitable, Callable

from appserver_client.connection import Connection, ReconnectCallback
from appserver_client.errors import (
    SERVER_OVERLOADED,
    AppServerError,
    ClientClosed,
    ConnectFailed,
    ConnectionLost,
    RpcError,
)
from appserver_client.handlers import maybe_await
from appserver_client.transport import Transport

log = logging.getLogger("appserver_client")


class Reconnecting(Connection):
    """A :class:`~appserver_client.connection.Connection` that opens its transport
    and, with :attr:`reconnect`, opens it again after it is lost."""

    async def _open(self, opener: Callable[[], Awaitable[Transport]], reconnect: bool) -> None:
        self._opener = opener
        self.reconnect = reconnect
        transport = await opener()
        self._attach(transport)
        try:
            await self._handshake()
        except ConnectionLost as exc:
            # The server went away before answering (a spawned one that exited
            # at start): the message carries its exit code and stderr tail.
            await self._abandon(transport)
            raise ConnectFailed(f"the server did not start: {exc}") from exc
        except BaseException:
            await self._abandon(transport)
            raise
        self._ready.set()
        self._supervisor = asyncio.get_running_loop().create_task(
            self._supervise(), name="appserver-client supervisor"
        )

    async def _abandon(self, transport: Transport) -> None:
        """Give up a first connection whose handshake failed."""
        self._closing = True
        self._closed.set()
        await transport.close()

    # --- internals: connection loss and reconnect -------------------------------

    async def _supervise(self) -> None:
        try:
            await self._supervise_loop()
        except Exception as exc:  # a bug must not leave callers waiting forever
            log.exception("appserver-client supervisor failed")
            self._shutdown(ConnectionLost(f"client failed: {exc!r}"))

    async def _supervise_loop(self) -> None:
        while True:
            assert self._reader is not None
            reason = await self._reader
            if self._closing:
                return
            self._ready.clear()
            lost = reason if isinstance(reason, ConnectionLost) else ConnectionLost(str(reason))
            self._fail_pending(lost)
            if not self.reconnect or self._opener is None:
                self._shutdown(lost)
                return
            log.warning("connection lost (%s); reconnecting", lost)
            await self._run_callbacks(self._disconnect_callbacks, "on_disconnect")
            failure = await self._reconnect_loop()
            if failure is not None:
                self._shutdown(failure)
                return

    async def _reconnect_loop(self) -> AppServerError | None:
        """Reconnect until it works (``None``), or give up (the error)."""
        assert self._opener is not None
        for attempt in itertools.count():
            if self._closing:
                return ClientClosed("client is closed")
            if self.max_reconnect_attempts is not None and attempt >= self.max_reconnect_attempts:
                return ConnectionLost(f"gave up reconnecting after {attempt} attempt(s)")
            delay = min(self.backoff_max, self.backoff_initial * 2**attempt)
            await asyncio.sleep(delay * (0.5 + random.random() / 2))
            try:
                transport = await self._opener()
            except ConnectFailed as exc:
                if exc.permanent:
                    return exc
                log.info("reconnect attempt %d failed: %s", attempt + 1, exc)
                continue
            if self._closing:
                await transport.close()
                return ClientClosed("client is closed")
            self._attach(transport)
            try:
                await self._handshake()
                await self._resubscribe()
            except (AppServerError, TimeoutError, OSError) as exc:
                log.info("reconnect attempt %d failed during setup: %s", attempt + 1, exc)
                self._holding.clear()
                await transport.close()
                if self._reader is not None:
                    await self._reader
                self._fail_pending(ConnectionLost("connection lost during reconnect"))
                continue
            self.reconnects += 1
            self._ready.set()
            self._release_held()
            log.info("reconnected (%d thread(s) re-subscribed)", len(self._subscribed))
            await self._run_callbacks(self._reconnect_callbacks, "on_reconnect")
            return None
        raise AssertionError("unreachable")  # pragma: no cover

    async def _run_callbacks(self, callbacks: list[ReconnectCallback], what: str) -> None:
        for callback in list(callbacks):
            try:
                await maybe_await(callback(self))
            except Exception:  # a user's callback must not stop reconnecting
                log.exception("%s callback failed", what)

    async def _resubscribe(self) -> None:
        """Re-subscribe followed threads, replaying what was missed.

        Each thread's notifications are held back from ``thread/subscribe
        {afterSeq}`` until a second (idempotent) ``thread/subscribe`` answers:
        the server runs it only after the replay was queued, so by then every
        replayed event is in. :meth:`_release_held` then delivers them in
        ``seq`` order through the usual duplicate check (live broadcasts that
        overtook the replay included).
        """
        threads = sorted(self._subscribed | set(self._running_turns))
        for thread_id in threads:
            self._holding[thread_id] = []
        await asyncio.gather(*(self._resubscribe_one(thread_id) for thread_id in threads))

    async def _resubscribe_one(self, thread_id: str) -> None:
        params = {"threadId": thread_id, "afterSeq": self._last_seq.get(thread_id, 0)}
        try:
            await self._call("thread/subscribe", params, self.request_timeout)
        except RpcError as exc:
            if exc.code == SERVER_OVERLOADED:
                raise  # this attempt fails; the next one tries again
            log.warning("could not re-subscribe %s: %s", thread_id, exc)
            self._forget_thread(thread_id)
            return
        # The barrier: answered only after the replay above was queued.
        await self._call("thread/subscribe", {"threadId": thread_id}, self.request_timeout)

    def _release_held(self) -> None:
        holding, self._holding = self._holding, {}
        for held in holding.values():
            for notification in sorted(held, key=lambda n: n.seq or 0):
                self._on_notification(notification)
