import gc

import jax
import numpy as np
import pytest

jax.config.update("jax_enable_x64", True)

# Planted violations read by tests/test_guards.py; their conftest.py would shadow this one as `conftest`.
collect_ignore = ["guard_fixtures"]


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    # Every compiled XLA:CPU program keeps a few memory mappings; the whole suite compiles thousands and
    # would pass the kernel's per-process limit (vm.max_map_count, 65530 by default), which crashes the
    # process. Drop each module's programs when it is done.
    yield
    jax.clear_caches()
    gc.collect()


def random_instance(rng: np.random.Generator, F: int = 24, L: int = 8, H: int = 4, *, caps: float = 0.3,
                    empty: float = 0.0):
    """A random max-min instance with fixed shapes (so one compilation serves every draw).

    Routes have 1..H distinct links (-1 padded); capacities U(1, 10); weights U(0.2, 3);
    a fraction ``caps`` of flows get a finite rate_limit; a fraction ``empty`` get an empty route
    (those always get a finite rate_limit).
    """
    routes = np.full((F, H), -1, dtype=np.int32)
    for f in range(F):
        n = rng.integers(1, H + 1)
        routes[f, :n] = rng.choice(L, n, replace=False)
    capacity = rng.uniform(1, 10, L)
    weights = rng.uniform(0.2, 3, F)
    limit = np.where(rng.random(F) < caps, rng.uniform(0.1, 5, F), np.inf)
    no_route = rng.random(F) < empty
    routes[no_route] = -1
    limit[no_route] = rng.uniform(0.1, 5, no_route.sum())
    return routes, capacity, weights, limit


@pytest.fixture
def rng():
    return np.random.default_rng(12345)
