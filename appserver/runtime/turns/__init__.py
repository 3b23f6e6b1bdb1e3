"""Turns: the engine and its parts, one job per module.

- ``model``: the turn's data (config, inputs, the running turn, failures);
- ``engine``: lifecycle (launch, interrupt, shutdown) and starting queued
  inputs;
- ``reservations``: one running turn per thread, and turn and item numbers;
- ``ending``: running a launched turn to its one terminal event, and the
  log line of its end;
- ``items``: creating, streaming, storing and announcing items;
- ``agent``: the model/tool loop;
- ``tooling``: running one tool call (with the shell's output stream);
- ``approval_conversation``: the approval conversation of a gated tool call;
- ``client_tools``: tools clients provide (dynamic and channel tools) and
  their calls, and each thread's bound client;
- ``editor_proxy``: the tools' files and terminals through the bound
  client's ``ext/acp/fs|terminal`` requests;
- ``editor_families``: tools that are requests of the bound client's own
  families (``ext/acp/<family>/<method>``: the ``_unity`` tools, and
  declared tools with an ``acpMethod``);
- ``node_repl``: ``NodeReplJs``, the bound client's Node REPL
  (``ext/nodeRepl/evaluate|cancel``);
- ``queue``: queued inputs per thread;
- ``recovery``: failing turns a crashed process left running.
"""

from appserver.runtime.turns.engine import TurnEngine
from appserver.runtime.turns.model import (
    ActiveTurn,
    EngineConfig,
    QueuedInput,
    TurnFailure,
    UserInput,
)

__all__ = ["ActiveTurn", "EngineConfig", "QueuedInput", "TurnEngine", "TurnFailure", "UserInput"]
