"""A stdio door's first answer, written before the door is built.

Every stdio door (``appserver app-server`` and the faces) is a process per
client whose first exchange is a handshake (``initialize``) that an editor or
SDK waits for at each launch. Its answer depends on nothing the heavy modules
(pydantic, the wire models, the runtime, the database) provide, so the door
reads the client's first line here, with the standard library only, and
writes the answer a small per-protocol module computes from static data; then
it imports and builds the rest while the client reads.

Nothing is lost or answered twice: the bytes read here are handed to the
door's :class:`~appserver.transport.stdio.StdioTransport`, which reads them
first, so the door still handles the first request in full (validation, the
state it sets); its answer to that request, the first frame it sends, is not
written again (and an error is logged if it differs from the early one). A
line the protocol module is not sure of (anything but a plain, valid
handshake) gets no early answer: the door answers it as before.
"""

from __future__ import annotations

import json
import logging
import os
import select
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from appserver.protocol.decoding import JsonRejected, loads_client

log = logging.getLogger("appserver.transport")

# How long the first line is waited for before the door is built anyway (a
# client that sends nothing at once still gets a server that completes itself).
FIRST_LINE_WAIT = 0.5
# A first line longer than this is no plain handshake: read no further.
FIRST_LINE_LIMIT = 64 * 1024
# Request ids echoed by an early answer: integers JSON and Python agree on.
_LARGEST_ID = 2**53


class EarlyAnswer(NamedTuple):
    """What a door read of stdin before its transport existed (``read``: the
    first line and anything after it), and the frame it answered with
    (``answer``, without its newline; ``None``: nothing was written)."""

    read: bytes
    answer: str | None = None


_LOOKS = 16  # a door answers its first request among its first frames


class Answered:
    """A door's transport's memory of an early answer: the door's own answer to
    that first request, the first frame it sends, is not sent again (and an error
    is logged if it is not the same bytes)."""

    def __init__(self, early: EarlyAnswer | None) -> None:
        self.answer = None if early is None else early.answer
        self._id = None if self.answer is None else json.loads(self.answer).get("id")
        self._looks = _LOOKS  # frames looked at for it, at most

    def drop(self, frames: list[str]) -> list[str]:
        """``frames`` less the door's answer, wherever it comes among its first
        few: a door may refuse a bad line sent right after the first request
        before it answers that request."""
        if self.answer is None:
            return frames
        for index, frame in enumerate(frames):
            self._looks -= 1
            if self._looks < 0:
                log.error("the door never gave the answer written early: %.200s", self.answer)
                self.answer = None
                return frames
            if frame == self.answer or self._answers_the_request(frame):
                if frame != self.answer:
                    log.error(
                        "the answer differs from the one written early: %.200s instead of %.200s",
                        frame,
                        self.answer,
                    )
                self.answer = None
                return frames[:index] + frames[index + 1 :]
        return frames

    def _answers_the_request(self, frame: str) -> bool:
        try:
            message = json.loads(frame)
        except ValueError:
            return False
        return (
            isinstance(message, dict)
            and "method" not in message
            and ("result" in message or "error" in message)
            and message.get("id") == self._id
            and type(message.get("id")) is type(self._id)
        )


def plain_id(value: Any) -> bool:
    """Whether an early answer may echo this request id: an integer or a short
    printable ASCII string, which every encoder writes the same way."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return -_LARGEST_ID < value < _LARGEST_ID
    return (
        isinstance(value, str)
        and len(value) <= 256
        and value.isascii()
        and value.isprintable()
        and '"' not in value
        and "\\" not in value
    )


def compact(value: Any) -> str:
    """``value`` as the doors encode JSON: compact, UTF-8 (not ASCII-escaped)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def load_object(line: bytes, *, strict_numbers: bool = False) -> dict[str, Any] | None:
    """The JSON object on ``line``, decoded as the doors decode a client's line
    (the bounded decoder), or ``None``."""
    try:
        message = loads_client(line.decode("utf-8"), strict_numbers=strict_numbers)
    except (UnicodeDecodeError, JsonRejected):
        return None
    return message if isinstance(message, dict) else None


def initialize_response(
    line: bytes,
    plain_params: Callable[[Any], bool],
    result: Callable[[], Any],
    *,
    strict_numbers: bool = False,
) -> str | None:
    """The JSON-RPC 2.0 response to ``line`` if it is an ``initialize`` request
    with a plain id and params ``plain_params`` accepts (``result()``: its
    result), else ``None``: the door answers it."""
    message = load_object(line, strict_numbers=strict_numbers)
    if message is None or message.get("jsonrpc") != "2.0":
        return None
    request_id = message.get("id")
    if message.get("method") != "initialize" or not plain_id(request_id):
        return None
    if not plain_params(message.get("params")):
        return None
    return f'{{"jsonrpc":"2.0","id":{compact(request_id)},"result":{compact(result())}}}'


def one_line(frame: str) -> bool:
    """Whether ``frame`` needs none of the escapes the doors' encoders add (they
    escape U+2028/2029 and lone surrogates): then it is written as they would."""
    if "\u2028" in frame or "\u2029" in frame:
        return False
    try:
        frame.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def read_first_line(stdin: int, wait: float = FIRST_LINE_WAIT) -> tuple[bytes, bytes | None]:
    """Read ``stdin`` (a file descriptor) until its first line is complete,
    at most ``wait`` seconds and :data:`FIRST_LINE_LIMIT` bytes: (everything
    read, the first line without its line end or ``None`` when it did not
    come complete in time)."""
    read = b""
    deadline = time.monotonic() + wait
    while b"\n" not in read and len(read) <= FIRST_LINE_LIMIT:
        left = deadline - time.monotonic()
        if left <= 0:
            return read, None
        try:
            ready, _, _ = select.select([stdin], [], [], left)
            if not ready:
                continue
            chunk = os.read(stdin, FIRST_LINE_LIMIT)
        except (OSError, ValueError):
            return read, None
        if not chunk:  # end of input: no complete line will come
            return read, None
        read += chunk
    if b"\n" not in read:
        return read, None
    return read, read.split(b"\n", 1)[0].rstrip(b"\r")


def answer_first_line(
    answer: Callable[[bytes], str | None],
    may_answer: Callable[[], bool] = lambda: True,
    stdin: int = 0,
    stdout: int = 1,
) -> EarlyAnswer:
    """Read the client's first line from ``stdin`` and write ``answer(line)``
    to ``stdout``, when that is a frame and ``may_answer()`` (called last: a
    start-up check that must pass before anything is written, such as the
    workspace lock). Call it before the door's transport reads ``stdin``."""
    if os.isatty(stdin):
        return EarlyAnswer(b"")  # a person typing: the door says what it is first
    read, line = read_first_line(stdin)
    frame = answer(line) if line else None
    if frame is None or not one_line(frame) or not may_answer():
        return EarlyAnswer(read)
    data = (frame + "\n").encode("utf-8")
    try:
        while data:
            data = data[os.write(stdout, data) :]
    except OSError:
        pass  # the client is gone: the door finds out when it writes, as it would have
    return EarlyAnswer(read, frame)
