"""Serving the Codeswarm router on stdio or TCP (see :mod:`appserver.faces.codeswarm.command`).

stdio: one client; at EOF the router waits for every accepted injection to
run, writes the last events and exits 0. TCP: clients come and go; each has
a reader and a writer, and the process runs until SIGINT/SIGTERM. Either way
a signal cancels running turns (their ``turn_complete`` still goes out),
fails queued injections and exits 0.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import IO, Protocol

import anyio
from anyio.abc import Listener, SocketAttribute, SocketStream

from appserver.faces.codeswarm.session import Router
from appserver.faces.codeswarm.wire import MAX_LINE_BYTES
from appserver.providers.base import ProviderConfigError
from appserver.runtime.host import Runtime
from appserver.storage.lock import WorkspaceLocked
from appserver.transport.base import FrameRejected, FrameTooLarge, TransportClosed
from appserver.transport.early import EarlyAnswer
from appserver.transport.peer_writer import PeerWriter
from appserver.transport.stdio import LineReader, StdioTransport

log = logging.getLogger("appserver.faces.codeswarm")

FLUSH_TIMEOUT = 3.0  # seconds to write the last events to clients at exit
# asyncio's socket transport reads 256 KiB at a time: a smaller receive splits
# each read into a slice and a copy of the rest, and under a flood of bytes that
# pattern kept gigabytes in the process (glibc's heap does not give them back).
_READ_CHUNK = 1 << 18

Signals = AsyncIterator[signal.Signals]


class ListenAddress(Protocol):
    """Where the router listens over TCP: ``--listen``'s value (``command.TcpAddress``)."""

    @property
    def host(self) -> str:
        """The loopback host to listen on."""

    @property
    def port(self) -> int:
        """The port asked for (0: a free one)."""

    def url(self, port: int | None = None) -> str:
        """``tcp://HOST:PORT``, with ``port`` (the one bound) instead of the one asked for."""


async def serve(
    args: argparse.Namespace,
    host: Callable[[], AbstractAsyncContextManager[Runtime]],
    stdin: IO[bytes],
    stdout: IO[bytes],
) -> int:
    address: ListenAddress | None = args.listen
    # Signals are caught before anything is announced: a supervisor may signal
    # as soon as it sees "listening on" and must get a clean exit.
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        listener: Listener[SocketStream] | None = None
        if address is not None:
            try:
                listener = await anyio.create_tcp_listener(
                    local_host=address.host, local_port=address.port
                )
            except OSError as exc:
                sys.stderr.write(f"appserver: cannot listen on {address.url()}: {exc}\n")
                return 1
        code = 0
        try:
            async with host() as runtime, anyio.create_task_group() as tg:
                router = Router(
                    runtime,
                    tg,
                    approval_policy=args.approval_policy,
                    require_timestamp=not args.allow_missing_timestamp,
                )
                await router.load()
                if listener is None or address is None:
                    early = getattr(args, "early", None)
                    code = await _serve_stdio(
                        router, stdin, stdout, signals, args.max_client_backlog, early
                    )
                else:
                    code = await _serve_tcp(
                        router, listener, address, signals, args.max_client_backlog
                    )
                tg.cancel_scope.cancel()
        except ProviderConfigError as exc:
            sys.stderr.write(f"appserver: {exc}\n")
            return 2
        except WorkspaceLocked as exc:
            sys.stderr.write(f"appserver: {exc}\n")
            return 1
        finally:
            if listener is not None:
                await listener.aclose()
        return code


async def _first_signal(signals: Signals, stop: anyio.Event) -> None:
    async for signum in signals:
        log.info("received signal %d; shutting down", int(signum))
        stop.set()
        return


async def _cancel_when(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


async def _line(router: Router, line: bytes, owner: object = None) -> None:
    """One raw line: blank lines are skipped, bad UTF-8 is rejected."""
    line = line.rstrip(b"\r")
    if not line.strip():
        return
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        router.reject(None, "message is not valid UTF-8")
        return
    await router.handle_line(text, owner)


# --- stdio --------------------------------------------------------------------------------


async def _serve_stdio(
    router: Router,
    stdin: IO[bytes],
    stdout: IO[bytes],
    signals: Signals,
    backlog: int,
    early: EarlyAnswer | None = None,
) -> int:
    if early is not None and early.answer is not None:
        # A first `providers_list` answered before the router was built
        # (faces/codeswarm/handshake.py): it changes nothing, so it is not read again.
        early = EarlyAnswer(early.read.split(b"\n", 1)[1])
    transport = await StdioTransport.open(
        stdin, stdout, max_message_bytes=MAX_LINE_BYTES, early=early
    )
    stop = anyio.Event()  # a signal, or stdout is gone
    outbox = PeerWriter(
        transport.send_batch,
        name="stdio",
        max_bytes=backlog,
        on_stall=stop.set,
        try_send=transport.try_send,
    )
    router.outboxes.add(outbox)
    written = anyio.Event()

    async def write() -> None:
        try:
            await outbox.run()
        finally:
            if outbox.gone:
                stop.set()  # stdout closed
            router.outboxes.discard(outbox)
            written.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(_first_signal, signals, stop)
        tg.start_soon(write)
        with anyio.CancelScope() as work:
            tg.start_soon(_cancel_when, stop, work)
            await _read_stdio(router, transport)
            await router.drain()  # stdin closed: the accepted injections still run
        if stop.is_set():
            await router.shutdown()
        outbox.close()
        with anyio.move_on_after(FLUSH_TIMEOUT):
            await written.wait()
        tg.cancel_scope.cancel()
    await transport.close(outbox.close_code)
    return 1 if outbox.dropped is not None else 0


async def _read_stdio(router: Router, transport: StdioTransport) -> None:
    while True:
        try:
            line = await transport.receive()
        except TransportClosed:
            return
        except FrameRejected as exc:  # too long, or not UTF-8
            router.reject(None, exc.detail)
            continue
        await router.handle_line(line)


# --- TCP ------------------------------------------------------------------------------------


async def _serve_tcp(
    router: Router,
    listener: Listener[SocketStream],
    address: ListenAddress,
    signals: Signals,
    backlog: int,
) -> int:
    port = listener.extra(SocketAttribute.local_port)
    stop = anyio.Event()
    clients: set[anyio.Event] = set()  # one per connected client, set when it is done

    async def client(stream: SocketStream) -> None:
        done = anyio.Event()
        clients.add(done)
        try:
            await _client(router, stream, backlog)
        finally:
            clients.discard(done)
            done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(_first_signal, signals, stop)
        async with anyio.create_task_group() as connections:
            with anyio.CancelScope() as accepting:
                tg.start_soon(_cancel_when, stop, accepting)
                sys.stderr.write(f"appserver: listening on {address.url(port)}\n")
                sys.stderr.flush()
                await listener.serve(client, task_group=connections)
            await router.shutdown()
            for outbox in list(router.outboxes):
                outbox.close()  # each writer ends once its last events are out
            with anyio.move_on_after(FLUSH_TIMEOUT):
                while clients:
                    await next(iter(clients)).wait()
            connections.cancel_scope.cancel()
        tg.cancel_scope.cancel()
    return 0


def _peer(stream: SocketStream) -> str:
    try:
        remote = stream.extra(SocketAttribute.remote_address)
    except Exception:
        return "tcp client"
    return f"{remote[0]}:{remote[1]}" if isinstance(remote, tuple) else str(remote)


async def _client(router: Router, stream: SocketStream, backlog: int) -> None:
    """One TCP client: its commands in, every event out, until either side ends.

    At the end of the client's input (half-close or close) the replies to every
    command read are sent (a ``swarm_terminate`` under way is waited for), then the
    connection is closed; a client that is gone is noticed when a write fails.
    """
    name = _peer(stream)
    log.info("client %s connected", name)

    async def send_batch(frames: list[str]) -> None:
        await stream.send(("\n".join(frames) + "\n").encode("utf-8"))

    async with stream, anyio.create_task_group() as tg:
        outbox = PeerWriter(
            send_batch, name=name, max_bytes=backlog, on_stall=tg.cancel_scope.cancel
        )
        router.outboxes.add(outbox)

        async def read() -> None:
            await _read_tcp(router, stream, outbox)
            # End of the client's commands (a half-close, as the Codeswarm CLI does
            # after its last command, or a full close): once what it asked for is
            # answered (its injections run, its terminations done) and those events
            # are out, close, so a client waiting for EOF ends.
            await router.settled(outbox)
            outbox.close()  # the writer ends once the queued events are out

        try:
            tg.start_soon(read)
            await outbox.run()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            log.info("client %s gone: %s", name, exc)
        finally:
            router.outboxes.discard(outbox)
            outbox.close()
            tg.cancel_scope.cancel()
    log.info("client %s disconnected", name)


async def _read_tcp(router: Router, stream: SocketStream, owner: object) -> None:
    lines = LineReader(MAX_LINE_BYTES)
    while True:
        try:
            chunk = await stream.receive(_READ_CHUNK)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            break
        lines.feed(chunk)
        while True:
            try:
                line = lines.next_line()
            except FrameTooLarge as exc:
                router.reject(None, exc.detail)
                continue
            if line is None:
                break
            await _line(router, line, owner)
    try:
        rest = lines.rest()  # a last line without newline
    except FrameTooLarge as exc:
        router.reject(None, exc.detail)
        return
    if rest is not None:
        await _line(router, rest, owner)
