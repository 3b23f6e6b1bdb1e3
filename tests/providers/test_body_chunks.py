"""``providers.http.body_chunks``: a streamed body's bytes, decoded only when encoded."""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator

import httpx2

from appserver.providers._common import server_sent_events
from appserver.providers.http import body_chunks

EVENTS = b'data: {"n": 1}\n\ndata: {"n": 2}\n\n'


class _Streamed(httpx2.AsyncByteStream):
    """The body in small pieces, as a model's stream comes over the network."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for start in range(0, len(self.body), 7):
            yield self.body[start : start + 7]


async def _events(headers: dict[str, str], body: bytes, streamed: bool = True) -> list[str]:
    def handler(request: httpx2.Request) -> httpx2.Response:
        if streamed:
            return httpx2.Response(200, headers=headers, stream=_Streamed(body))
        return httpx2.Response(200, headers=headers, content=body)

    transport = httpx2.MockTransport(handler)
    async with (
        httpx2.AsyncClient(transport=transport) as client,
        client.stream("POST", "http://model.test/v1/chat/completions") as response,
    ):
        return [data async for _name, data in server_sent_events(body_chunks(response))]


async def test_a_plain_event_stream_is_read_as_it_comes() -> None:
    assert await _events({"content-type": "text/event-stream"}, EVENTS) == ['{"n": 1}', '{"n": 2}']


async def test_a_compressed_event_stream_is_decoded() -> None:
    headers = {"content-type": "text/event-stream", "content-encoding": "gzip"}
    assert await _events(headers, gzip.compress(EVENTS)) == ['{"n": 1}', '{"n": 2}']


async def test_a_body_already_read_is_read_again() -> None:
    plain = {"content-type": "text/event-stream"}
    assert await _events(plain, EVENTS, streamed=False) == ['{"n": 1}', '{"n": 2}']
