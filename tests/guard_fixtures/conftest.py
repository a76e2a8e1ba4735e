"""Planted violations for tests/test_guards.py: read by the guards, never collected as tests."""

collect_ignore_glob = ["*.py"]


def check_positive(x):
    assert x > 0
