"""Tests of zot's RPC face (appserver/faces/zot/)."""
