"""Threads, turns, items, the event bus and fan-out."""
