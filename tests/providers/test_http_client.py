"""The providers' HTTP/1.1 client (``providers/http_client.py``, ``http_body.py``)
against real sockets: a server here writes exactly the bytes each case needs."""

from __future__ import annotations

import asyncio
import gzip
import ssl
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
import trustme

from appserver.providers.http_body import RemoteProtocolError
from appserver.providers.http_client import HttpClient, HttpResponse, InvalidUrl

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


class Server:
    """A TCP server that runs ``handler`` per connection (numbered from 0) and
    keeps every request head it read."""

    def __init__(self, handler: Handler, tls: ssl.SSLContext | None = None) -> None:
        self.handler = handler
        self.tls = tls
        self.connections = 0
        self.heads: list[bytes] = []
        self.port = 0
        self._handlers: set[asyncio.Task[None]] = set()

    async def read_request(self, reader: asyncio.StreamReader) -> bytes:
        """One request's head and body (by its content-length)."""
        head = await reader.readuntil(b"\r\n\r\n")
        self.heads.append(head)
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                await reader.readexactly(int(line.split(b":")[1]))
        return head

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        number, self.connections = self.connections, self.connections + 1
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self.handler(reader, writer, number)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Server]:
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        self.port = server.sockets[0].getsockname()[1]
        async with server:
            yield self
            server.close()
            # Python 3.11's wait_closed does not wait for the connections' handlers.
            for handler in self._handlers:
                handler.cancel()
            await asyncio.gather(*self._handlers, return_exceptions=True)


def client(**options: object) -> HttpClient:
    settings: dict[str, object] = {
        "timeout": 5.0,
        "connect_timeout": 5.0,
        "tls": None,
        "follow_redirects": False,
    }
    settings.update(options)
    return HttpClient({"user-agent": "test"}, **settings)  # type: ignore[arg-type]


def chunked(*pieces: bytes, trailer: bytes = b"") -> bytes:
    body = b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces)
    return body + b"0\r\n" + trailer + b"\r\n"


HEAD = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"


async def pieces(response: HttpResponse) -> list[bytes]:
    return [piece async for piece in response.aiter_bytes()]


def answering(*answers: bytes, trickle: bool = False) -> Handler:
    """A handler that answers each request on a connection with the next answer
    (one byte at a time with ``trickle``)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> None:
        for answer in answers:
            await server_of[handle].read_request(reader)
            if trickle:
                for index in range(len(answer)):
                    writer.write(answer[index : index + 1])
                    await writer.drain()
                    await asyncio.sleep(0)
            else:
                writer.write(answer)
                await writer.drain()
        await reader.read()

    return handle


server_of: dict[Handler, Server] = {}


@asynccontextmanager
async def serving(handler: Handler, tls: ssl.SSLContext | None = None) -> AsyncIterator[Server]:
    server = Server(handler, tls)
    server_of[handler] = server
    async with server.running():
        yield server


async def test_a_chunked_body_sent_a_byte_at_a_time_is_whole() -> None:
    body = chunked(b"data: one\n\n", b"data: two\n\n", b"x" * 300)
    async with serving(answering(HEAD + body, trickle=True)) as server:
        api = client()
        response = await api.send("POST", f"http://127.0.0.1:{server.port}/v1/x", b"{}")
        assert response.status_code == 200
        assert b"".join(await pieces(response)) == b"data: one\n\ndata: two\n\n" + b"x" * 300
        await api.aclose()


async def test_the_chunks_of_one_read_come_up_as_one_piece() -> None:
    events = [b"data: %d\n\n" % n for n in range(200)]
    async with serving(answering(HEAD + chunked(*events))) as server:
        api = client()
        response = await api.send("POST", f"http://127.0.0.1:{server.port}/", b"{}")
        got = await pieces(response)
        assert b"".join(got) == b"".join(events)
        assert len(got) < 20  # not one a chunk
        await api.aclose()


async def test_extensions_and_trailers_are_read_past_and_the_connection_is_kept() -> None:
    first = HEAD + b"5;name=value\r\nhello\r\n0\r\nx-checksum: 1\r\n\r\n"
    second = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
    async with serving(answering(first, second)) as server:
        api = client()
        url = f"http://127.0.0.1:{server.port}/"
        assert b"".join(await pieces(await api.send("POST", url, b"{}"))) == b"hello"
        assert await (await api.send("GET", url, None)).aread() == b"ok"
        assert server.connections == 1
        await api.aclose()


async def test_a_close_delimited_body_is_read_to_the_end_and_not_reused() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\n\r\nall of it")
        await writer.drain()

    async with serving(handle) as server:
        api = client()
        url = f"http://127.0.0.1:{server.port}/"
        assert await (await api.send("GET", url, None)).aread() == b"all of it"
        assert await (await api.send("GET", url, None)).aread() == b"all of it"
        assert server.connections == 2
        await api.aclose()


async def test_a_pooled_connection_the_server_closed_is_replaced_unseen() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()
        # Then close it while the client holds it idle.

    async with serving(handle) as server:
        api = client()
        url = f"http://127.0.0.1:{server.port}/"
        assert await (await api.send("GET", url, None)).aread() == b"ok"
        assert await (await api.send("GET", url, None)).aread() == b"ok"
        assert server.connections == 2
        assert len(server.heads) == 2
        await api.aclose()


async def test_a_response_closed_mid_body_closes_its_connection() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await server.read_request(reader)
        writer.write(HEAD + (b"5\r\nhello\r\n" if n == 0 else chunked(b"again")))
        await writer.drain()
        await reader.read()

    async with serving(handle) as server:
        api = client()
        url = f"http://127.0.0.1:{server.port}/"
        response = await api.send("POST", url, b"{}")
        async for _piece in response.aiter_bytes():
            break
        await response.aclose()
        again = await api.send("POST", url, b"{}")
        assert b"".join(await pieces(again)) == b"again"
        assert server.connections == 2
        await api.aclose()


@pytest.mark.parametrize(
    ("answer", "complaint"),
    [
        (HEAD + b"zz\r\nhello\r\n0\r\n\r\n", "bad chunk-size"),
        (HEAD + b"-5\r\nhello\r\n0\r\n\r\n", "bad chunk-size"),
        (HEAD + b"5\r\nhelloXX0\r\n\r\n", "does not end with CRLF"),
        (HEAD + b"5\r\nhel", "closed the connection mid-body"),
        (HEAD + chunked(b"hello") + b"junk", "bytes after the body"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort", "mid-body"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: ten\r\n\r\nshort", "bad content-length"),
        ("HTTP/1.1 200 OK\r\ncontent-length: ¹\r\n\r\nshort".encode(), "bad content-length"),
        (HEAD + b"1_0\r\n" + b"x" * 16 + b"\r\n0\r\n\r\n", "bad chunk-size"),
        (b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\n\r\nnot gzip", "does not decompress"),
        (  # a gzip stream without its trailer, in a body that ends cleanly
            HEAD[:-2]
            + b"content-encoding: gzip\r\n\r\n"
            + chunked(gzip.compress(b"x" * 99, mtime=0)[:-8]),
            "compressed body that was cut short",
        ),
        (b"HTTP/1.1 200 OK\r\ncontent-encoding: br\r\n\r\nxx", "unsupported content-encoding"),
    ],
)
async def test_a_broken_body_is_a_protocol_error(answer: bytes, complaint: str) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> None:
        await server.read_request(reader)
        writer.write(answer)
        await writer.drain()

    async with serving(handle) as server:
        api = client()
        response = await api.send("GET", f"http://127.0.0.1:{server.port}/", None)
        with pytest.raises(RemoteProtocolError, match=complaint):
            await response.aread()
        await response.aclose()
        await api.aclose()


@pytest.mark.parametrize(
    "answer",
    [
        b"SSH-2.0-OpenSSH\r\n\r\n",
        b"HTTP/1.1 2000 Big\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
    ],
)
async def test_a_broken_head_is_a_protocol_error(answer: bytes) -> None:
    async with serving(answering(answer)) as server:
        api = client()
        with pytest.raises(RemoteProtocolError):
            await api.send("GET", f"http://127.0.0.1:{server.port}/", None)
        await api.aclose()


async def test_compressed_bodies_are_decoded() -> None:
    text = b"data: compressed\n\n" * 50
    raw_deflate = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    answers = [
        HEAD[:-2] + b"content-encoding: gzip\r\n\r\n" + chunked(gzip.compress(text)),
        HEAD[:-2] + b"content-encoding: deflate\r\n\r\n" + chunked(zlib.compress(text)),
        HEAD[:-2]
        + b"content-encoding: deflate\r\n\r\n"
        + chunked(raw_deflate.compress(text) + raw_deflate.flush()),
    ]
    async with serving(answering(*answers)) as server:
        api = client()
        for _answer in answers:
            response = await api.send("POST", f"http://127.0.0.1:{server.port}/", b"{}")
            assert await response.aread() == text
        await api.aclose()


async def test_informational_answers_are_skipped_and_http_1_0_is_not_kept() -> None:
    answer = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok"
    async with serving(answering(answer, answer)) as server:
        api = client()
        url = f"http://127.0.0.1:{server.port}/"
        response = await api.send("POST", url, b"{}")
        assert (response.status_code, await response.aread()) == (200, b"ok")
        assert (await (await api.send("POST", url, b"{}")).aread()) == b"ok"
        assert server.connections == 2
        await api.aclose()


async def test_the_request_is_what_the_api_expects() -> None:
    async with serving(answering(b"HTTP/1.1 204 No Content\r\n\r\n")) as server:
        api = HttpClient(
            {"authorization": "Bearer k"},
            timeout=5,
            connect_timeout=5,
            tls=None,
            follow_redirects=False,
        )
        response = await api.send("POST", f"http://127.0.0.1:{server.port}/v1/x?a=1", b'{"q":1}')
        assert await response.aread() == b""
        head = server.heads[0].decode()
        assert head.startswith("POST /v1/x?a=1 HTTP/1.1\r\n")
        assert f"host: 127.0.0.1:{server.port}\r\n" in head
        assert "authorization: Bearer k\r\n" in head and "content-length: 7\r\n" in head
        assert "accept-encoding: gzip, deflate\r\n" in head
        await api.aclose()


def test_a_header_with_a_line_break_is_refused() -> None:
    with pytest.raises(InvalidUrl):
        HttpClient(
            {"authorization": "Bearer k\r\nx-evil: 1"},
            timeout=1,
            connect_timeout=1,
            tls=None,
            follow_redirects=False,
        )


async def test_a_silent_server_is_a_timeout() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> None:
        await reader.read()

    async with serving(handle) as server:
        api = client(timeout=0.2)
        with pytest.raises(TimeoutError):
            await api.send("GET", f"http://127.0.0.1:{server.port}/", None)
        await api.aclose()


async def test_a_plain_http_proxy_gets_the_absolute_url_and_its_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with serving(answering(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")) as proxy:
        monkeypatch.setenv("HTTP_PROXY", f"http://me:s%40cret@127.0.0.1:{proxy.port}")
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        api = client()
        response = await api.send("GET", "http://model.test:8080/v1/models", None)
        assert await response.aread() == b"ok"
        head = proxy.heads[0].decode()
        assert head.startswith("GET http://model.test:8080/v1/models HTTP/1.1\r\n")
        assert "proxy-authorization: Basic bWU6c0BjcmV0\r\n" in head  # me:s@cret
        await api.aclose()


def test_no_proxy_matches_an_ipv6_host_and_a_port(monkeypatch: pytest.MonkeyPatch) -> None:
    from urllib.parse import urlsplit

    from appserver.providers.http_client import Route

    monkeypatch.setenv("HTTP_PROXY", "http://proxy.test:3128")
    monkeypatch.setenv("NO_PROXY", "::1,model.test:8443")
    assert Route.of(urlsplit("http://[::1]:11434/v1")).proxy is None
    assert Route.of(urlsplit("http://model.test:8443/v1")).proxy is None
    assert Route.of(urlsplit("http://model.test:8080/v1")).proxy == ("proxy.test", 3128, None)


async def test_no_proxy_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    async with serving(answering(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")) as server:
        monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:1")
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        api = client()
        assert await (await api.send("GET", f"http://127.0.0.1:{server.port}/", None)).aread()
        await api.aclose()


@pytest.fixture(scope="module")
def authority() -> trustme.CA:
    return trustme.CA()


def server_tls(authority: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("localhost", "127.0.0.1").configure_cert(context)
    return context


def client_tls(authority: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    authority.configure_trust(context)
    return context


async def test_https_through_a_connect_tunnel(
    authority: trustme.CA, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with serving(
        answering(b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nsecret"), server_tls(authority)
    ) as origin:

        async def tunnel(
            reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int
        ) -> None:
            head = await proxy.read_request(reader)
            assert head.startswith(f"CONNECT localhost:{origin.port} HTTP/1.1\r\n".encode())
            upstream_reader, upstream_writer = await asyncio.open_connection(
                "127.0.0.1", origin.port
            )
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")

            async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
                sink.close()

            try:
                await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))
            finally:
                upstream_writer.close()

        async with serving(tunnel) as proxy:
            monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{proxy.port}")
            monkeypatch.delenv("NO_PROXY", raising=False)
            monkeypatch.delenv("no_proxy", raising=False)
            api = client(tls=client_tls(authority))
            response = await api.send("GET", f"https://localhost:{origin.port}/v1/models", None)
            assert await response.aread() == b"secret"
            assert origin.heads[0].startswith(b"GET /v1/models HTTP/1.1\r\n")
            await api.aclose()


async def test_a_proxy_that_refuses_the_tunnel(
    authority: trustme.CA, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with serving(answering(b"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n")) as proxy:
        monkeypatch.setenv("HTTPS_PROXY", f"127.0.0.1:{proxy.port}")
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        api = client(tls=client_tls(authority))
        with pytest.raises(RemoteProtocolError, match="407"):
            await api.send("GET", "https://model.test/v1/models", None)
        await api.aclose()


async def test_https_redirects_are_followed_without_the_key_to_another_host(
    authority: trustme.CA,
) -> None:
    async with serving(
        answering(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nhere"), server_tls(authority)
    ) as target:
        moved = (
            f"HTTP/1.1 307 Temporary Redirect\r\nlocation: https://127.0.0.1:{target.port}/v2\r\n"
            "content-length: 0\r\n\r\n"
        ).encode()
        async with serving(answering(moved), server_tls(authority)) as first:
            api = HttpClient(
                {"authorization": "Bearer k"},
                timeout=5,
                connect_timeout=5,
                tls=client_tls(authority),
                follow_redirects=True,
            )
            response = await api.send("POST", f"https://localhost:{first.port}/v1", b"{}")
            assert (response.status_code, await response.aread()) == (200, b"here")
            assert b"authorization" in first.heads[0]
            assert target.heads[0].startswith(b"POST /v2 HTTP/1.1\r\n")
            assert b"authorization" not in target.heads[0]
            await api.aclose()


async def test_a_redirect_to_plain_http_is_not_followed(authority: trustme.CA) -> None:
    moved = b"HTTP/1.1 302 Found\r\nlocation: http://127.0.0.1:1/\r\ncontent-length: 0\r\n\r\n"
    async with serving(answering(moved), server_tls(authority)) as server:
        api = client(tls=client_tls(authority), follow_redirects=True)
        response = await api.send("GET", f"https://localhost:{server.port}/", None)
        assert response.status_code == 302
        await api.aclose()


async def test_a_body_already_read_is_streamed_again() -> None:
    async with serving(answering(HEAD + chunked(b"data: 1\n\n"))) as server:
        api = client()
        response = await api.send("POST", f"http://127.0.0.1:{server.port}/", b"{}")
        assert await response.aread() == b"data: 1\n\n"
        assert await pieces(response) == [b"data: 1\n\n"]
        await api.aclose()


async def test_bytes_that_came_while_idle_keep_the_connection_from_being_reused() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 7\r\n\r\nanswer%d" % n)
        await writer.drain()
        if n == 0:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nSTALE")
            await writer.drain()
        await reader.read()

    async with serving(handle) as server:
        api = client()
        url = f"http://127.0.0.1:{server.port}/"
        assert await (await api.send("GET", url, None)).aread() == b"answer0"
        while server.connections < 1:
            await asyncio.sleep(0)
        # The stray answer reaches the idle connection's buffer before the next request.
        idle = api._idle[0]
        while not getattr(idle.reader, "_buffer", None):
            await asyncio.sleep(0.01)
        assert await (await api.send("GET", url, None)).aread() == b"answer1"
        await api.aclose()


@pytest.mark.parametrize(
    ("answer", "method", "sent"),
    [
        (b"", "GET", 2),  # idempotent: once more, on a new connection
        (b"", "POST", 1),  # a model call: the provider's retries decide
        (b"garbage\r\n\r\n", "GET", 1),
        (b"HTTP/1.1 100 Continue\r\n\r\n", "GET", 1),  # answered, then closed
    ],
)
async def test_a_kept_connection_closed_unanswered_is_tried_once_more_only(
    answer: bytes, method: str, sent: int
) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await server.read_request(reader)
        if n < 3:  # the first three: an answer, then keep the connection open
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            await writer.drain()
            await server.read_request(reader)
        # Then (and on every later connection) the request is read and left
        # unanswered (closed, or answered with garbage).
        writer.write(answer)
        await writer.drain()

    async with serving(handle) as server:
        api = client()
        url = f"http://127.0.0.1:{server.port}/"
        first = await asyncio.gather(*(api.send(method, url, None) for _ in range(3)))
        for response in first:
            await response.aread()
        assert len(api._idle) == 3
        before = len(server.heads)
        with pytest.raises(RemoteProtocolError):
            await api.send(method, url, None)
        assert len(server.heads) - before == sent
        await api.aclose()


async def test_a_path_and_host_are_sent_encoded() -> None:
    async with serving(answering(b"HTTP/1.1 204 No Content\r\n\r\n")) as server:
        api = client()
        url = f"http://127.0.0.1:{server.port}/my models/模型?q=a b"
        await (await api.send("POST", url, b"{}")).aread()
        request_line = server.heads[0].split(b"\r\n")[0]
        assert request_line == b"POST /my%20models/%E6%A8%A1%E5%9E%8B?q=a%20b HTTP/1.1"
        await api.aclose()


async def test_an_openai_stream_keeps_its_connection_for_the_next_turn() -> None:
    from appserver.providers.base import Message, ModelRequest, Stop, TextDelta
    from appserver.providers.openai_compat import OpenAIProvider

    chunk = b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
    stream = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n" + HEAD[17:]
    answer = stream + chunked(chunk, b"data: [DONE]\n\n")
    async with serving(answering(answer, answer, answer)) as server:
        provider = OpenAIProvider(api_key="k", base_url=f"http://127.0.0.1:{server.port}/v1")
        for _turn in range(3):
            request = ModelRequest(model="fake-model", messages=[Message("user", "hello")])
            events = [event async for event in provider.stream(request)]
            assert events[0] == TextDelta("hi") and isinstance(events[-1], Stop)
        assert server.connections == 1
        await provider.aclose()
