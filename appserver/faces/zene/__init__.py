"""Zene Host Protocol v1: ``appserver host --protocol v1 --bridge-compat --single-request``.

The command-provider contract of clawbridge (``CLAWBRIDGE_CMD_PROTOCOL=zene-host-v1``):
one JSON request per stdin line, one flat JSON response per stdout line, logs on
stderr. A request's ``session_id`` names an ordinary thread of the workspace
(``face_sessions``: face ``zene``), its ``prompt`` becomes one turn there, and the
turn's last agent message is the response ``text``. ``timeout_ms`` is a hard
limit (the turn is interrupted and ``TIMEOUT`` answered; a one-shot counts it
from its own start and exits within it); ``idempotency_key`` replays a stored
successful response (``face_replies``) to a retry, within the window a retry
needs (``timeout_ms * 10/9 + 2 s``, at most the TTL).

``--single-request`` reads one line, answers it and exits (a one-shot process per
request: the workspace lock queues processes of one workspace). Without it the
process serves one request per line until stdin closes: different sessions at
once, one session's requests in arrival order.

Exit codes (see docs/faces.md): 0 once a response was written (with
``--bridge-compat`` even for ``INVALID_REQUEST``, because clawbridge ignores
stdout when the status is not 0); 1 the client stopped reading and was
dropped (``--max-client-backlog``); 2 no request (EOF, blank input, stdin
timeout: nothing written) or, without ``--bridge-compat``, an invalid request;
3 provider configuration failure; 4 the runtime could not be opened. With 3
and 4 the request that was read is still answered on stdout.

Rooms: ``wire`` (the request and response lines), ``session`` (a request answered
as a turn of the session's thread), ``serving`` (the process: one-shot or long-lived)
and ``command`` (the flags and ``main``). Importing this package loads only the
command's flags, when they are asked for; the rest loads inside ``main``. A
one-shot handed to a warm process (``warm``) loads nothing else of it.
"""


def __getattr__(name: str) -> object:
    """``add_arguments`` and ``main``, from ``command`` at first use."""
    if name in ("add_arguments", "main"):
        from appserver.faces.zene import command

        return getattr(command, name)
    raise AttributeError(name)
