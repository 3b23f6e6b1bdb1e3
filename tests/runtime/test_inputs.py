"""``turn/start`` input parts: fileRef, localImage and image URLs become what
the model sees, failures become placeholders (reference §3.1)."""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from tests.support.servers import ServerUnderTest, running_server
from tests.support.turns import new_thread, one_item, run_turn


def tiny_png() -> bytes:
    """A valid 1x1 red PNG."""

    def chunk(tag: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(tag + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x00\x00")
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


@asynccontextmanager
async def http_server(
    body: bytes, content_type: str = "image/png"
) -> AsyncIterator[tuple[int, list[str]]]:
    """A one-route HTTP server on 127.0.0.1; yields its port and the request lines."""
    hits: list[str] = []
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)

    async def handle(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            data = b""
            try:
                while b"\r\n\r\n" not in data:
                    data += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return
            hits.append(data.split(b"\r\n", 1)[0].decode())
            head = (
                f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            await stream.send(head.encode() + body)

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        try:
            yield port, hits
        finally:
            tg.cancel_scope.cancel()


async def _user_message(client: Any, thread_id: str, parts: list[dict[str, Any]]) -> tuple:
    mark = client.mark()
    turn_id, terminal = await run_turn(client, thread_id, parts)
    assert terminal["method"] == "turn/completed"
    user = one_item(client, turn_id, "userMessage", mark)
    agent = one_item(client, turn_id, "agentMessage", mark)
    return user["payload"], agent["payload"]["text"]


async def test_file_ref_inlines_the_file(server: ServerUnderTest, workspace: Path) -> None:
    (workspace / "src").mkdir()
    (workspace / "src" / "a.txt").write_text("hello file\n")
    parts = [
        {"type": "text", "text": "look"},
        {"type": "fileRef", "path": "src/a.txt", "displayPath": "@src/a.txt"},
    ]
    with anyio.fail_after(15):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            payload, reply = await _user_message(client, thread_id, parts)
            assert payload["text"] == "look"
            assert payload["nativeInputParts"] == parts
            materialized = payload["materializedInputParts"]
            assert materialized[0] == {"type": "text", "text": "look"}
            assert materialized[1]["type"] == "text"
            assert materialized[1]["text"].startswith('<file path="@src/a.txt">')
            assert "hello file" in materialized[1]["text"]
            assert "hello file" in reply  # the model saw the content
            stored = await client.request(
                "thread/read", {"threadId": thread_id, "includeTurns": True}
            )
            stored_user = stored["thread"]["turns"][0]["items"][0]
            assert stored_user["payload"]["materializedInputParts"] == materialized


async def test_file_ref_outside_the_workspace_is_a_placeholder(
    server: ServerUnderTest, workspace: Path
) -> None:
    (workspace.parent / "secret.txt").write_text("top secret\n")
    parts = [
        {"type": "text", "text": "peek"},
        {"type": "fileRef", "path": "../secret.txt"},
        {"type": "fileRef", "path": str(workspace.parent / "secret.txt")},
        {"type": "fileRef", "path": "missing.txt"},
    ]
    with anyio.fail_after(15):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            payload, reply = await _user_message(client, thread_id, parts)
            texts = [p["text"] for p in payload["materializedInputParts"]]
            assert texts[1] == "[fileRef:../secret.txt: outside the workspace]"
            assert texts[2].startswith("[fileRef:") and "outside the workspace" in texts[2]
            assert texts[3].startswith("[fileRef:missing.txt:")
            assert "top secret" not in reply and not any("top secret" in t for t in texts)


async def test_local_image_is_attached(server: ServerUnderTest, workspace: Path) -> None:
    (workspace / "pic.png").write_bytes(tiny_png())
    parts = [
        {"type": "text", "text": "what is this"},
        {"type": "localImage", "path": "pic.png", "fileName": "pic.png"},
    ]
    with anyio.fail_after(15):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            payload, reply = await _user_message(client, thread_id, parts)
            assert len(payload["images"]) == 1
            image = payload["images"][0]
            assert Path(image["path"]).resolve() == (workspace / "pic.png").resolve()
            assert image["mimeType"] == "image/png"
            assert image["fileName"] == "pic.png"
            assert payload["materializedInputParts"][1]["type"] == "localImage"
            assert reply == "You said: what is this [1 image attached]"
            # Absolute paths work too, and a second turn still sees the history.
            parts[1] = {"type": "localImage", "path": str(workspace / "pic.png")}
            payload, _ = await _user_message(client, thread_id, parts)
            assert payload["images"][0]["mimeType"] == "image/png"


async def test_local_image_that_is_not_an_image_is_a_placeholder(
    server: ServerUnderTest, workspace: Path
) -> None:
    (workspace / "fake.png").write_text("not an image at all")
    parts = [
        {"type": "text", "text": "see"},
        {"type": "localImage", "path": "fake.png"},
        {"type": "localImage", "path": "nowhere.png"},
    ]
    with anyio.fail_after(15):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            payload, reply = await _user_message(client, thread_id, parts)
            assert "images" not in payload
            texts = [p["text"] for p in payload["materializedInputParts"]]
            assert texts[1:] == ["[localImage:fake.png]", "[localImage:nowhere.png]"]
            assert "image attached" not in reply
            assert "not an image at all" not in reply


async def test_local_image_outside_the_workspace_is_not_read(
    server: ServerUnderTest, workspace: Path
) -> None:
    """The fileRef rule: a path that resolves outside the workspace (absolute,
    ``..`` or a symlink inside pointing out) is a placeholder, never read."""
    outside = workspace.parent / "elsewhere.png"
    outside.write_bytes(tiny_png())
    (workspace / "link.png").symlink_to(outside)
    paths = [str(outside), "../elsewhere.png", "link.png", "nul\u0000.png"]
    parts = [{"type": "text", "text": "see"}] + [{"type": "localImage", "path": p} for p in paths]
    with anyio.fail_after(15):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            payload, reply = await _user_message(client, thread_id, parts)
            assert "images" not in payload
            texts = [p["text"] for p in payload["materializedInputParts"]]
            assert texts[1:] == [f"[localImage:{p}: outside the workspace]" for p in paths]
            assert "image attached" not in reply


async def test_private_image_urls_are_refused(server: ServerUnderTest, workspace: Path) -> None:
    with anyio.fail_after(30):
        async with http_server(tiny_png()) as (port, hits), server.connect() as client:
            urls = [
                f"http://127.0.0.1:{port}/pic.png",
                f"http://localhost:{port}/pic.png",
                f"http://[::1]:{port}/pic.png",
                "http://169.254.169.254/latest/meta-data",
                "http://10.0.0.1/pic.png",
                "file:///etc/passwd",
            ]
            parts = [{"type": "text", "text": "fetch"}] + [
                {"type": "image", "url": url} for url in urls
            ]
            thread_id = await new_thread(client)
            payload, reply = await _user_message(client, thread_id, parts)
            assert "images" not in payload
            texts = [p["text"] for p in payload["materializedInputParts"][1:]]
            assert texts == [f"[image:{url}]" for url in urls]
            assert hits == []  # not even a connection attempt reached the local server
            assert "image attached" not in reply
            assert not (workspace / ".craft" / "attachments").exists()


async def test_private_image_url_allowed_by_config_is_stored(workspace: Path) -> None:
    png = tiny_png()
    with anyio.fail_after(30):
        async with (
            http_server(png) as (port, hits),
            running_server("memory", workspace, allow_private_image_urls=True) as sut,
            sut.connect() as client,
        ):
            url = f"http://127.0.0.1:{port}/pic.png"
            thread_id = await new_thread(client)
            payload, reply = await _user_message(
                client,
                thread_id,
                [{"type": "text", "text": "fetched"}, {"type": "image", "url": url}],
            )
            assert hits == ["GET /pic.png HTTP/1.1"]
            image = payload["images"][0]
            stored = Path(image["path"])
            expected_dir = (workspace / ".craft" / "attachments" / "images").resolve()
            assert stored.parent.resolve() == expected_dir
            assert stored.name == hashlib.sha256(png).hexdigest() + ".png"
            assert stored.read_bytes() == png
            assert image["mimeType"] == "image/png" and image["sourceUrl"] == url
            assert payload["materializedInputParts"][1]["type"] == "localImage"
            assert reply == "You said: fetched [1 image attached]"


async def test_url_that_is_not_an_image_is_a_placeholder(workspace: Path) -> None:
    with anyio.fail_after(30):
        async with (
            http_server(b"<html>nope</html>", "text/html") as (port, hits),
            running_server("memory", workspace, allow_private_image_urls=True) as sut,
            sut.connect() as client,
        ):
            url = f"http://127.0.0.1:{port}/page.html"
            thread_id = await new_thread(client)
            payload, _ = await _user_message(
                client, thread_id, [{"type": "text", "text": "x"}, {"type": "image", "url": url}]
            )
            assert len(hits) == 1
            assert "images" not in payload
            assert payload["materializedInputParts"][1] == {
                "type": "text",
                "text": f"[image:{url}]",
            }
