"""Transport-agnostic JSON-RPC 2.0 core. It knows messages, not threads."""
