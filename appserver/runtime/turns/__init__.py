"""Turns: the engine and its parts, one job per module.

- ``model``: the turn's data (config, inputs, the running turn, failures);
- ``engine``: lifecycle (reserve, run, finish with one terminal event,
  interrupt, shutdown) and starting queued inputs;
- ``items``: creating, streaming, storing and announcing items;
- ``agent``: the model/tool loop;
- ``tooling``: running one tool call (with the shell's output stream);
- ``asking``: the approval conversation of a gated tool call;
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
