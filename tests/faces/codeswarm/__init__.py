"""Tests of the Codeswarm router face (appserver/faces/codeswarm/)."""
