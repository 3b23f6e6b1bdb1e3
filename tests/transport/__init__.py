"""Tests of appserver/transport/ (and what it serves end to end)."""
