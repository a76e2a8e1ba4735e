"""What the peers' child processes share."""

import os


def child_env() -> dict:
    """The environment of a peer's child process: this checkout first on PYTHONPATH."""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env
