"""The xla engine through every production layer: a scenario's evaluation, its gradient, a sweep and
``flowmodel run`` take the sparse solve (routed phases carry their incidence), never the dense one, and
give the host engine's numbers; the engine is a typed choice, converted from its name once."""

import dataclasses
import json
import pathlib
import re

import jax
import numpy as np
import pytest

import flowmodel as fm
from flowmodel import cli, config, fabric, sweep
from flowmodel import scenario as scn
from flowmodel.kernels import Engine, fluid, maxmin
from flowmodel.steptime import Options

QUICKSTART = "configs/quickstart.yaml"


def _counted(fn, kind, counts):
    def counted(*args, **kwargs):
        counts[kind] += 1
        return fn(*args, **kwargs)
    return counted


@pytest.fixture
def solves(monkeypatch):
    """Counts of the XLA solves traced from here on: dense, and sparse (the pass tables or a solve)."""
    counts = {"dense": 0, "sparse": 0}
    for module in (fluid, maxmin):
        for name, kind in (("solve_dense", "dense"), ("solve_sparse", "sparse"), ("sparse_tables", "sparse")):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, _counted(getattr(module, name), kind, counts))
    jax.clear_caches()  # a cached program would trace nothing
    return counts


@pytest.fixture(scope="module")
def quickstart():
    sc = config.load(QUICKSTART)
    return {e: scn.prepare(dataclasses.replace(sc, options=dataclasses.replace(sc.options, engine=e)))
            for e in ("host", "xla")}


def test_engine_is_a_typed_static_choice():
    assert Engine.of("xla") is Engine.XLA and Engine.of(None) is Engine.AUTO and Engine.of(Engine.HOST) is Engine.HOST
    assert Engine.AUTO.resolved() is (Engine.HOST if jax.default_backend() == "cpu" else Engine.XLA)
    assert Options(engine="xla") == Options(engine=Engine.XLA)
    assert hash(Options(engine="xla")) == hash(Options(engine=Engine.XLA)) != hash(Options(engine="host"))
    assert Options().engine is Engine.AUTO
    with pytest.raises(ValueError, match="options.engine: must be one of 'auto', 'host', 'xla', got 'gpu'"):
        Options(engine="gpu")
    with pytest.raises(ValueError, match="engine: must be one of 'auto', 'host', 'xla', got 'numba'"):
        fm.completion_times([[0]], [1.0], [1.0], engine="numba")


def test_yaml_engine_key(tmp_path):
    sc = config.load(QUICKSTART, overrides=["model.engine=xla"])
    assert sc.options.engine is Engine.XLA
    assert config.load(QUICKSTART).options.engine is Engine.AUTO
    with pytest.raises(config.ConfigError, match="model.engine: must be one of 'auto', 'host', 'xla', got 'tpu'"):
        config.load(QUICKSTART, overrides=["model.engine=tpu"])


def test_no_engine_name_is_compared_inside_the_kernels():
    kernels = pathlib.Path(fm.kernels.__file__).parent
    name = r"""["'](host|xla|auto)["']"""
    pattern = re.compile(rf"engine\s*(==|!=|in\b)|(==|!=)\s*{name}|{name}\s*(==|!=)")
    hits = [f"{p.name}:{i}: {line.strip()}" for p in sorted(kernels.glob("*.py"))
            for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert hits == []


def test_evaluate_and_gradient_take_the_sparse_solve_and_equal_host(quickstart, solves):
    host, xla = quickstart["host"], quickstart["xla"]
    want, got = host.evaluate(), xla.evaluate()
    assert solves["dense"] == 0 and solves["sparse"] > 0
    assert float(got.step_time) == pytest.approx(float(want.step_time), rel=1e-12, abs=0)
    for name, result in want.steps.items():
        for part, value in result.breakdown.items():
            assert float(got.steps[name].breakdown[part]) == pytest.approx(float(value), rel=1e-12, abs=1e-15), part

    def step(model):
        return jax.grad(lambda c: model.fleet(dataclasses.replace(model.network, capacity=c)).step_time)
    sparse_before = solves["sparse"]
    g_xla = np.asarray(step(xla)(xla.network.capacity))
    g_host = np.asarray(step(host)(host.network.capacity))
    assert solves["dense"] == 0 and solves["sparse"] > sparse_before
    assert np.count_nonzero(g_host) > 0
    np.testing.assert_allclose(g_xla, g_host, rtol=1e-9, atol=1e-12 * np.abs(g_host).max())


@pytest.mark.slow
def test_sweep_takes_the_sparse_solve_and_equals_host(quickstart, solves):
    points = sweep.grid(**{"long_haul/b0-b1": np.array([50e9, 200e9]), "b0/spine_up": np.array([1.0, 4.0])})
    tables = {e: sweep.sweep(cli.sweep_evaluation(m), points, batching="vmap", progress=False)
              for e, m in quickstart.items()}
    assert solves["dense"] == 0 and solves["sparse"] > 0
    np.testing.assert_allclose(tables["xla"]["step_time_s"], tables["host"]["step_time_s"], rtol=1e-12, atol=0)
    one = {k: float(v[1]) for k, v in points.items()}
    single = quickstart["host"].fleet(fabric.apply_groups(quickstart["host"].network, quickstart["host"].info, one))
    assert float(tables["xla"]["step_time_s"][1]) == pytest.approx(float(single.step_time), rel=1e-12)


@pytest.mark.slow
def test_cli_run_with_the_xla_engine_equals_host(tmp_path, solves):
    runs = {}
    for engine in ("host", "xla"):
        out = tmp_path / engine
        assert cli.main(["run", QUICKSTART, "--set", f"model.engine={engine}", "--out", str(out), "--quiet"]) == 0
        runs[engine] = json.loads((out / "run.json").read_text())
    assert solves["dense"] == 0 and solves["sparse"] > 0
    assert runs["xla"]["step_time_s"] == pytest.approx(runs["host"]["step_time_s"], rel=1e-12, abs=0)
