"""Tests of appserver/rpc/ (and what it serves end to end)."""
