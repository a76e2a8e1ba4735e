"""Result files: written whole or not at all, with the permissions the user's umask gives.

>>> import json, os, tempfile
>>> from flowmodel import results
>>> path = os.path.join(tempfile.mkdtemp(), "out", "result.json")
>>> results.write_json(path, {"step_time_s": 0.5})
>>> json.load(open(path))
{'step_time_s': 0.5}
"""

from __future__ import annotations

import json
import os
import tempfile


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder, so a crash never
    leaves a half-written file; the file gets mode 0666 less the umask, like ``open`` would give."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")  # mkstemp creates it 0600
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def write_text(path: str, text: str) -> None:
    """``text`` (UTF-8) at ``path``, atomically (``write_bytes``)."""
    write_bytes(path, text.encode())


def write_json(path: str, payload) -> None:
    """``payload`` as indented JSON at ``path``, atomically (``write_text``)."""
    write_text(path, json.dumps(payload, indent=1))
