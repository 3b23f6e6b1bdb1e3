"""The stdio transport's writes: what ``try_send`` takes, and closing with
frames still on their way to a slow reader."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

import anyio
import pytest

from appserver.transport.base import TransportClosed
from appserver.transport.stdio import StdioTransport


@contextmanager
def pipes() -> Iterator[tuple[IO[bytes], IO[bytes], IO[bytes], int]]:
    """(our stdin, our stdout, the reader's end of our stdout, the writer's end
    of our stdin)."""
    in_read, in_write = os.pipe()
    out_read, out_write = os.pipe()
    stdin, stdout = os.fdopen(in_read, "rb"), os.fdopen(out_write, "wb")
    reader = os.fdopen(out_read, "rb")
    try:
        yield stdin, stdout, reader, in_write
    finally:
        for stream in (stdin, stdout, reader):
            if not stream.closed:
                stream.close()


async def end_input(transport: StdioTransport, in_write: int) -> None:
    """Close our stdin's other end and read to its end (the read side closes)."""
    os.close(in_write)
    with pytest.raises(TransportClosed):
        await transport.receive()


async def test_try_send_takes_no_more_than_the_pipe_holds() -> None:
    """A burst in one loop iteration (a replayed history) stops being taken at
    the pipe's high-water mark: the rest goes to the caller's bounded queue."""
    with pipes() as (stdin, stdout, _reader, in_write):
        transport = await StdioTransport.open(stdin, stdout)
        frame = "x" * 10_000
        taken = [transport.try_send(frame) for _ in range(100)]
        assert taken[0]
        assert taken.count(True) <= 7 and not any(taken[taken.index(False) :])
        with anyio.fail_after(10):  # a dropped client: no waiting for it (30 s)
            await transport.close(1008)
        await end_input(transport, in_write)


async def test_closing_waits_for_a_slow_reader_to_take_the_last_frames() -> None:
    """A process that closes and exits right after its last answer must not lose
    its end (a one-shot's 300 KB answer, read by a client that reads late)."""
    with pipes() as (stdin, stdout, reader, in_write):
        transport = await StdioTransport.open(stdin, stdout)
        frames = [f"{index:06d}" + "y" * 50_000 for index in range(6)]
        for frame in frames[:1]:
            assert transport.try_send(frame)
        await transport.send_batch(frames[1:2])  # past the pipe's buffer: waits for...
        received: list[bytes] = []
        started = threading.Event()

        def read_late() -> None:
            started.wait()
            time.sleep(0.5)  # the scenario: a client that reads late (not a sync)
            received.append(reader.read())

        thread = threading.Thread(target=read_late)
        with anyio.fail_after(30):
            started.set()
            thread.start()
            await transport.send_batch(frames[2:])
            await transport.close()
            await anyio.to_thread.run_sync(thread.join)
        lines = received[0].decode().splitlines()
        assert lines == frames
        await end_input(transport, in_write)
