"""Sweeps: sharded over 4 host devices, chunked, and across 2 processes, all equal to one device."""

import csv
import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from flowmodel import sweep

WORKER = os.path.join(os.path.dirname(__file__), "sweep_worker.py")


def _run(out, *args, timeout=300):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(WORKER)),
                                                       os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen([sys.executable, WORKER, str(out), *map(str, args)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _wait(*procs, timeout=300):
    for p in procs:
        out, _ = p.communicate(timeout=timeout)
        assert p.returncode == 0, out.decode()[-2000:]


@pytest.mark.slow
def test_sharded_chunked_and_multiprocess_sweeps_equal_one_device(tmp_path):
    one, four, chunked = tmp_path / "one.npz", tmp_path / "four.npz", tmp_path / "chunked.npz"
    _wait(_run(one))
    _wait(_run(four, "--devices", 4), _run(chunked, "--devices", 4, "--chunk", 5))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    multi = tmp_path / "multi.npz"
    _wait(*[_run(multi, "--devices", 2, "--process", i, "--processes", 2, "--port", port) for i in range(2)])
    ref = np.load(one)
    assert int(ref["devices"]) == 1 and ref["seconds"].size == 21
    for path, devices in ((four, 4), (chunked, 4), (multi, 4)):
        got = np.load(path)
        assert int(got["devices"]) == devices
        for key in ("long_haul", "ratio", "seconds", "busbw"):
            np.testing.assert_array_equal(got[key], ref[key], err_msg=f"{path.name}: {key}")
    assert len(set(np.round(ref["seconds"], 12))) > 3  # the sweep is not flat


def test_grid_random_points_and_tables(tmp_path):
    g = sweep.grid(a=[1.0, 2.0], b=[10.0, 20.0, 30.0])
    assert g["a"].tolist() == [1, 1, 1, 2, 2, 2] and g["b"].tolist() == [10, 20, 30] * 2
    r = sweep.random_points(50, seed=3, log=("c",), c=(1e9, 1e12), d=(0.0, 1.0))
    assert r["c"].min() >= 1e9 and r["c"].max() <= 1e12 and np.all((r["d"] >= 0) & (r["d"] <= 1))
    np.testing.assert_array_equal(r["c"], sweep.random_points(50, seed=3, log=("c",), c=(1e9, 1e12),
                                                              d=(0.0, 1.0))["c"])
    table = sweep.sweep(lambda p: {"sum": p["a"] + p["b"], "prod": p["a"] * p["b"]}, g, chunk=4)
    assert table["sum"].tolist() == [11, 21, 31, 12, 22, 32] and table["prod"][-1] == 60
    csv_path, json_path = sweep.write_table(table, str(tmp_path), "t")
    rows = list(csv.DictReader(open(csv_path)))
    assert len(rows) == 6 and float(rows[-1]["prod"]) == 60
    assert json.load(open(json_path))["rows"][0] == {"a": 1.0, "b": 10.0, "sum": 11.0, "prod": 10.0}


@pytest.mark.parametrize("call, match", [
    (lambda: sweep.grid(), "needs at least one axis"),
    (lambda: sweep.grid(a=[]), r"grid.a: must be a non-empty 1-D list"),
    (lambda: sweep.random_points(0, a=(0, 1)), "n: must be an integer >= 1"),
    (lambda: sweep.random_points(3, log=("a",), a=(0.0, 1.0)), r"random_points.a: bad box"),
    (lambda: sweep.sweep(lambda p: {"x": p["a"]}, {"a": [1.0], "b": [1.0, 2.0]}), "the same non-empty 1-D list"),
    (lambda: sweep.sweep(lambda p: {"a": p["a"]}, {"a": [1.0]}), "output 'a' has the name of a parameter"),
    (lambda: sweep.sweep(lambda p: {"x": p["a"]}, {"a": [1.0]}, chunk=0), "chunk: must be >= 1"),
])
def test_bad_sweeps(call, match):
    with pytest.raises(ValueError, match=match):
        call()
