"""Tests of appserver/tools/ (and what it serves end to end)."""
