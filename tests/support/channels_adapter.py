"""A minimal external channel adapter, as a platform bridge (Telegram, ...) would be.

It connects to the AppServer over WebSocket, declares
``capabilities.channelAdapter``, maps a platform user/chat to a thread
(``thread/list`` then ``thread/start`` with ``identity.channelName`` = its
channel), starts a turn on behalf of the sender and answers the server's
``ext/channel/send`` requests, which it records as "posted to the platform".
It can register ``channelTools`` and answers ``ext/channel/toolCall`` with
``tool_answer(params)`` (``None``: never answers).

Usable in-process (:class:`ChannelAdapter`) or as a real separate process::

    python -m tests.support.channels_adapter URL CHANNEL USER_ID CHAT_ID TEXT

which handles one message, waits for the reply delivery and prints it as one
JSON line on stdout.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
from websockets.asyncio.client import connect

from tests.support.client import RpcClient
from tests.support.servers import WsStream


@dataclass
class Delivery:
    """One ``ext/channel/send`` the adapter received."""

    target: str
    message: dict[str, Any]
    metadata: dict[str, Any]


class ChannelAdapter:
    """The adapter logic over an :class:`RpcClient` (any transport)."""

    def __init__(
        self,
        client: RpcClient,
        channel: str,
        *,
        structured_delivery: bool = True,
        answer: dict[str, Any] | None = None,
        tools: list[dict[str, Any]] | None = None,
        tool_answer: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        self.client = client
        self.channel = channel
        self.structured_delivery = structured_delivery
        # What ext/channel/send is answered with (a platform failure, for instance).
        self.answer = answer or {"delivered": True, "remoteMessageId": "m-1"}
        self.deliveries: list[Delivery] = []
        self._delivered = anyio.Event()
        self.threads: dict[tuple[str, str], str] = {}  # (user, chat) -> thread id
        self.tools = tools
        self.tool_answer = tool_answer
        self.tool_calls: list[dict[str, Any]] = []
        self._called = anyio.Event()
        client.on_server_request = self._on_request

    def capabilities(self) -> dict[str, Any]:
        delivery: dict[str, Any] = {}
        if self.structured_delivery:
            delivery["structuredDelivery"] = True
        adapter: dict[str, Any] = {"channelName": self.channel, "deliveryCapabilities": delivery}
        if self.tools is not None:
            adapter["channelTools"] = self.tools
        return {"approvalSupport": True, "streamingSupport": False, "channelAdapter": adapter}

    async def initialize(self) -> dict[str, Any]:
        result: dict[str, Any] = await self.client.initialize(self.capabilities())
        return result

    def _on_request(self, method: str, params: Any) -> Any:
        if method == "ext/channel/send":
            self.deliveries.append(
                Delivery(params["target"], params["message"], params.get("metadata") or {})
            )
            self._delivered.set()
            return self.answer
        if method == "ext/channel/toolCall":
            self.tool_calls.append(params)
            self._called.set()
            self._called = anyio.Event()
            return self.tool_answer(params) if self.tool_answer is not None else None
        if method == "item/approval/request":
            return {"decision": "decline"}
        return None

    def identity(self, user_id: str, chat_id: str) -> dict[str, Any]:
        return {"channelName": self.channel, "userId": user_id, "channelContext": f"chat:{chat_id}"}

    async def thread_for(self, user_id: str, chat_id: str) -> str:
        """The user's thread in this chat: found with thread/list, else created."""
        key = (user_id, chat_id)
        if key not in self.threads:
            identity = self.identity(user_id, chat_id)
            found = await self.client.request("thread/list", {"identity": identity})
            if found["data"]:
                self.threads[key] = found["data"][0]["id"]
            else:
                started = await self.client.request("thread/start", {"identity": identity})
                self.threads[key] = started["thread"]["id"]
        return self.threads[key]

    async def handle_message(
        self, user_id: str, user_name: str, chat_id: str, text: str
    ) -> dict[str, Any]:
        """A platform message arrived: run it as a turn; returns the turn/start turn."""
        thread_id = await self.thread_for(user_id, chat_id)
        sender = {"senderId": user_id, "senderName": user_name, "groupId": chat_id}
        result = await self.client.request(
            "turn/start",
            {"threadId": thread_id, "input": [{"type": "text", "text": text}], "sender": sender},
        )
        turn: dict[str, Any] = result["turn"]
        return turn

    async def wait_tool_call(self, count: int = 1, timeout: float = 10) -> dict[str, Any]:
        """Wait until ``count`` ``ext/channel/toolCall`` requests arrived; the ``count``-th."""
        with anyio.fail_after(timeout):
            while len(self.tool_calls) < count:
                called = self._called
                await called.wait()
        return self.tool_calls[count - 1]

    async def next_delivery(self, count: int = 1, timeout: float = 10) -> Delivery:
        """Wait until ``count`` deliveries arrived; returns the ``count``-th."""
        with anyio.fail_after(timeout):
            while len(self.deliveries) < count:
                self._delivered = anyio.Event()
                await self._delivered.wait()
        return self.deliveries[count - 1]


@asynccontextmanager
async def websocket_adapter(
    url: str, channel: str, **options: Any
) -> AsyncIterator[ChannelAdapter]:
    """A :class:`ChannelAdapter` over a real WebSocket (not yet initialized)."""
    async with connect(url, max_size=None) as ws, anyio.create_task_group() as tg:
        client = RpcClient(WsStream(ws), f"{channel}-adapter")
        await client.run(tg)
        try:
            yield ChannelAdapter(client, channel, **options)
        finally:
            tg.cancel_scope.cancel()


async def _main(url: str, channel: str, user_id: str, chat_id: str, text: str) -> int:
    async with websocket_adapter(url, channel) as adapter:
        await adapter.initialize()
        await adapter.handle_message(user_id, user_id.title(), chat_id, text)
        delivery = await adapter.next_delivery()
        sys.stdout.write(json.dumps(delivery.__dict__) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    url, channel, user_id, chat_id, text = sys.argv[1:6]
    sys.exit(anyio.run(_main, url, channel, user_id, chat_id, text))
