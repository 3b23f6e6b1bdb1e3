"""Front doors other than JSON-RPC: one module per agent-host wire protocol.

Each face translates its protocol's frames to and from the runtime's
in-process API (``runtime.threads``, ``runtime.turns``, typed events, the
participant port); none has an agent loop, store or turn engine of its own.
A face module exposes ``add_arguments(parser)`` (its command-line flags) and
``async main(args, host, stdin, stdout) -> int``, where ``host()`` opens the
runtime (see ``appserver.hosting``) and ``host(directory)`` that of another
directory, with the same settings but the command line's trust and listener.
Modules import little at the top so ``appserver <face>`` starts fast.
"""
