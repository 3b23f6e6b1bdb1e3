"""``appserver acp``: the Agent Client Protocol (ACP v1), agent side, over stdio.

An editor (Zed, JetBrains, any ACP client) spawns ``appserver acp`` and speaks
JSON-RPC 2.0, one message per line. The ``agent-client-protocol`` package
(import name ``acp``) does the JSON-RPC dispatch and provides the schema
models; this face maps them onto the runtime:

* ``initialize`` -> protocol version 1 (the only one we speak, whatever the
  client asked), ``agentCapabilities`` ``{loadSession: true,
  promptCapabilities: {image: true, embeddedContext: true}}``, no auth methods;
* a session is a thread: ``session/new`` creates one (channel ``acp``, user
  ``local``), ``session/load`` opens any stored thread of the workspace (made
  over ACP, JSON-RPC or another face) and replays its items as
  ``session/update`` notifications, ``session/list`` lists them; the session
  id is the thread id;
* ``session/prompt`` starts a turn and streams its items as ``session/update``
  (``agent_message_chunk``, ``agent_thought_chunk``, ``tool_call``,
  ``tool_call_update``), then answers ``{stopReason}``;
* every approval of a gated tool call becomes ``session/request_permission``
  (the session's seat is a participant that answers approvals);
* ``session/cancel`` interrupts the running turn; the prompt answers
  ``cancelled``; a turn that runs out of model calls answers
  ``max_turn_requests``, any other failure is a ``-32603`` error.

The modules ``acp_agent`` (the agent: initialize and the session methods),
``acp_session`` (a session's seat, prompts and permission questions),
``acp_events`` (runtime items as session updates, prompt blocks as input
parts) and ``acp_transport`` (JSON-RPC framing over the process's stdio) are
imported by :func:`main` only, so ``appserver acp --help`` does not load the
package. docs/faces.md has the whole mapping and the choices made.
"""

from __future__ import annotations

import argparse
from typing import IO, Any

from appserver.faces.common import add_backlog_argument, positive_int


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This face's own flags (the shared ones are added by the CLI)."""
    group = parser.add_argument_group("acp")
    group.add_argument(
        "--max-turn-requests",
        type=positive_int,
        metavar="N",
        help=(
            "model calls per prompt (default 32); past it the prompt ends with "
            "stopReason max_turn_requests"
        ),
    )
    add_backlog_argument(group)


def configure(args: argparse.Namespace, options: Any) -> None:
    """Apply this face's flags to the host options (before the host opens)."""
    import dataclasses

    if args.max_turn_requests is not None:
        options.engine = dataclasses.replace(options.engine, max_model_calls=args.max_turn_requests)


async def main(
    args: argparse.Namespace, options: Any, host: Any, stdin: IO[bytes], stdout: IO[bytes]
) -> int:
    """Serve ACP on ``stdin``/``stdout`` until stdin closes; returns the exit code."""
    from appserver.faces.acp_agent import serve

    configure(args, options)
    return await serve(args, host, stdin, stdout)
