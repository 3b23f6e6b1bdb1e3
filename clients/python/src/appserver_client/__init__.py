"""Python client for the appserver JSON-RPC AppServer.

>>> async with AppServerClient.spawn(["appserver", "app-server"]) as client:  # doctest: +SKIP
...     thread = (await client.thread_start(identity={"channelName": "cli", "userId": "me"}))
...     outcome = await client.run_turn(thread["thread"]["id"], "hello")

The wire types (every params, result and notification ``TypedDict``) are in
:mod:`appserver_client.types`. See README.md for the whole tour.
"""

from __future__ import annotations

__version__ = "0.1.0"

from appserver_client._generated import METHODS, NOTIFICATIONS, SERVER_REQUESTS
from appserver_client.client import (
    DECISIONS,
    ApprovalHandler,
    AppServerClient,
    ChannelToolCallHandler,
    ClientOptions,
    Opening,
    ReadTextFileHandler,
    TerminalHandler,
    ToolCallHandler,
    TurnOutcome,
    WriteTextFileHandler,
)
from appserver_client.errors import (
    AppServerError,
    ClientClosed,
    ConnectFailed,
    ConnectionLost,
    NotificationOverflow,
    RpcError,
)
from appserver_client.notifications import Notification, NotificationStream

__all__ = [
    "DECISIONS",
    "METHODS",
    "NOTIFICATIONS",
    "SERVER_REQUESTS",
    "AppServerClient",
    "AppServerError",
    "ApprovalHandler",
    "ChannelToolCallHandler",
    "ClientClosed",
    "ClientOptions",
    "ConnectFailed",
    "ConnectionLost",
    "Notification",
    "NotificationOverflow",
    "NotificationStream",
    "Opening",
    "ReadTextFileHandler",
    "RpcError",
    "TerminalHandler",
    "ToolCallHandler",
    "TurnOutcome",
    "WriteTextFileHandler",
    "__version__",
]
