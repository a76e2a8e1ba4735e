"""Importing an ASTRA-sim analytical network.yml: structure, routes, and collectives on it."""

import numpy as np
import pytest

from flowmodel import fabric as fb
from flowmodel import routing as rt
from flowmodel import steptime as st
from flowmodel import traffic as tr

# ASTRA-sim's documented example: 2 x 8 x 4 = 64 NPUs
NETWORK_YML = """
topology: [ Ring, FullyConnected, Switch ]
npus_count: [ 2, 8, 4 ]
bandwidth: [ 200.0, 100.0, 50.0 ]  # GB/s
latency: [ 50.0, 500.0, 2000.0 ]  # ns
"""


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    path = tmp_path_factory.mktemp("astra") / "network.yml"
    path.write_text(NETWORK_YML)
    g = fb.from_astra(str(path))
    net, info = fb.compile_fabric(g)
    return g, net, info, rt.AstraRouter(info, str(path))


def test_structure(imported):
    g, net, info, _ = imported
    assert info.num_gpus == 64
    assert len(info.links_where(tier="dim0")) == 32 * 2  # a 2-ring is one cable per group
    assert len(info.links_where(tier="dim1")) == 8 * 8 * 7  # full mesh of 8, 8 groups
    assert len(info.links_where(tier="dim2")) == 16 * 4 * 2  # 16 switches, a cable per NPU
    assert sum(1 for _, d in g.nodes(data=True) if d["kind"] == "switch") == 16
    assert set(np.asarray(net.capacity)[info.links_where(tier="dim1")]) == {100e9}
    assert info.gpu_domain[:4].tolist() == [0, 0, 1, 1]  # dimension 0 is the scale-up domain


def test_dimension_order_routes(imported):
    _, _, info, router = imported
    names = lambda p: [info.link_name(x) for x in p]  # noqa: E731
    assert names(router.path(0, 1)) == ["npu0->npu1"]
    assert names(router.path(0, 2 * 5)) == ["npu0->npu10"]  # dim 1: direct
    assert names(router.path(0, 16 * 3)) == ["npu0->dim2/switch0", "dim2/switch0->npu48"]
    # npu1 = (1, 0, 0) -> npu38 = (0, 3, 2): dimension 0, then 1, then 2
    assert names(router.path(1, 2 * 3 + 16 * 2)) == ["npu1->npu0", "npu0->npu6", "npu6->dim2/switch6",
                                                     "dim2/switch6->npu38"]


@pytest.mark.parametrize("ranks, bandwidth, hop", [
    ([2 * c for c in range(8)], 100e9, 500e-9),  # FullyConnected: one link per ring step
    ([16 * c for c in range(4)], 50e9, 2 * 2000e-9),  # Switch: up and down
], ids=["dim1", "dim2"])
def test_ring_all_reduce_closed_form(imported, ranks, bandwidth, hop):
    _, net, info, router = imported
    n, S = len(ranks), 1e9
    coll = tr.all_reduce(np.array(ranks), S)
    seconds = sum(float(st.phase_time(st.route_phase(ph, router), net.capacity, net.latency)) for ph in coll.phases)
    assert seconds == pytest.approx(S / bandwidth * 2 * (n - 1) / n + 2 * (n - 1) * hop, rel=1e-9)


@pytest.mark.parametrize("spec, match", [
    ({"topology": ["Ring"], "npus_count": [4], "bandwidth": [1.0]}, r"astra network.latency: is required"),
    ({"topology": ["Torus"], "npus_count": [4], "bandwidth": [1.0], "latency": [1.0]}, "unknown 'Torus'"),
    ({"topology": ["Ring"], "npus_count": [0], "bandwidth": [1.0], "latency": [1.0]}, r"npus_count\[0\]"),
    ({"topology": ["Ring", "Switch"], "npus_count": [4], "bandwidth": [1.0], "latency": [1.0]}, "one value per"),
])
def test_bad_networks(spec, match):
    with pytest.raises(ValueError, match=match):
        fb.from_astra(spec)
