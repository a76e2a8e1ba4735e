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
import math
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


def _strict(value):
    """JSON has no inf or NaN: they become null (a disconnected job's step time, say)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    return value


def write_json(path: str, payload) -> None:
    """``payload`` as indented, strict JSON at ``path`` (inf and NaN as null), atomically."""
    write_text(path, json.dumps(_strict(payload), indent=1, allow_nan=False))
