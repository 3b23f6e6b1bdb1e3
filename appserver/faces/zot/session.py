"""What one ``zot rpc`` process holds: its runtime, its seat (the origin of every turn
it starts, so it gets exactly those turns' events), its thread (channel ``zot``, user
``local``, made on first use; ``clear`` forgets it), the model chosen before the thread
exists, the token totals, and the bounded writer every frame goes out through.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from appserver.faces.common import interrupt_quietly
from appserver.faces.zot.wire import Frame, Totals, coalescing, failure, response, zot_messages

if TYPE_CHECKING:
    from appserver.faces.seat import Seat
    from appserver.runtime.host import Runtime
    from appserver.transport.stdio import StdioTransport

CHANNEL = "zot"
USER_ID = "local"


class Session:
    """One ``zot rpc`` process's conversation: its state and its output."""

    def __init__(
        self,
        runtime: Runtime,
        transport: StdioTransport,
        options: Any,
        approval_policy: str | None,
        max_backlog: int,
    ) -> None:
        from appserver.faces.seat import Seat
        from appserver.transport.peer_writer import PeerWriter

        self.runtime = runtime
        self.transport = transport
        self.workspace = Path(options.workspace)
        self.approval_policy = approval_policy
        # commandExecution items are opt-in for seats: this one wants their
        # output deltas (tool_progress).
        self.seat: Seat = Seat(CHANNEL, topics_hidden=frozenset())
        self.thread_id: str | None = None
        self.model: str | None = None  # set_model before the thread exists
        self.totals = Totals()
        self.serving = anyio.CancelScope()  # cancelled when the client is dropped
        # Frames queue here (bounded) and one task writes them: a client that
        # stops reading is dropped (the process ends), it cannot grow the process.
        self.writer = PeerWriter(
            transport.send_batch,
            max_bytes=max_backlog,
            on_stall=self.serving.cancel,
            try_send=transport.try_send,
        )

    # --- output ----------------------------------------------------------------------

    async def send(self, frame: Frame) -> None:
        """Queue one frame (never waits). Once the client closed stdout, or was
        dropped for not reading, frames are discarded; stdin is still served
        in the first case."""
        from appserver.protocol.encoding import dumps

        line = dumps(frame)  # surrogate-safe: an id may hold a lone surrogate
        self.writer.put(line, coalescing(frame))

    async def respond(
        self, request_id: str | None, command: str, data: Frame | None = None
    ) -> None:
        await self.send(response(request_id, command, data))

    async def fail(self, request_id: str | None, command: str, error: str) -> None:
        await self.send(failure(request_id, command, error))

    # --- the thread ------------------------------------------------------------------

    def current_model(self) -> str:
        return self.model or self.runtime.engine.provider.default_model

    async def thread(self) -> str:
        """This session's thread, made on first use."""
        from appserver.runtime.threads import NewThread

        if self.thread_id is None:
            config: dict[str, Any] = {}
            if self.approval_policy:
                config["approvalPolicy"] = self.approval_policy
            if self.model:
                config["model"] = self.model
            thread = await self.runtime.threads.create(
                NewThread(
                    user_id=USER_ID,
                    channel_name=CHANNEL,
                    display_name=f"zot rpc (pid {os.getpid()})",
                    configuration=config or None,
                )
            )
            self.thread_id = thread.id
        return self.thread_id

    async def transcript(self) -> list[Frame]:
        """The thread's conversation as the model sees it now, as zot messages."""
        from appserver.runtime.history import messages_from_items

        if self.thread_id is None:
            return []
        repo = self.runtime.repo
        turns, _ = await repo.turns(self.thread_id)
        stored = await repo.items(self.thread_id, [turn.id for turn in turns])
        items = [item for turn in turns for item in stored[turn.id]]
        messages = await anyio.to_thread.run_sync(messages_from_items, items)
        return zot_messages(messages, items)

    def forget_thread(self) -> None:
        """The session's thread is gone (deleted by another client): the next
        :meth:`thread` makes a new one."""
        self.thread_id = None

    async def interrupt(self, thread_id: str, turn_id: str) -> None:
        await interrupt_quietly(self.runtime, thread_id, turn_id)
