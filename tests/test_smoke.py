from tests.conftest import IDENTITY
from tests.support.servers import ServerUnderTest


async def test_start_and_read(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        started = await client.request("thread/start", {"identity": IDENTITY})
        thread = started["thread"]
        read = await client.request("thread/read", {"threadId": thread["id"]})
        assert read["thread"]["id"] == thread["id"]
        note = await client.notification("thread/started")
        assert note["thread"]["id"] == thread["id"]
