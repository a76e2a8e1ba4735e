"""Result files: written whole or not at all."""

from __future__ import annotations

import json
import os
import tempfile


def write_json_atomic(path: str, payload) -> None:
    """Write ``payload`` as JSON to ``path`` through a temporary file in the same folder, so a crash
    never leaves a half-written result."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(payload, fh, indent=1)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
