"""``appserver codex app-server`` / ``appserver-codex app-server``: OpenAI Codex's
app-server protocol (v2) over stdio or WebSocket, so clients written for ``codex app-server``
(OpenAI's Python SDK ``openai-codex``, ``CodexConfig(codex_bin=".../appserver-codex")``)
drive this runtime unchanged.

The package's rooms: :mod:`~appserver.faces.codex.command` (flags, ``-c`` settings,
``main``), :mod:`~appserver.faces.codex.wire` (Codex's envelope: no ``jsonrpc``
member), :mod:`~appserver.faces.codex.session` (one connection: requests, server
requests, its seat), :mod:`~appserver.faces.codex.threads` (initialize and the thread
methods), :mod:`~appserver.faces.codex.turns` (turns and event streaming),
:mod:`~appserver.faces.codex.items` (our items as Codex's typed items),
:mod:`~appserver.faces.codex.shapes` (Thread, Turn, policies),
:mod:`~appserver.faces.codex.approvals` (approval requests and decisions). Only
``command`` is imported by the CLI. docs/faces.md has the mapping.
"""

from appserver.faces.codex.command import add_arguments, codex_argv, early_answer, main

__all__ = ["add_arguments", "codex_argv", "early_answer", "main"]
