"""zot's RPC mode (``appserver rpc``): the face lives in ``session`` for now."""

from appserver.faces.zot.session import add_arguments, main

__all__ = ["add_arguments", "main"]
