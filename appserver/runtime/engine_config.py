"""The turn engine's tunables, in a module of their own: the CLI and the
server's configuration name them without loading the engine."""

from __future__ import annotations

from dataclasses import dataclass

from appserver.runtime.system_prompt import DEFAULT_SYSTEM_PROMPT
from appserver.runtime.tool_output import DEFAULT_TOOL_OUTPUT_MAX_BYTES


@dataclass
class EngineConfig:
    """Tunables of the turn engine."""

    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    # Read AGENTS.md files into every request's instructions
    # (runtime/instructions.py): the workspace's, and the user's own (in the
    # user's appserver directory).
    project_instructions: bool = True
    user_instructions: bool = True
    max_model_calls: int = 32
    approval_timeout: float = 120.0
    reconnect_grace: float = 15.0
    # How long past an evaluation's own timeout (NodeReplJs's timeoutSeconds) the
    # client may take to answer ext/nodeRepl/evaluate (DotCraft waits 5 s more).
    node_repl_answer_margin: float = 5.0
    checkpoint_interval: float = 0.5  # how often streaming text is saved for crash recovery
    shutdown_grace: float = 5.0
    # Context compaction (turns/compaction.py): a turn whose history is estimated
    # past context_window * auto_compact_ratio tokens compacts earlier turns first.
    context_window: int = 128_000
    auto_compact_ratio: float = 0.8
    auto_compact: bool = True
    # Nodes sharing a PostgreSQL database (runtime/cluster.py): a node that has
    # not heartbeated for this long is dead, and its running turns are failed.
    node_lease: float = 10.0
    # How much of each tool's output the model reads (runtime/tool_output.py):
    # head and tail of this many UTF-8 bytes, a marker between; 0: all of it.
    tool_output_max_bytes: int = DEFAULT_TOOL_OUTPUT_MAX_BYTES
