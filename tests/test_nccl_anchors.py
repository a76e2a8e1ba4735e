"""Real-hardware anchor: flowmodel's ring all-reduce against a public nccl-tests per-size table on an
8-GPU NVLink4 node (experiments/validation/nccl_anchors.py; no network, no ns-3)."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "experiments", "validation"))

import nccl_anchors  # noqa: E402
import nccl_tests_data  # noqa: E402

# Sizes where NCCL moves from its low-latency protocols to Simple: an alpha-beta model misses there.
_SWITCH = (2**20, 16 * 2**20)


@pytest.fixture(scope="module")
def calibrated():
    return nccl_anchors.calibrate()


def test_fit_sees_only_the_fit_rows(calibrated):
    _, _, table = calibrated
    assert [r["fit"] for r in table] == [i in nccl_tests_data.FIT_ROWS for i in range(len(table))]
    assert 0 < sum(r["fit"] for r in table) < len(table)


def test_fitted_values_are_physical(calibrated):
    eff, lam, _ = calibrated
    assert 0.65 < eff < 0.85  # NCCL's protocol overhead on NVLink4 (~0.82 at peak, nccl-tests#212)
    assert 0.1e-6 < lam < 2e-6  # per-step software latency, around a microsecond


def test_held_out_error_within_reported_bounds(calibrated):
    _, _, table = calibrated
    held = [r for r in table if not r["fit"]]
    outside = [abs(r["error"]) for r in held if not _SWITCH[0] <= r["size"] <= _SWITCH[1]]
    assert max(outside) <= 0.08, outside  # README / BENCHMARKS: within 8% off the protocol switch
    assert max(abs(r["error"]) for r in held) <= 0.30  # and within 30% on every held-out size


def test_uncalibrated_model_is_the_line_rate(calibrated):
    _, _, table = calibrated
    big = table[-1]
    assert big["before"] == pytest.approx(450, rel=0.01)  # 1 GiB busbw: the NVLink4 line rate


def test_bad_efficiency_names_the_field():
    network, info, ranks = nccl_anchors.nvswitch_node()
    with pytest.raises(ValueError, match="efficiency"):
        nccl_anchors.ring_all_reduce_time(network, info, ranks, 2**20, efficiency=1.5)
    with pytest.raises(ValueError, match="fit_rows"):
        nccl_anchors.calibrate(fit_rows=(99,))
