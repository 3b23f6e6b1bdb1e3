"""Tests of appserver/providers/ (and what it serves end to end)."""
