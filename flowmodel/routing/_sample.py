"""Python's ``random.Random(key).sample(range(total), budget)`` for many keys at once, in NumPy.

Routing samples a pair's candidates with a generator seeded by a string key (``"seed/a/b"``), so the
choice is stable across runs and Python versions. Seeding and drawing one ``random.Random`` per pair
costs ~10 us, which dominates routing 10^5 pairs; this module runs the same steps on arrays instead:

1. the seed: ``random.seed(str)`` turns the string into the integer ``bytes + sha512(bytes)`` and
   feeds its 32-bit words (least significant first) to MT19937's ``init_by_array``;
2. ``init_by_array`` (a sequential pass over the 624-word state, vectorised across keys), one twist,
   and tempering give each key's first 624 outputs;
3. ``random.sample``'s two algorithms (a shrinking pool when ``total`` is small against the budget,
   rejection of repeats otherwise), with ``_randbelow``'s rejection of draws ``>= n``, consume those
   outputs key by key.

A key that would need more than the outputs made (4 x budget + 32, at most 227; vanishingly rare for
the budgets routing uses) is drawn
with ``random.Random`` itself. ``tests/test_routing_vectorised.py`` checks the result against
``random.Random`` key by key.
"""

from __future__ import annotations

import hashlib
import math
import random

import numpy as np

_N, _M = 624, 397
_MATRIX_A, _UPPER, _LOWER = np.uint32(0x9908B0DF), np.uint32(0x80000000), np.uint32(0x7FFFFFFF)
_CHUNK = 4096  # keys per pass: the state (624 x 4 bytes per key) stays in cache


def _init_genrand(s: int) -> np.ndarray:
    mt = [s]
    for i in range(1, _N):
        mt.append((1812433253 * (mt[-1] ^ (mt[-1] >> 30)) + i) & 0xFFFFFFFF)
    return np.array(mt, np.uint32)


_INITIAL = _init_genrand(19650218)


def _key_words(keys: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """uint32[K, W] each key's seed words, least significant first (zero padded), and int64[K] how many."""
    raw = [k.encode() for k in keys]
    raw = [b + hashlib.sha512(b).digest() for b in raw]
    width = 4 * max(-(-len(b) // 4) for b in raw)
    padded = b"".join(b.rjust(width, b"\0") for b in raw)  # big-endian integers, left-padded with zeros
    words = np.frombuffer(padded, ">u4").reshape(len(raw), width // 4)[:, ::-1].astype(np.uint32)
    return words, np.array([-(-len(b) // 4) for b in raw], np.int64)


def _outputs(words: np.ndarray, used: np.ndarray, count: int) -> np.ndarray:
    """uint32[K, count]: the first ``count`` (<= 227) outputs of MT19937 after
    ``init_by_array(words[k, :used[k]])``.

    Every key is shorter than 624 words, so ``init_by_array`` runs 624 + 623 steps (CPython's
    ``_randommodule.c``); the state is kept word-major (624, K) so that each step works on a row.
    The first 227 words of the first twist depend only on the seeded state, so only those are made.
    """
    K = words.shape[0]
    order = np.argsort(used, kind="stable")  # keys of one length side by side
    words, used = words[order].T, used[order]
    add = np.empty((_N, K), np.uint32)  # what each of the first 624 steps adds: key word j, plus j
    starts = np.flatnonzero(np.r_[True, used[1:] != used[:-1]]).tolist() + [K]
    for a, b in zip(starts, starts[1:]):
        j = np.arange(_N) % used[a]
        add[:, a:b] = words[j, a:b] + j[:, None].astype(np.uint32)
    mt = np.repeat(_INITIAL[:, None], K, axis=1)
    prev = np.empty(K, np.uint32)
    i = 1
    with np.errstate(over="ignore"):
        for step in range(_N + _N - 1):
            np.right_shift(mt[i - 1], 30, out=prev)
            np.bitwise_xor(prev, mt[i - 1], out=prev)
            if step < _N:
                np.multiply(prev, np.uint32(1664525), out=prev)
                np.bitwise_xor(mt[i], prev, out=mt[i])
                np.add(mt[i], add[step], out=mt[i])
            else:
                np.multiply(prev, np.uint32(1566083941), out=prev)
                np.bitwise_xor(mt[i], prev, out=mt[i])
                np.subtract(mt[i], np.uint32(i), out=mt[i])
            i += 1
            if i >= _N:
                mt[0] = mt[_N - 1]
                i = 1
    mt[0] = _UPPER
    y = (mt[:count] & _UPPER) | (mt[1:count + 1] & _LOWER)  # the twist, words 0 .. count-1
    twisted = mt[_M:_M + count] ^ (y >> 1) ^ np.where((y & 1).astype(bool), _MATRIX_A, np.uint32(0))
    y = np.empty((K, count), np.uint32)
    y[order] = twisted.T
    y ^= y >> 11  # tempering
    y ^= (y << 7) & np.uint32(0x9D2C5680)
    y ^= (y << 15) & np.uint32(0xEFC60000)
    y ^= y >> 18
    return y


def _bit_length(n: np.ndarray) -> np.ndarray:
    return np.frexp(n.astype(np.float64))[1].astype(np.int64)  # exact below 2**53


def _draw(out, pos, n, live):
    """``_randbelow(n)`` for the ``live`` keys: (values, new positions); -1 where a key ran out."""
    bits = _bit_length(n)
    value = np.zeros(n.shape, np.int64)
    todo = live.copy()
    while todo.any():
        rows = np.flatnonzero(todo)
        short = pos[rows] >= out.shape[1]
        if short.any():
            pos[rows[short]] = -1
            todo[rows[short]] = False
            rows = rows[~short]
        r = (out[rows, pos[rows]] >> (32 - bits[rows]).astype(np.uint32)).astype(np.int64)
        pos[rows] += 1
        ok = r < n[rows]
        value[rows[ok]] = r[ok]
        todo[rows[ok]] = False
    return value


def sample_sorted(keys: list[str], totals: np.ndarray, budget: int, *, outputs: int | None = None) -> np.ndarray:
    """int64[K, budget]: ``sorted(random.Random(keys[k]).sample(range(totals[k]), budget))`` per key
    (every total must exceed ``budget``). ``outputs``: generator outputs made per key (default
    ``4 * budget + 32``, at most 227); a key that needs more is drawn with ``random.Random``."""
    totals = np.asarray(totals, np.int64)
    K = totals.size
    result = np.zeros((K, budget), np.int64)
    count = min(_N - _M, outputs or 4 * budget + 32)  # outputs made per key; ~1.3 per draw are used
    setsize = 21 + (4 ** math.ceil(math.log(budget * 3, 4)) if budget > 5 else 0)  # random.sample's switch
    for lo in range(0, K, _CHUNK):
        hi = min(K, lo + _CHUNK)
        out = _outputs(*_key_words(keys[lo:hi]), count)
        n = totals[lo:hi]
        pos = np.zeros(n.size, np.int64)
        picks = np.zeros((n.size, budget), np.int64)
        pool_rows = n <= setsize
        # small totals: a pool of range(n) that shrinks by swapping the last unpicked entry in
        width = int(n[pool_rows].max()) if pool_rows.any() else 1
        pool = np.broadcast_to(np.arange(width), (n.size, width)).copy()
        rows = np.flatnonzero(pool_rows)
        for i in range(budget):
            alive = np.zeros(n.size, bool)
            alive[rows] = pos[rows] >= 0
            j = _draw(out, pos, n - i, alive)
            r = np.flatnonzero(alive & (pos >= 0))
            picks[r, i] = pool[r, j[r]]
            pool[r, j[r]] = pool[r, n[r] - i - 1]
        # large totals: draw from range(n), redrawing repeats
        rows = np.flatnonzero(~pool_rows)
        for i in range(budget):
            todo = np.zeros(n.size, bool)
            todo[rows] = pos[rows] >= 0
            while todo.any():
                j = _draw(out, pos, n, todo)
                r = np.flatnonzero(todo & (pos >= 0))
                repeat = (picks[r, :i] == j[r, None]).any(axis=1)
                picks[r[~repeat], i] = j[r[~repeat]]
                todo[:] = False
                todo[r[repeat]] = True
        for k in np.flatnonzero(pos < 0):  # ran out of the outputs made: draw it the slow way
            picks[k] = random.Random(keys[lo + k]).sample(range(int(n[k])), budget)
        result[lo:hi] = np.sort(picks, axis=1)
    return result
