"""Tests of the front doors (faces), one package per face."""
