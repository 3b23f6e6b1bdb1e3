"""Tests of the Qwen Code stream-json face (appserver/faces/qwen/)."""
