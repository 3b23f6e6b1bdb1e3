"""appserver: a JSON-RPC 2.0 AppServer hosting an AI coding agent."""

__version__ = "0.1.0"
