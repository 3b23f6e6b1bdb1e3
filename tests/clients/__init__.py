"""Tests of the clients (clients/python, clients/node) against real servers."""
