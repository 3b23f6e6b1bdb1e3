"""Transports move text frames between a peer and the JSON-RPC core."""
