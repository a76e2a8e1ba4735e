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


LOCK_NAME = ".flowmodel.lock"


class OutputLocked(ValueError):
    """Another live process is writing into the same output folder."""


class OutputLock:
    """An exclusive lock on an output folder for one command: ``folder/.flowmodel.lock`` holding the
    owner's pid, locked with ``fcntl.flock`` (the kernel drops it when the owner dies, so a lock left
    by a killed run never blocks; the pid in it only names the owner). ``release`` removes the file.

    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> with OutputLock(folder):
    ...     OutputLock(folder).acquire()
    Traceback (most recent call last):
    ...
    flowmodel.results.OutputLocked: --out ...: another flowmodel command (pid ...) is writing there; ...
    """

    def __init__(self, folder: str):
        self.folder, self.path, self.fd = folder, os.path.join(folder, LOCK_NAME), None

    def acquire(self) -> OutputLock:
        import fcntl

        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666 & ~_umask())
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                owner = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                raise OutputLocked(f"--out {self.folder}: another flowmodel command (pid {owner}) is writing there; "
                                   f"wait for it or choose another --out") from None
            try:  # the file we locked may have been released and removed meanwhile: lock the one at the path
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        os.close(self.fd)  # closing drops the flock
        self.fd = None

    def __enter__(self) -> OutputLock:
        return self.acquire()

    def __exit__(self, *_) -> None:
        self.release()
