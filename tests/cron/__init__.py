"""Tests of appserver/cron/ (and what it serves end to end)."""
