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

The package's rooms: :mod:`~appserver.faces.acp.command` (the flags and ``main``),
:mod:`~appserver.faces.acp.agent` (the agent: initialize and the session methods,
and serving it), :mod:`~appserver.faces.acp.session` (a session's seat, prompts and
permission questions), :mod:`~appserver.faces.acp.events` (runtime items as session
updates, prompt blocks as input parts) and :mod:`~appserver.faces.acp.wire` (checking
and encoding JSON-RPC messages, one a line over the process's stdio). Light at import
(the CLI imports this package by name): all but ``command`` are imported by
:func:`main` only, so ``appserver acp --help`` does not load the ``acp`` package.
docs/faces.md has the whole mapping and the choices made.
"""

from appserver.faces.acp.command import add_arguments, early_answer, main

__all__ = ["add_arguments", "early_answer", "main"]
