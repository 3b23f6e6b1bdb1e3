"""Tests of appserver/services/ (and what it serves end to end)."""
