"""Tests of appserver/storage/ (and what it serves end to end)."""
