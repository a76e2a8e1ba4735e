"""Importing an ASTRA-sim analytical network.yml: structure, routes, and collectives on it."""

import os

import numpy as np
import pytest

from flowmodel import fabric as fb
from flowmodel import routing as rt
from flowmodel import steptime as st
from flowmodel import traffic as tr

GB = fb.ASTRA_GB  # ASTRA-sim's GB: 2^30 bytes

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
    assert set(np.asarray(net.capacity)[info.links_where(tier="dim1")]) == {100 * GB}
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
    ([2 * c for c in range(8)], 100 * GB, 500e-9),  # FullyConnected: one link per ring step
    ([16 * c for c in range(4)], 50 * GB, 2 * 2000e-9),  # Switch: up and down
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


SWITCH_RING = {"topology": ["Switch", "Ring"], "npus_count": [8, 8], "bandwidth": [400.0, 50.0],
               "latency": [936.25, 500.0]}  # ASTRA-sim's SwRing_8x8_hgx.yml


def _per_dimension_time(kind, S, dims=(8, 8), impls=("ring", "ring")):
    net, info = fb.compile_fabric(fb.from_astra(SWITCH_RING))
    router = rt.AstraRouter(info, SWITCH_RING)
    coll = tr.per_dimension(kind, np.arange(64)[None], S, dims, impls)
    return coll, sum(float(st.phase_time(st.route_phase(ph, router), net.capacity, net.latency))
                     for ph in coll.phases)


@pytest.mark.parametrize("kind, directions", [("all_reduce", 2), ("reduce_scatter", 1), ("all_gather", 1)])
def test_per_dimension_collectives_on_a_switch_by_ring_network_closed_form(kind, directions):
    S = 64 * 2**20
    coll, seconds = _per_dimension_time(kind, S)
    # dimension 0 (Switch, 400 GB/s, two 936.25 ns hops a step) on all of S; dimension 1 (Ring, 50 GB/s,
    # one 500 ns hop) on the S / 8 left after it; each moves 7/8 of what it sees per direction
    switch = 7 / 8 * S / (400 * GB) + 7 * 2 * 936.25e-9
    ring = 7 / 8 * (S / 8) / (50 * GB) + 7 * 500e-9
    assert seconds == pytest.approx(directions * (switch + ring), rel=1e-9)
    assert len(coll.phases) == 2 * directions
    # the ring's groups are the NPUs that differ in dimension 1 only: 0, 8, ..., 56
    ring_phase = coll.phases[0 if kind == "all_gather" else 1]  # an all-gather comes down the dimensions
    assert ring_phase.src[:3].tolist() == [0, 8, 16] and ring_phase.dst[:3].tolist() == [8, 16, 24]


def test_per_dimension_all_reduce_on_a_3d_network_closed_form():
    # the repo's 3-D input (experiments/benchmarks/astra_inputs): Switch 8 x Ring 4 x Switch 2 = 64 NPUs
    path = os.path.join(os.path.dirname(__file__), "..", "experiments", "benchmarks", "astra_inputs",
                        "SwRingSw_8x4x2_hgx.yml")
    spec = fb.read_astra(path)
    net, info = fb.compile_fabric(fb.from_astra(spec))
    router = rt.AstraRouter(info, spec)
    S = 64 * 2**20
    coll = tr.per_dimension("all_reduce", np.arange(64)[None], S, (8, 4, 2), ("ring",) * 3)
    seconds = sum(float(st.phase_time(st.route_phase(ph, router), net.capacity, net.latency)) for ph in coll.phases)
    # each dimension moves (n - 1) / n of what it sees, twice: S on the switch, S / 8 on the ring, S / 32 on the
    # second switch; a switch step crosses two links, a ring step one
    switch = 7 / 8 * S / (400 * GB) + 7 * 2 * 936.25e-9
    ring = 3 / 4 * (S / 8) / (50 * GB) + 3 * 500e-9
    top = 1 / 2 * (S / 32) / (50 * GB) + 1 * 2 * 500e-9
    assert seconds == pytest.approx(2 * (switch + ring + top), rel=1e-9)
    assert len(coll.phases) == 6


def test_per_dimension_direct_moves_the_same_bytes_in_one_step():
    S = 2**26
    ring, _ = _per_dimension_time("reduce_scatter", S)
    direct, _ = _per_dimension_time("reduce_scatter", S, impls=("direct", "ring"))
    assert direct.phases[0].steps == 1 and ring.phases[0].steps == 7
    assert direct.phases[0].bytes.sum() == pytest.approx(ring.phases[0].bytes.sum())


@pytest.mark.parametrize("dims, message", [((8, 4), "8 x 4 = 32 ranks, but the groups have 64"),
                                           ((8, 0), "one positive size per dimension")])
def test_per_dimension_refuses_a_layout_that_does_not_fit(dims, message):
    with pytest.raises(ValueError, match=message):
        tr.per_dimension("all_reduce", np.arange(64)[None], 1e6, dims)


def test_a_system_file_with_one_implementation_per_dimension_runs_them_per_dimension(tmp_path):
    path = tmp_path / "sys.json"
    path.write_text('{"all-reduce-implementation": ["ring", "direct"], "all-gather-implementation": ["ring"], '
                    '"all-to-all-implementation": ["ring", "ring"], "endpoint-delay": 10}')
    system = st.read_system(str(path))
    assert dict(system.dimensions) == {"all_reduce": ("ring", "direct")}  # all-to-all stays one collective
    assert any("dimension by dimension" in n for n in system.notes)


def test_nccl_channels_in_a_system_file(tmp_path):
    path = tmp_path / "sys.json"
    path.write_text('{"all-reduce-implementation": ["ring"]}')
    assert st.read_system(str(path)).channels == 1  # ASTRA-sim's own files: one ring, as ASTRA-sim runs it
    for value, want in (('"auto"', None), ("4", 4)):
        path.write_text('{"nccl-channels": %s}' % value)
        assert st.read_system(str(path)).channels == want
    for value in ('"many"', "0", "true"):
        path.write_text('{"nccl-channels": %s}' % value)
        with pytest.raises(tr.TraceError, match=r"nccl-channels: must be \"auto\" or an integer >= 1, got"):
            st.read_system(str(path))


def _astra_rules():
    import importlib.util

    path = os.path.join(os.path.dirname(__file__), "..", "experiments", "benchmarks", "astra_rules.py")
    spec = importlib.util.spec_from_file_location("astra_rules", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_astra_timing_rules_reproduce_its_published_figures_and_order_the_two_dimensional_schedules():
    """The benchmark's ASTRA-sim rules give its six published 1-D figures to the ns; on the 2-D 8x8 input
    the chunks pipelined across dimensions, as its code runs them, or one after another order as they
    must, and the serial figure is the per-dimension closed form with 4 chunks and the reductions'
    memory time (flowmodel's own run of the trace is checked against that closed form in
    test_chakra.py, with ASTRA-sim's traces) but for the per-message truncation and the endpoint delay
    at each phase's start."""
    rules = _astra_rules()
    for (kind, n), ns in rules.PUBLISHED.items():
        if kind == "all_reduce":
            got = rules.all_reduce_ns(2**20, (n,), ("Ring",), (50.0,), (500.0,))
        else:
            got = 4 * rules.ring_phase_ns("reduce_scatter", n, 2**20 // 4, 50.0, 500.0, 1)
        assert got == ns, (kind, n)
    net = (64 * 2**20, (8, 8), SWITCH_RING["topology"], SWITCH_RING["bandwidth"], SWITCH_RING["latency"])
    pipelined, as_run, serial = (rules.all_reduce_ns(*net, schedule=s) for s in ("pipelined", "as_run", "serial"))
    assert pipelined < as_run < serial
    # pipelined: dimension 0's queue is busy throughout, 4 x (reduce-scatter + all-gather there)
    assert pipelined == 4 * (rules.ring_phase_ns("reduce_scatter", 8, 2**24, 400.0, 936.25, 2)
                             + rules.ring_phase_ns("all_gather", 8, 2**24, 400.0, 936.25, 2))
    coll, seconds = _per_dimension_time("all_reduce", 64 * 2**20)
    chunks = 4  # the network's bandwidth and latency per chunk, plus the memory time of the reductions
    closed = seconds + (chunks - 1) * 2 * (7 * 2 * 936.25e-9 + 7 * 500e-9) + chunks * 4 * 7 * 10e-9 \
        + 3 * (1 - 1 / 64) * 64 * 2**20 / 1600e9
    assert closed * 1e9 == pytest.approx(serial, rel=2e-4)
    with pytest.raises(ValueError, match="schedule: as_run, pipelined or serial, got 'lifo'"):
        rules.all_reduce_ns(*net, schedule="lifo")
