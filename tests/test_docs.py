"""Every docstring example in the package runs and prints what it says (doctest), and the public
modules have examples."""

import doctest
import importlib
import pkgutil

import pytest

import flowmodel

MODULES = sorted(m.name for m in pkgutil.walk_packages(flowmodel.__path__, "flowmodel."))
# where a user starts: each of these must show at least one runnable example
EXAMPLES_REQUIRED = {
    "flowmodel.kernels.maxmin", "flowmodel.kernels.fluid", "flowmodel.kernels.smooth", "flowmodel.kernels.congestion",
    "flowmodel.kernels._incidence", "flowmodel.fabric",
    "flowmodel.routing", "flowmodel.traffic", "flowmodel.steptime", "flowmodel.optimize._search",
    "flowmodel.optimize._mlu", "flowmodel.sweep", "flowmodel.resilience", "flowmodel.config",
}


def test_required_modules_exist():
    assert EXAMPLES_REQUIRED <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    examples = sum(len(t.examples) for t in doctest.DocTestFinder().find(module))
    if name in EXAMPLES_REQUIRED:
        assert examples > 0, f"{name} has no docstring example"
    if examples == 0:
        pytest.skip(f"{name} has no docstring examples")
    failed, attempted = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert failed == 0 and attempted == examples, (name, failed, attempted, examples)
