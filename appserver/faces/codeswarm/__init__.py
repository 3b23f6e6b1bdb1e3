"""``appserver router``: the Codeswarm router protocol ``codeswarm.router.v1``.

The face's rooms:

* :mod:`~appserver.faces.codeswarm.command`: the command (``add_arguments``, ``main``,
  ``--listen``'s address);
* :mod:`~appserver.faces.codeswarm.wire`: the frames (checking commands, encoding events);
* :mod:`~appserver.faces.codeswarm.handshake`: ``providers_list``'s answer, also written
  before the face is built;
* :mod:`~appserver.faces.codeswarm.serve`: serving the router on stdio or TCP;
* :mod:`~appserver.faces.codeswarm.session`: the router (commands in, events out), with
  its other jobs in rooms of their own: :mod:`~appserver.faces.codeswarm.mailboxes` (one
  mailbox per node, run a turn at a time) and :mod:`~appserver.faces.codeswarm.swarms`
  (launch, status, terminate); its state, stored swarms, node threads and turn relay too.

Light at import (the CLI imports this package by name): the transport and the router
load in :func:`main`.
"""

from appserver.faces.codeswarm.command import add_arguments, main
from appserver.faces.codeswarm.handshake import early_answer  # providers_list before the build

__all__ = ["add_arguments", "early_answer", "main"]
