"""Tests of appserver/protocol/ (and what it serves end to end)."""
