"""Tests of the faces (appserver/faces/), one package per face."""
