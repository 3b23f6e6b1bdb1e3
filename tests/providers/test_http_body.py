"""``providers/http_body.py``: any chunking of a body, split across reads
anywhere, reads back as the same bytes."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appserver.providers.http_body import RemoteProtocolError, body_pieces

CHUNKED = {"transfer-encoding": "chunked"}


async def _read_all(wire: bytes, cuts: list[int]) -> list[bytes]:
    """Feed ``wire`` to a reader in pieces cut at ``cuts``, one loop turn apart."""
    reader = asyncio.StreamReader()
    pieces = body_pieces(reader, CHUNKED, timeout=5)

    async def feed() -> None:
        start = 0
        for cut in [*sorted(set(cuts)), len(wire)]:
            if start < cut <= len(wire):
                reader.feed_data(wire[start:cut])
                start = cut
                await asyncio.sleep(0)
        reader.feed_eof()

    feeder = asyncio.ensure_future(feed())
    got = [piece async for piece in pieces]
    await feeder
    return got


def _wire(chunks: list[bytes], extension: bool, trailer: bool) -> bytes:
    ext = b";name=value" if extension else b""
    body = b"".join(b"%x%s\r\n%s\r\n" % (len(chunk), ext, chunk) for chunk in chunks if chunk)
    return body + b"0" + ext + b"\r\n" + (b"x-trailer: 1\r\n" if trailer else b"") + b"\r\n"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    chunks=st.lists(st.binary(min_size=1, max_size=40), max_size=12),
    cuts=st.lists(st.integers(min_value=1, max_value=700), max_size=12),
    extension=st.booleans(),
    trailer=st.booleans(),
)
def test_any_chunking_split_anywhere_reads_back_whole(
    chunks: list[bytes], cuts: list[int], extension: bool, trailer: bool
) -> None:
    wire = _wire(chunks, extension, trailer)
    got = asyncio.run(_read_all(wire, cuts))
    assert b"".join(got) == b"".join(chunks)
    assert all(got)  # no empty pieces


async def test_a_chunk_longer_than_a_read_is_handed_up_as_it_comes() -> None:
    reader = asyncio.StreamReader()
    pieces = body_pieces(reader, CHUNKED, timeout=5)
    reader.feed_data(b"%x\r\n" % 100_000 + b"a" * 30_000)
    first = await pieces.__anext__()
    assert first == b"a" * 30_000  # before the rest of the chunk exists
    reader.feed_data(b"b" * 70_000 + b"\r\n0\r\n\r\n")
    rest = b"".join([piece async for piece in pieces])
    assert rest == b"b" * 70_000


@pytest.mark.parametrize(
    "wire",
    [b"5\r\nhello\r\n0\r\n\r\nextra", b"5\r\nhelloXY", b"g\r\n", b"5 5\r\nhello\r\n", b"1" * 5000],
)
async def test_broken_framing_is_refused(wire: bytes) -> None:
    reader = asyncio.StreamReader()
    pieces = body_pieces(reader, CHUNKED, timeout=5)
    reader.feed_data(wire)
    reader.feed_eof()
    with pytest.raises(RemoteProtocolError):
        async for _piece in pieces:
            pass
