"""``appserver rpc``: zot's RPC mode (``zot rpc``), newline-delimited JSON over stdio.

One process is one session: one thread (channel ``zot``, user ``local``),
made by the first ``prompt`` or ``compact`` and never resumed by a later
process (zot's RPC mode keeps no sessions; the thread is still an ordinary
stored thread that ``thread/list`` shows). ``clear`` starts a new thread.

Commands (``{"id"?, "type", ...}``) get one ``response`` frame each
(``{"type":"response","id"?,"command","success","data"?,"error"?}``, ``id``
echoed only when sent). ``prompt`` and ``compact`` run one at a time in the
order they came; each is answered when it starts (at once when the session
is idle), then streams events (no ``id``) ending with ``done``. Events are
derived from the runtime's:

* ``turn/started`` + the ``userMessage`` item -> ``user_message``, then
  ``turn_start {step:1}`` and ``assistant_start``;
* agent text deltas -> ``text_delta``; ``item/usage/delta`` -> ``usage``
  (with the process's cumulative totals);
* the first tool-execution item after a model call (approval, command,
  result) ends that step: ``assistant_message`` (text and tool calls),
  one ``tool_call`` per call, ``turn_end {stop:"tool_use"}``; command
  output -> ``tool_progress``; ``toolResult`` -> ``tool_result``; the next
  model output opens step N+1 (``turn_start``, ``assistant_start``);
* ``turn/completed`` -> ``assistant_message``, ``turn_end {stop:"end_turn"}``,
  ``done``; ``turn/failed`` -> ``turn_end {stop:"error", error}``,
  ``error {message}``, ``done`` (zot's order); ``turn/cancelled`` (``abort``,
  or the ``interrupt`` approval policy) -> what the model said so far, an
  error ``tool_result`` for each unfinished call, ``turn_end
  {stop:"aborted"}`` (``error`` naming any reason other than an abort), ``done``;
* a compaction turn -> ``compact_done {summary}`` then ``done``.

The seat is the origin of every turn this face starts, so it gets exactly
those turns' events (a turn's events reach its origin without a
subscription); turns other clients run on the thread are not reported.

The package's rooms: ``wire`` (frames, parsing, encoding), ``session`` (what the
process holds), ``jobs`` (prompts and compactions, run in order), ``events`` (runtime
events as zot events), ``commands`` (one handler a command), ``process`` (the read loop
and the worker) and ``command`` (flags and ``main``).
"""

from appserver.faces.zot.command import add_arguments, main
from appserver.faces.zot.handshake import early_answer  # hello before the face is built

__all__ = ["add_arguments", "early_answer", "main"]
