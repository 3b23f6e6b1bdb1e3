"""Reading an HTTP/1.1 response body off a connection: chunked, sized or
close-delimited, gzip or deflate. A chunked body (every model stream) is
un-chunked one socket read at a time and handed up as one piece, however many
chunks (server-sent events) that read held: this runs for every streamed delta.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterator

READ_SIZE = 65536
# Longest chunk-size line and trailer section we accept.
MAX_CHUNK_LINE = 4096
MAX_TRAILERS = 65536
HEX_DIGITS = b"0123456789abcdefABCDEF"


class RemoteProtocolError(ConnectionError):
    """The server broke HTTP/1.1 or closed the connection mid-answer."""


def body_pieces(
    reader: asyncio.StreamReader, headers: dict[str, str], timeout: float
) -> AsyncIterator[bytes]:
    """The body's raw pieces: chunked, sized, or up to the connection's close."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return _chunked(reader, timeout)
    length = headers.get("content-length")
    if length is not None:
        return _sized(reader, _length(length), timeout)
    return _until_close(reader, timeout)


def _length(value: str) -> int:
    digits = value.strip()
    if not (digits.isascii() and digits.isdigit()):
        raise RemoteProtocolError(f"bad content-length: {value!r}")
    return int(value)


async def _read(reader: asyncio.StreamReader, timeout: float) -> bytes:
    async with asyncio.timeout(timeout):
        return await reader.read(READ_SIZE)


async def _sized(reader: asyncio.StreamReader, length: int, timeout: float) -> AsyncIterator[bytes]:
    while length > 0:
        async with asyncio.timeout(timeout):
            piece = await reader.read(min(length, READ_SIZE))
        if not piece:
            raise RemoteProtocolError("the server closed the connection mid-body")
        length -= len(piece)
        yield piece


async def _until_close(reader: asyncio.StreamReader, timeout: float) -> AsyncIterator[bytes]:
    while piece := await _read(reader, timeout):
        yield piece


async def _chunked(reader: asyncio.StreamReader, timeout: float) -> AsyncIterator[bytes]:
    """A chunked body, one joined piece per socket read (the hot path of a
    stream). A chunk longer than a read is handed up as it comes."""
    buffer = b""
    remaining = -1  # of the current chunk's data; -1: its size line is next, 0: its CRLF
    while True:
        data = await _read(reader, timeout)
        if not data:
            raise RemoteProtocolError("the server closed the connection mid-body")
        buffer = buffer + data if buffer else data
        pieces: list[bytes] = []
        position, size = 0, len(buffer)
        while True:
            if remaining < 0:
                line_end = buffer.find(b"\r\n", position)
                if line_end < 0:
                    if size - position > MAX_CHUNK_LINE:
                        raise RemoteProtocolError("a chunk-size line is too long")
                    break
                size_line = buffer[position:line_end]
                # Hex digits only (the usual line): no extension, sign, prefix or space.
                if size_line and len(size_line) <= 16 and not size_line.strip(HEX_DIGITS):
                    remaining = int(size_line, 16)
                else:
                    remaining = _chunk_size(size_line)
                position = line_end + 2
                if remaining == 0:
                    if pieces:
                        yield b"".join(pieces)
                    await _trailers(reader, buffer[position:], timeout)
                    return
            if remaining > 0:
                end = position + remaining
                if end + 2 <= size:  # the chunk's data and CRLF are all here (the usual case)
                    if buffer[end : end + 2] != b"\r\n":
                        raise RemoteProtocolError("a chunk does not end with CRLF")
                    pieces.append(buffer[position:end])
                    position, remaining = end + 2, -1
                    continue
                end = min(end, size)
                if end > position:
                    pieces.append(buffer[position:end])
                    remaining -= end - position
                    position = end
                if remaining:
                    break
            if size - position < 2:  # remaining == 0: the chunk's CRLF is next
                break
            if buffer[position : position + 2] != b"\r\n":
                raise RemoteProtocolError("a chunk does not end with CRLF")
            position, remaining = position + 2, -1
        buffer = buffer[position:]
        if pieces:
            yield pieces[0] if len(pieces) == 1 else b"".join(pieces)


def _chunk_size(line: bytes) -> int:
    """A size line with an extension (``5;name=value``) or spaces around the size."""
    digits = line.split(b";", 1)[0].strip(b" \t")
    if not digits or len(digits) > 16 or digits.strip(HEX_DIGITS):
        raise RemoteProtocolError(f"bad chunk-size line: {line[:40]!r}")
    return int(digits, 16)


async def _trailers(reader: asyncio.StreamReader, rest: bytes, timeout: float) -> None:
    """Read past the trailer section (ignored) to the body's final CRLF."""
    while not (rest.startswith(b"\r\n") or b"\r\n\r\n" in rest):
        if len(rest) > MAX_TRAILERS:
            raise RemoteProtocolError("the trailers are too long")
        data = await _read(reader, timeout)
        if not data:
            raise RemoteProtocolError("the server closed the connection mid-body")
        rest += data
    end = 2 if rest.startswith(b"\r\n") else rest.index(b"\r\n\r\n") + 4
    if rest[end:]:
        raise RemoteProtocolError("the server sent bytes after the body")


class _Deflate:
    """``deflate`` as servers send it: zlib-wrapped, or raw (as httpx accepts)."""

    def __init__(self) -> None:
        self._inner = zlib.decompressobj()
        self._first = True

    def decompress(self, data: bytes) -> bytes:
        if self._first:
            self._first = False
            try:
                return self._inner.decompress(data)
            except zlib.error:
                self._inner = zlib.decompressobj(-zlib.MAX_WBITS)
        return self._inner.decompress(data)

    def flush(self) -> bytes:
        return self._inner.flush()

    @property
    def eof(self) -> bool:
        """Whether the compressed stream reached its end."""
        return self._inner.eof


def decoder(encoding: str) -> zlib._Decompress | _Deflate | None:
    name = encoding.strip().lower()
    if name in ("", "identity"):
        return None
    if name in ("gzip", "x-gzip"):
        return zlib.decompressobj(zlib.MAX_WBITS | 16)
    if name == "deflate":
        return _Deflate()
    raise RemoteProtocolError(f"unsupported content-encoding: {encoding}")
