"""Smooth (alpha-fair) relaxation: converges to exact max-min as sharpness grows; smooth gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import random_instance

import flowmodel as fm
from flowmodel.reference import link_loads
from flowmodel.reference import maxmin_rates as oracle


def test_converges_to_exact_maxmin_as_sharpness_grows():
    rng = np.random.default_rng(0)
    instances = [random_instance(rng, caps=0.2) for _ in range(12)]
    median_err = []
    for sharpness in (2.0, 8.0, 32.0, 128.0, 512.0):
        errs = []
        for routes, cap, w, lim in instances:
            x = np.asarray(fm.smooth_maxmin_rates(routes, cap, weights=w, rate_limit=lim, sharpness=sharpness,
                                                  iterations=600))
            assert np.all(link_loads(routes, x, cap.size) <= cap * (1 + 1e-6))  # always feasible
            errs.append(np.max(np.abs(x - oracle(routes, cap, w, lim)) / oracle(routes, cap, w, lim)))
        median_err.append(np.median(errs))
    assert all(b < a for a, b in zip(median_err, median_err[1:])), median_err
    assert median_err[0] > 1e-2 and median_err[-1] < 1e-6


def test_single_link_is_exact_for_any_sharpness():
    w = np.array([1.0, 3.0])
    x = fm.smooth_maxmin_rates(np.zeros((2, 1), np.int32), np.array([8.0]), weights=w, sharpness=2.0)
    np.testing.assert_allclose(x, [2.0, 6.0], rtol=1e-9)


def test_gradient_is_finite_and_matches_finite_differences():
    rng = np.random.default_rng(1)
    routes, cap, w, lim = random_instance(rng, caps=0.2)
    a = rng.normal(size=w.size)

    def f(c):
        return jnp.vdot(a, fm.smooth_maxmin_rates(routes, c, weights=w, rate_limit=lim, sharpness=16.0,
                                                  iterations=400))

    g = jax.grad(f)(cap)
    assert np.all(np.isfinite(g))
    v = rng.normal(size=cap.size)
    eps = 1e-5
    fd = (f(cap + eps * v) - f(cap - eps * v)) / (2 * eps)
    np.testing.assert_allclose(jnp.vdot(g, v), fd, rtol=1e-5)


@pytest.mark.parametrize("kwargs, match", [
    (dict(sharpness=0.5), "sharpness must be >= 1"),
    (dict(iterations=0), "iterations must be a positive int"),
    (dict(step=1.5), r"step must be in \(0, 1\]"),
    (dict(capacity=np.array([1.0, np.nan])), r"capacity\[1\] is NaN"),
])
def test_bad_input(kwargs, match):
    args = dict(capacity=np.array([1.0, 2.0]))
    args.update(kwargs)
    cap = args.pop("capacity")
    with pytest.raises(ValueError, match=match):
        fm.smooth_maxmin_rates(np.array([[0, 1]]), cap, **args)


def test_weight_gradients_are_finite_without_rate_limits():
    routes = np.array([[0, 1], [0, -1], [1, -1]])
    grad = jax.grad(lambda w: fm.smooth_maxmin_rates(routes, np.array([1.0, 2.0]), weights=w, sharpness=16.0).sum())
    g = np.asarray(grad(jnp.array([0.5, 1.0, 2.0])))
    assert np.isfinite(g).all()
