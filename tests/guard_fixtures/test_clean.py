"""Every way a test may check something: none of these is a finding."""

import numpy as np
import pytest
from jax.test_util import check_grads


def _close(a, b):
    np.testing.assert_allclose(a, b)


def _twice(a):
    _close(a, a)  # the check is two helpers down


def test_assert():
    assert 1 + 1 == 2


def test_assert_with_approx():
    assert 0.1 + 0.2 == pytest.approx(0.3)


def test_helper_in_this_module():
    _twice(np.ones(3))


def test_helper_in_conftest():
    check_positive(1)  # defined in conftest.py


def test_raises():
    with pytest.raises(ZeroDivisionError):
        print(1 / 0)


def test_skip():
    pytest.skip("nothing to check here")


def test_gradients():
    check_grads(np.sin, (np.ones(2),), order=1)


class TestGrouped:
    def test_method(self):
        assert [] == []
