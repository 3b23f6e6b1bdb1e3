"""Helpers for the turn-engine end-to-end tests (turns, approvals, replay, ...)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import anyio

from tests.support.client import RpcClient
from tests.support.helpers import start_thread

TERMINAL = ("turn/completed", "turn/failed", "turn/cancelled")
DELTA_METHODS = (
    "item/agentMessage/delta",
    "item/reasoning/delta",
    "item/toolCall/argumentsDelta",
    "item/commandExecution/outputDelta",
)


def text_input(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}]


def streamed_text(count: int) -> str:
    """The full text of ``?stream count``."""
    return "".join(f"chunk {i} " for i in range(1, count + 1))


def turn_of(params: dict[str, Any]) -> str | None:
    """The turn id a notification is about (``None`` for thread-level ones)."""
    if "turnId" in params:
        return str(params["turnId"])
    turn = params.get("turn")
    if isinstance(turn, dict):
        return str(turn.get("id"))
    return None


def thread_of(params: dict[str, Any]) -> str | None:
    if "threadId" in params:
        return str(params["threadId"])
    for key in ("turn", "thread"):
        value = params.get(key)
        if isinstance(value, dict):
            found = value.get("threadId") if key == "turn" else value.get("id")
            if found is not None:
                return str(found)
    return None


def is_notification(message: dict[str, Any]) -> bool:
    return "method" in message and "id" not in message


def turn_events(
    client: RpcClient, turn_id: str, start: int = 0, thread_id: str | None = None
) -> list[dict[str, Any]]:
    """Notifications about ``turn_id`` (optionally of ``thread_id``) from ``start``."""
    return [
        message
        for message in client.messages[start:]
        if is_notification(message)
        and turn_of(message["params"]) == turn_id
        and (thread_id is None or thread_of(message["params"]) == thread_id)
    ]


def thread_events(client: RpcClient, thread_id: str, start: int = 0) -> list[dict[str, Any]]:
    return [
        message
        for message in client.messages[start:]
        if is_notification(message) and thread_of(message["params"]) == thread_id
    ]


def items_completed(
    client: RpcClient, turn_id: str, kind: str | None = None, start: int = 0
) -> list[dict[str, Any]]:
    """The ``item`` of every ``item/completed`` of the turn (of type ``kind``)."""
    return [
        message["params"]["item"]
        for message in turn_events(client, turn_id, start)
        if message["method"] == "item/completed"
        and (kind is None or message["params"]["item"]["type"] == kind)
    ]


def one_item(client: RpcClient, turn_id: str, kind: str, start: int = 0) -> dict[str, Any]:
    found = items_completed(client, turn_id, kind, start)
    assert len(found) == 1, f"expected one completed {kind}, got {found}"
    return found[0]


def deltas(
    client: RpcClient, item_id: str, method: str = "item/agentMessage/delta", start: int = 0
) -> list[dict[str, Any]]:
    """Params of the ``method`` deltas of ``item_id``."""
    return [
        message["params"]
        for message in client.messages[start:]
        if is_notification(message)
        and message["method"] == method
        and message["params"].get("itemId") == item_id
    ]


def terminals(client: RpcClient, turn_id: str, start: int = 0) -> list[dict[str, Any]]:
    return [m for m in turn_events(client, turn_id, start) if m["method"] in TERMINAL]


def seqs(messages: list[dict[str, Any]]) -> list[int]:
    return [int(m["params"]["seq"]) for m in messages]


def assert_increasing(values: list[int]) -> None:
    assert all(a < b for a, b in itertools.pairwise(values)), values


async def wait_terminal(
    client: RpcClient,
    turn_id: str,
    timeout: float = 10,
    start: int = 0,
    thread_id: str | None = None,
) -> dict[str, Any]:
    """The first terminal notification of ``turn_id`` (the whole message); of
    ``thread_id``'s turn when given (turn ids repeat across threads: a client
    watching a child thread gets its ``turn_001`` too)."""
    return await client.wait(
        lambda m: (
            is_notification(m)
            and m["method"] in TERMINAL
            and turn_of(m["params"]) == turn_id
            and thread_id in (None, m["params"].get("threadId"))
        ),
        timeout,
        start,
    )


async def watched_turn(client: RpcClient, thread_id: str, start: int) -> tuple[dict[str, Any], str]:
    """What a client watching ``thread_id`` saw from message ``start`` on: the
    first ``turn/completed`` of the thread, and the agent text streamed since."""
    completed = await client.wait(
        lambda m: (
            m.get("method") == "turn/completed" and m["params"]["turn"]["threadId"] == thread_id
        ),
        start=start,
    )
    text = "".join(
        m["params"]["delta"]
        for m in client.messages[start:]
        if m.get("method") == "item/agentMessage/delta"
    )
    return completed, text


async def wait_event(
    client: RpcClient,
    method: str,
    where: Callable[[dict[str, Any]], bool] | None = None,
    timeout: float = 10,
    start: int = 0,
) -> dict[str, Any]:
    """Params of the first ``method`` notification matching ``where``."""
    return await client.notification(method, timeout=timeout, start=start, where=where)


async def wait_count(
    client: RpcClient,
    predicate: Callable[[dict[str, Any]], bool],
    count: int,
    timeout: float = 10,
) -> list[dict[str, Any]]:
    """Wait until ``count`` messages match ``predicate``; returns them."""
    with anyio.fail_after(timeout):
        while True:
            found = [m for m in client.messages if predicate(m)]
            if len(found) >= count:
                return found
            if client.closed:
                raise ConnectionError("connection closed while waiting")
            await client.wait(lambda m: True, timeout, start=len(client.messages))


def delta_of(item_id: str, method: str = "item/agentMessage/delta") -> Callable[[dict], bool]:
    return lambda m: (
        is_notification(m) and m["method"] == method and m["params"].get("itemId") == item_id
    )


def any_delta(method: str = "item/agentMessage/delta") -> Callable[[dict], bool]:
    return lambda m: is_notification(m) and m["method"] == method


async def new_thread(client: RpcClient, **config: Any) -> str:
    """``thread/start`` (with ``config`` overrides if given); returns the id."""
    params: dict[str, Any] = {}
    if config:
        params["config"] = config
    mark = client.mark()
    thread = await start_thread(client, **params)
    # thread/started follows the response; wait so later marks start clean.
    await client.notification(
        "thread/started", start=mark, where=lambda p: p["thread"]["id"] == thread["id"]
    )
    return str(thread["id"])


async def enqueue(client: RpcClient, thread_id: str, text: str) -> dict[str, Any]:
    """``turn/enqueue`` of one text; its result (``queuedInput``, ``queuedInputs``)."""
    result: dict[str, Any] = await client.request(
        "turn/enqueue", {"threadId": thread_id, "input": text_input(text)}
    )
    return result


async def interrupt_with_queue(
    client: RpcClient, thread_id: str, mark: int, script: str, *queued: str
) -> tuple[str, list[dict[str, Any]], dict[str, Any]]:
    """Start a turn running ``script``, queue ``queued`` behind it, interrupt it:
    the turn's id, the queued inputs and its terminal notification."""
    turn_id = await start_turn(client, thread_id, script)
    inputs = [(await enqueue(client, thread_id, text))["queuedInput"] for text in queued]
    await client.request("turn/interrupt", {"threadId": thread_id, "turnId": turn_id})
    return turn_id, inputs, await wait_terminal(client, turn_id, start=mark)


async def start_turn(
    client: RpcClient, thread_id: str, text: str | list[dict[str, Any]], **extra: Any
) -> str:
    """``turn/start``; returns the turn id."""
    parts = text_input(text) if isinstance(text, str) else text
    result = await client.request("turn/start", {"threadId": thread_id, "input": parts, **extra})
    return str(result["turn"]["id"])


async def run_turn(
    client: RpcClient,
    thread_id: str,
    text: str | list[dict[str, Any]],
    timeout: float = 10,
    **extra: Any,
) -> tuple[str, dict[str, Any]]:
    """Start a turn and wait for its end; returns ``(turn_id, terminal message)``."""
    start = client.mark()
    turn_id = await start_turn(client, thread_id, text, **extra)
    return turn_id, await wait_terminal(client, turn_id, timeout, start, thread_id)


async def read_turn(client: RpcClient, thread_id: str, turn_id: str) -> dict[str, Any]:
    """The stored turn (with items) from ``thread/read``."""
    result = await client.request("thread/read", {"threadId": thread_id, "includeTurns": True})
    turns = {turn["id"]: turn for turn in result["thread"]["turns"]}
    assert turn_id in turns, f"{turn_id} not in {list(turns)}"
    return dict(turns[turn_id])


class Approver:
    """An ``on_server_request`` handler that records approval requests.

    ``decision`` is what it answers (``None``: it does not answer; the test
    answers with :meth:`answer` or never).
    """

    def __init__(self, client: RpcClient, decision: Any = "accept") -> None:
        self.client = client
        self.decision = decision
        self.requests: list[dict[str, Any]] = []  # the whole request messages
        self._changed = anyio.Event()
        client.on_server_request = self._handle

    def _handle(self, method: str, params: Any) -> Any:
        assert method == "item/approval/request", method
        # The request message itself (for its id) is the newest matching one.
        for message in reversed(self.client.messages):
            if message.get("method") == method and "id" in message and message["params"] == params:
                self.requests.append(message)
                break
        self._changed.set()
        self._changed = anyio.Event()
        if self.decision is None:
            return None
        if callable(self.decision):
            return self.decision(params)
        return {"decision": self.decision}

    async def wait_request(self, count: int = 1, timeout: float = 10) -> dict[str, Any]:
        """The ``count``-th request message (waits for it)."""
        with anyio.fail_after(timeout):
            while len(self.requests) < count:
                changed = self._changed
                await changed.wait()
        return self.requests[count - 1]

    async def answer(self, request: dict[str, Any], decision: str) -> None:
        await self.client.send(
            {"jsonrpc": "2.0", "id": request["id"], "result": {"decision": decision}}
        )
