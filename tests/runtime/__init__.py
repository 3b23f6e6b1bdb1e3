"""Tests of appserver/runtime/ (and what it serves end to end)."""
