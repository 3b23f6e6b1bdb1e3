"""One chat turn through ``codex-app-server-sdk`` (run with the Python that has it,
tests/support/codex_clients.py): ``stdio COMMAND...`` or ``ws URL TOKEN``.
Prints ``{"text", "threadId", "turnId"}`` as one JSON line."""

import asyncio
import json
import sys

from codex_app_server_sdk import CodexClient


async def chat(argv: list[str]) -> dict[str, str]:
    if argv[0] == "stdio":
        client = CodexClient.connect_stdio(command=argv[1:])
    else:
        client = CodexClient.connect_websocket(url=argv[1], token=argv[2])
    async with client:
        await client.initialize()
        thread = await client.start_thread()
        result = await thread.chat_once("hello over " + argv[0])
        return {"text": result.final_text, "threadId": result.thread_id, "turnId": result.turn_id}


if __name__ == "__main__":
    sys.stdout.write(json.dumps(asyncio.run(chat(sys.argv[1:]))) + "\n")
