"""Helpers shared by the test modules (as TRL's ``tests/testing_utils.py``): import them from here, never from another
test module."""
