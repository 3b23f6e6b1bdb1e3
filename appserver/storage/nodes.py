"""A server's name among the nodes that share one database."""

from __future__ import annotations

import os
import secrets
import socket


def new_node_id() -> str:
    """``<host>-<pid>-<random>``: unique among live and past nodes (several
    servers in one process too), and readable in logs and ``turns.node_id``."""
    host = socket.gethostname().split(".")[0] or "node"
    return f"{host}-{os.getpid()}-{secrets.token_hex(3)}"
