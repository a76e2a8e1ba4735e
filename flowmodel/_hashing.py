"""A vectorised, seedable integer hash (splitmix64 finaliser): deterministic across runs and
platforms, unlike Python's ``hash``; used wherever a choice must look random but be reproducible."""

import numpy as np


def _splitmix(x: np.ndarray) -> np.ndarray:
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def hash_keys(*keys) -> np.ndarray:
    """uint64 hash of the broadcast integer keys, element-wise."""
    h = np.zeros(np.broadcast(*keys).shape, np.uint64)
    with np.errstate(over="ignore"):
        for k in keys:
            h = _splitmix(h ^ np.asarray(k).astype(np.uint64))
    return h
