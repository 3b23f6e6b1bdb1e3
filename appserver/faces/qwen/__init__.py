"""Qwen Code's structured I/O: ``appserver --input-format stream-json
--output-format stream-json [...]`` (no subcommand), so ``@qwen-code/sdk``'s
``query({pathToQwenExecutable})`` can drive this agent.

NDJSON both ways, one process per SDK ``query()``. In: ``user`` messages
(one turn each, queued in order), ``control_request``s (``initialize``,
``interrupt``, ``set_model``, ``set_permission_mode``,
``get_available_models``, ``supported_commands``, ...; each answered by a
``control_response``) and the SDK's ``control_response``s to our
``can_use_tool`` requests. Out: per turn a ``system`` ``init`` message,
``assistant`` messages (``text``, ``thinking``, ``tool_use`` blocks),
``user`` messages with ``tool_result`` blocks, ``stream_event`` partials with
``--include-partial-messages``, and one ``result``. Sessions
(``--session-id``, ``--resume``, ``--continue``) are ordinary threads that a
later process continues. Also ``--output-format json``,
``stream-chunk-json`` (OpenAI chunks) and text, and ``--input-format text``
(stdin is the prompt). See docs/faces.md.

The package's rooms:

* :mod:`~appserver.faces.qwen.command`: the command (``add_arguments``, ``main``);
* :mod:`~appserver.faces.qwen.wire`: the frames (a ``user`` message read as a job, the
  output formats);
* :mod:`~appserver.faces.qwen.session`: one process's session, its thread, the read
  loop and the turn worker;
* :mod:`~appserver.faces.qwen.control`: the control requests the SDK sends, and
  their answers;
* :mod:`~appserver.faces.qwen.turn`: one turn's runtime events as stream-json
  messages;
* :mod:`~appserver.faces.qwen.annotations`: the RFC's chunk annotations
  (``stream-chunk-json``: tool displays, terminal output, thoughts, session events);
* :mod:`~appserver.faces.qwen.seat`: the face's seat (approvals as ``can_use_tool``);
* :mod:`~appserver.faces.qwen.rules`: approval modes and tool rules;
* :mod:`~appserver.faces.qwen.shell`: shell commands as the command rules read them.

Importing the package loads only the command (and the approval modes' names); the
rest loads in ``main``.
"""

from appserver.faces.qwen.command import add_arguments, early_answer, main

__all__ = ["add_arguments", "early_answer", "main"]
