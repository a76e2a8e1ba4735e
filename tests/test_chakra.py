"""Chakra execution traces: the reader on ASTRA-sim's traces, closed forms, the round trip of an exported
training step, gradients, bad input, and the trace / export-trace commands."""

import glob
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flowmodel import cli
from flowmodel import fabric as fb
from flowmodel import routing as rt
from flowmodel import scenario as sc
from flowmodel import steptime as st
from flowmodel import trace as fmtrace
from flowmodel import traffic as tr
from flowmodel.traffic import _chakra as chakra

ASTRA = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "astra")
needs_astra = pytest.mark.skipif(not os.path.isdir(ASTRA), reason="../shared/astra (ASTRA-sim's example traces and "
                                 "networks) is not on this machine")
MiB = 1048576
GB = fb.ASTRA_GB  # an ASTRA-sim network file's GB: 2^30 bytes


def _prefixes():
    if not os.path.isdir(ASTRA):
        return []
    return sorted({p.rsplit(".", 2)[0] for p in glob.glob(os.path.join(ASTRA, "**", "*.et"), recursive=True)})


def _astra(name):
    return fmtrace.Fabric.from_astra(os.path.join(ASTRA, "network", f"{name}.yml"))


def _makespan(prefix, fabric, **kw):
    return fmtrace.run(prefix, fabric, **kw)["makespan_s"]


@needs_astra
@pytest.mark.parametrize("prefix", _prefixes(), ids=lambda p: os.path.relpath(p, ASTRA))
def test_every_shared_trace_parses(prefix):
    trace = chakra.read_trace(prefix)
    ranks = int(prefix.split("npus")[0].rsplit("/", 1)[-1]) if "npus_" in prefix else 64
    assert trace.num_ranks == ranks
    assert trace.num_nodes >= trace.num_ranks
    for rank in trace.ranks:
        assert np.all(rank.duration >= 0) and np.all(rank.dep_ptr[1:] >= rank.dep_ptr[:-1])


@needs_astra
@pytest.mark.parametrize("delay_ns", [0.0, 10.0])
def test_ring_all_reduce_on_a_switch_is_the_nccl_closed_form(tmp_path, delay_ns):
    system = tmp_path / "system.json"
    system.write_text(json.dumps({"all-reduce-implementation": ["ring"], "endpoint-delay": delay_ns}))
    n, S, B = 16, MiB, 50 * GB
    got = _makespan(os.path.join(ASTRA, "microbenchmarks/all_reduce/16npus_1MB/all_reduce"), _astra("Switch_16npus"),
                    system=str(system))
    route = 2 * 500e-9  # NPU -> switch -> NPU
    expected = 2 * (n - 1) / n * S / B + 2 * (n - 1) * (route + delay_ns * 1e-9)
    assert got == pytest.approx(expected, rel=1e-9)


@needs_astra
@pytest.mark.parametrize("kind,factor,steps", [("all_gather", lambda n: (n - 1) / n, lambda n: n - 1),
                                               ("reduce_scatter", lambda n: (n - 1) / n, lambda n: n - 1),
                                               ("all_to_all", lambda n: (n - 1) / n, lambda n: 1)])
def test_microbenchmarks_on_a_switch_are_closed_forms(kind, factor, steps):
    for n in (4, 8, 16):
        got = _makespan(os.path.join(ASTRA, f"microbenchmarks/{kind}/{n}npus_1MB/{kind}"), _astra(f"Switch_{n}npus"))
        assert got == pytest.approx(factor(n) * MiB / (50 * GB) + steps(n) * 1e-6, rel=1e-9)


@needs_astra
def test_astra_chunking_explains_its_ring_figures():
    """ASTRA-sim 2.x analytical, 1 MB on a 50 GB/s (2^30 bytes a GB), 500 ns Ring, Ring_4chunks.json:
    the same bandwidth term, the latency paid per chunk (4) and step, the reductions' memory time at
    local-mem-bw; within 0.05% of its reported cycles (it truncates every message's time to a whole ns
    and pays the endpoint delay once more as each chunk's phase starts). Without the reductions' memory
    time the all-reduces come out 1.8-3.4% short, the reduce-scatters 3.6-6.6%."""
    system = os.path.join(ASTRA, "system", "Ring_4chunks.json")
    astra = {("all_reduce", 4): 43_000, ("all_reduce", 8): 64_440, ("all_reduce", 16): 99_640,
             ("reduce_scatter", 4): 22_240, ("reduce_scatter", 8): 33_080, ("reduce_scatter", 16): 50_740}
    for (kind, n), ns in astra.items():
        got = _makespan(os.path.join(ASTRA, f"microbenchmarks/{kind}/{n}npus_1MB/{kind}"), _astra(f"Ring_{n}npus"),
                        system=system)
        assert got == pytest.approx(ns * 1e-9, rel=5e-4), (kind, n)


@needs_astra
def test_node_type_samples():
    base = os.path.join(ASTRA, "generated", "node_types_64npus")
    fabric = _astra("Switch_64")
    # one rank, one compute engine: two 5 us nodes take 10 us whether or not one depends on the other
    assert _makespan(f"{base}/one_comp_node", fabric) == pytest.approx(5e-6)
    assert _makespan(f"{base}/two_comp_nodes_dependent", fabric) == pytest.approx(10e-6)
    assert _makespan(f"{base}/two_comp_nodes_independent", fabric) == pytest.approx(10e-6)
    for name in ("one_metadata_node_all_types", "one_remote_mem_load_node", "one_remote_mem_store_node",
                 "one_comm_send_node", "one_comm_recv_node", "BARRIER"):  # no time; a peerless send is a no-op
        assert _makespan(f"{base}/{name}", fabric) == 0.0, name
    n, S = 64, 64 * MiB
    assert _makespan(f"{base}/ALL_REDUCE", fabric) == pytest.approx(2 * (n - 1) / n * S / (50 * GB)
                                                                    + 2 * (n - 1) * 1e-6)
    assert _makespan(f"{base}/BROADCAST", fabric) == pytest.approx(S / (50 * GB) + (n - 1) * 1e-6)


def _job_model(tp, pp, dp, cp=1, v=1, algorithm="ring", experts=0, ep=1, dense_layers=0, recompute="none"):
    site = fb.Clos(tiers=2, gpus_per_leaf=8, leaves_per_pod=2 if tp * pp * dp * cp <= 16 else 4, spines_per_pod=2,
                   oversubscription=2.0)
    model = tr.Model("small", layers=4, hidden=512, ffn_hidden=2048, heads=8, kv_heads=8, vocab=8000, seq_len=1024,
                     **({"experts": experts, "top_k": 2, "dense_layers": dense_layers} if experts else {}))
    job = tr.Training(model, tr.Parallelism(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, virtual_stages=v),
                      global_batch=4 * pp * dp, micro_batch=1, algorithm=algorithm, recompute=recompute)
    fleet = fb.Fleet(sites=(fb.Site("a", scale_up=fb.ScaleUp(size=8, bandwidth=400e9, latency=1e-6),
                                    scale_out=site),))
    return sc.prepare(sc.Scenario("t", fleet, training=(job,)))


ROUND_TRIPS = {"tp4 pp2 dp4": dict(tp=4, pp=2, dp=4), "tp2 cp2 pp2 dp2 tree": dict(tp=2, cp=2, pp=2, dp=2,
                                                                                   algorithm="tree"),
               "pp2 v2 dp4": dict(tp=2, pp=2, dp=4, v=2), "moe ep4": dict(tp=2, pp=1, dp=8, experts=8, ep=4),
               # a dense first layer, dense and expert reductions of different group sizes, recomputation
               "moe dense-first ep2 cp2 pp2 recompute": dict(tp=2, cp=2, pp=2, dp=2, experts=4, ep=2, dense_layers=1,
                                                             recompute="full")}


@pytest.mark.parametrize("name", list(ROUND_TRIPS))
def test_export_reads_back_to_the_step_time(tmp_path, name):
    model = _job_model(**ROUND_TRIPS[name])
    plan = model.plans[0]
    expected = float(st.step_time(plan, model.network, model.options).step_time)
    summary = st.export_training(plan, str(tmp_path / "job"))
    assert summary["ranks"] == plan.job.parallelism.size
    trace = chakra.read_trace(str(tmp_path / "job"))
    system = st.read_system(str(tmp_path / "job.system.json"))
    assert system.channels is None  # the job runs NCCL-style channels: the export says so
    prepared = st.prepare_trace(trace, model.router, gpus=summary["gpus"], algorithms=dict(system.algorithms),
                                channels=system.channels)
    result = st.simulate_trace(prepared, model.network.capacity, model.network.latency, model.options)
    assert float(result.makespan) == pytest.approx(expected, rel=1e-9)
    assert float(np.max(result.finish)) == pytest.approx(expected, rel=1e-9)
    path = result.critical_path
    assert path[0]["start_s"] == 0.0 and path[-1]["end_s"] == pytest.approx(expected, rel=1e-12)
    assert all(a["end_s"] <= b["start_s"] + 1e-15 for a, b in zip(path, path[1:]))


def test_makespan_gradient_matches_finite_differences_and_the_step_time(tmp_path):
    model = _job_model(tp=4, pp=2, dp=4)
    plan, net = model.plans[0], model.network
    summary = st.export_training(plan, str(tmp_path / "job"))
    prepared = st.prepare_trace(chakra.read_trace(str(tmp_path / "job")), model.router, gpus=summary["gpus"])
    scale_up = jnp.asarray(np.asarray(model.info.tier) == fb.Tier.SCALE_UP, net.capacity.dtype)

    def trace_time(a):  # scale-out capacity scaled by a
        cap = net.capacity * (scale_up + (1 - scale_up) * a)
        return st.trace_makespan(prepared, cap, net.latency)

    def step(a):
        cap = net.capacity * (scale_up + (1 - scale_up) * a)
        return st.step_time(plan, net.__class__(**{**vars(net), "capacity": cap}), model.options).step_time

    g = float(jax.grad(trace_time)(1.0))
    h = 1e-6
    fd = (float(trace_time(1.0 + h)) - float(trace_time(1.0 - h))) / (2 * h)
    assert g < 0 and g == pytest.approx(fd, rel=1e-5)
    assert g == pytest.approx(float(jax.grad(step)(1.0)), rel=1e-6)
    # jit and vmap give the same numbers
    a = jnp.array([0.5, 1.0, 2.0])
    assert np.allclose(jax.jit(jax.vmap(trace_time))(a), [float(trace_time(x)) for x in a], rtol=1e-12)


def _write(path, nodes, metadata=True):
    """A rank file from (type, name, deps, attrs, duration) tuples."""
    w = chakra.TraceWriter(path)
    for node_type, name, deps, attrs, duration in nodes:
        w.add(node_type, name, deps=deps, attrs=attrs, duration=duration)
    w.close()


def _two_ranks(tmp_path, rank0=None, rank1=None):
    coll = {"comm_type": 0, "comm_size": MiB}
    default = [(chakra.COMP, "c", [], None, 1e-3), (chakra.COLL, "ar", [0], coll, 0.0), (chakra.COMP, "d", [1], None,
                                                                                        2e-3)]
    _write(str(tmp_path / "t.0.et"), rank0 or default)
    _write(str(tmp_path / "t.1.et"), rank1 or default)
    return str(tmp_path / "t")


def _fabric():
    fleet = fb.Fleet(sites=(fb.Site("a", scale_up=fb.ScaleUp(size=2, bandwidth=100e9, latency=0.0)),))
    network, info = fb.compile_fabric(fb.build(fleet))
    return fmtrace.Fabric("two", network, info, rt.Router(info))


def test_a_handmade_trace_times_and_critical_path(tmp_path):
    coll = {"comm_type": 0, "comm_size": MiB}
    slow = [(chakra.COMP, "c", [], None, 3e-3), (chakra.COLL, "ar", [0], coll, 0.0),
            (chakra.COMP, "d", [1], None, 2e-3)]
    prefix = _two_ranks(tmp_path, rank0=slow)
    out = fmtrace.run(prefix, _fabric())
    ar = MiB / 100e9  # ring all-reduce over 2 ranks: 2(n-1)/n = 1
    assert out["makespan_s"] == pytest.approx(3e-3 + ar + 2e-3, rel=1e-12)
    assert out["finish_s"] == pytest.approx([3e-3 + ar + 2e-3] * 2, rel=1e-12)
    result = out["_result"]
    assert np.asarray(result.start)[4] == pytest.approx(3e-3)  # rank 1's all-reduce waits for rank 0
    assert [c["name"] for c in out["critical_path"]] == ["c", "ar", "d"]
    assert out["critical_path"][0]["rank"] == 0


def test_reductions_take_their_memory_time_at_local_mem_bw(tmp_path):
    """ASTRA-sim's local-mem-bw: every byte a rank reduces costs three memory passes, (1 - 1/n) S bytes
    for an all-reduce or reduce-scatter of S, in calls timed once (those that more communication
    follows) and in one timed by its start times (the last, a reduce-scatter); an all-gather reduces
    nothing."""
    ar, rs, ag = ({"comm_type": t, "comm_size": MiB} for t in (0, 7, 2))
    nodes = [(chakra.COLL, "ar1", [], ar, 0.0), (chakra.COLL, "ar2", [0], ar, 0.0), (chakra.COLL, "ag", [1], ag, 0.0),
             (chakra.COLL, "rs", [2], rs, 0.0)]
    prefix = _two_ranks(tmp_path, rank0=nodes, rank1=nodes)
    system = tmp_path / "system.json"
    system.write_text(json.dumps({"local-mem-bw": 50}))
    plain = fmtrace.run(prefix, _fabric())
    out = fmtrace.run(prefix, _fabric(), system=str(system))
    memory = 3 * (1 - 1 / 2) * MiB / 50e9  # per all-reduce or reduce-scatter of MiB over two ranks
    assert out["makespan_s"] == pytest.approx(plain["makespan_s"] + 3 * memory, rel=1e-12)
    assert plain["makespan_s"] == pytest.approx((2 + 0.5 + 0.5) * MiB / 100e9, rel=1e-12)
    assert out["system"]["reduce_bandwidth"] == 50e9 and "local-mem-bw" not in out["system"]["ignored"]
    timing = {c["name"].split()[0]: c["timing"] for c in out["classes"]}
    assert timing["all_reduce"] == "all groups at once" and timing["reduce_scatter"].startswith("start times")
    for value in ("0", "-1", "true", '"fast"'):
        system.write_text('{"local-mem-bw": %s}' % value)
        with pytest.raises(tr.TraceError, match=r"local-mem-bw: must be > 0 \(GB/s\), got"):
            fmtrace.run(prefix, _fabric(), system=str(system))


BAD = {
    "missing rank file": ("missing", r"t\.1\.et: missing"),
    "truncated": ("truncate", r"says \d+ bytes, but only \d+ remain"),
    "length prefix past the end": ("prefix", r"truncated length prefix|says \d+ bytes"),
    "unknown node type": ("type", r"rank 0, node 0: node type unknown type 42"),
    "size disagrees": ("size", r"rank 1, node 1: this collective is all_reduce of 2097152 bytes, but .*rank 0, node 1"),
    "type disagrees": ("ctype", r"rank 1, node 1: this collective is all_gather"),
    "missing dependency": ("dep", r"rank 0, node 1: depends on node 7, which the file does not have"),
    "unmatched collective": ("count", r"is never reached by rank 0"),
    "unmatched send": ("send", r"no matching recv for \(src 0, dst 1, tag 3\)"),
    "deadlock": ("cycle", r"deadlocks"),
    "negative duration": ("negdur", r"rank 0, node 0: duration must be >= 0 and finite seconds, got -1.0"),
    "malformed attribute": ("scalar_group", r"rank 1, node 1: a malformed attribute"),
    "missing comm-group file": ("groups", r"nope\.json: cannot read the comm-group file"),
    "prefix in a missing folder": ("folder", r"cannot list"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_traces_name_file_rank_and_node(tmp_path, case):
    what, message = BAD[case]
    coll = {"comm_type": 0, "comm_size": MiB}
    base = [(chakra.COMP, "c", [], None, 1e-3), (chakra.COLL, "ar", [0], coll, 0.0)]
    prefix = _two_ranks(tmp_path, base, base)
    path0 = tmp_path / "t.0.et"
    if what == "missing":
        _write(str(tmp_path / "t.2.et"), base)
        os.remove(tmp_path / "t.1.et")
    elif what in ("truncate", "prefix"):
        data = path0.read_bytes()
        path0.write_bytes(data[:-3] if what == "truncate" else data + b"\xff")
    elif what == "type":
        w = chakra.TraceWriter(str(path0))
        w._write(chakra.Node(id=0, name="x", type=42))
        w.close()
    elif what in ("size", "ctype"):
        other = {"comm_type": 2 if what == "ctype" else 0, "comm_size": 2 * MiB}
        _two_ranks(tmp_path, base, [base[0], (chakra.COLL, "ar", [0], other, 0.0)])
    elif what == "dep":
        _two_ranks(tmp_path, [base[0], (chakra.COLL, "ar", [7], coll, 0.0)], base)
    elif what == "count":
        _two_ranks(tmp_path, base, base + [(chakra.COLL, "ar2", [1], coll, 0.0)])
    elif what == "send":
        send = {"comm_src": 0, "comm_dst": 1, "comm_tag": 3, "comm_size": 100}
        _two_ranks(tmp_path, base + [(chakra.SEND, "s", [1], send, 0.0)], base)
    elif what == "cycle":  # rank 0 sends only after the recv that waits for rank 1's send, and vice versa
        send = lambda a, b: {"comm_src": a, "comm_dst": b, "comm_tag": 0, "comm_size": 100}  # noqa: E731
        _two_ranks(tmp_path, [(chakra.RECV, "r", [], send(1, 0), 0.0), (chakra.SEND, "s", [0], send(0, 1), 0.0)],
                   [(chakra.RECV, "r", [], send(0, 1), 0.0), (chakra.SEND, "s", [0], send(1, 0), 0.0)])
    elif what == "negdur":
        _two_ranks(tmp_path, [(chakra.COMP, "c", [], {"duration_seconds": -1.0}, 0.0), base[1]], base)
    elif what == "scalar_group":
        _two_ranks(tmp_path, base, [base[0], (chakra.COLL, "ar", [0], {**coll, "comm_group": 3}, 0.0)])
    kw = {"comm_groups": str(tmp_path / "nope.json")} if what == "groups" else {}
    if what == "folder":
        prefix = str(tmp_path / "no" / "t")
    with pytest.raises(chakra.TraceError, match=message):
        fmtrace.run(prefix, _fabric(), **kw)


def test_a_rank_without_nodes_finishes_at_zero(tmp_path):
    coll = {"comm_type": 0, "comm_size": MiB, "comm_group": [0, 1]}
    for r in range(2):
        _write(str(tmp_path / f"t.{r}.et"), [(chakra.COLL, "ar", [], coll, 0.0)])
    _write(str(tmp_path / "t.2.et"), [])
    out = fmtrace.run(str(tmp_path / "t"), _fabric())
    assert out["finish_s"][2] == 0.0 and out["makespan_s"] == pytest.approx(MiB / 100e9)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_gradient_through_tied_chains_in_either_precision(tmp_path, dtype):
    """Two all-reduces in a chain after a long compute node: every predecessor tie is exact, so the
    gradient is the whole makespan's (d/da of T/a at a = 1 is -T_comm) in float32 too."""
    coll = {"comm_type": 0, "comm_size": MiB}
    nodes = [(chakra.COMP, "c", [], None, 100.0), (chakra.COLL, "a", [0], coll, 0.0),
             (chakra.COLL, "b", [1], coll, 0.0)]
    prefix = _two_ranks(tmp_path, nodes, nodes)
    fabric = _fabric()
    prepared = st.prepare_trace(chakra.read_trace(prefix), fabric.router)
    cap, lat = fabric.network.capacity.astype(dtype), fabric.network.latency.astype(dtype)
    g = jax.grad(lambda a: st.trace_makespan(prepared, cap * a, lat))(jnp.asarray(1.0, dtype))
    assert g.dtype == dtype
    assert float(g) == pytest.approx(-2 * MiB / 100e9, rel=1e-5)


def test_a_trace_larger_than_the_fabric_is_refused(tmp_path):
    coll = {"comm_type": 0, "comm_size": MiB}
    fabric = _fabric()
    n = fabric.info.num_gpus + 1
    for r in range(n):
        _write(str(tmp_path / f"t.{r}.et"), [(chakra.COLL, "ar", [], coll, 0.0)])
    with pytest.raises(chakra.TraceError, match=f"the trace has {n} ranks, but the fabric has {n - 1} GPUs"):
        fmtrace.run(str(tmp_path / "t"), fabric)


@needs_astra
def test_trace_command(tmp_path, capsys):
    prefix = os.path.join(ASTRA, "microbenchmarks/all_reduce/8npus_1MB/all_reduce")
    network = os.path.join(ASTRA, "network", "Ring_8npus.yml")
    out = tmp_path / "o"
    assert cli.main(["trace", prefix, "--network", network, "--system",
                     os.path.join(ASTRA, "system", "Ring_4chunks.json"), "--out", str(out), "--quiet"]) == 0
    result = json.loads((out / "trace.json").read_text())
    bandwidth = 2 * 7 / 8 * MiB / (50 * GB)  # 50 GB/s of 2^30 bytes
    memory = 3 * 7 / 8 * MiB / 1600e9  # local-mem-bw 1600 GB/s, three passes over the bytes reduced
    assert result["makespan_s"] == pytest.approx(bandwidth + 4 * 14 * 510e-9 + memory, rel=1e-9)
    assert len(result["finish_s"]) == 8 and "scheduling-policy" in result["system"]["ignored"]
    assert (out / "trace_timeline.png").stat().st_size > 0
    assert len((out / "trace_nodes.csv").read_text().splitlines()) == 9
    assert cli.main(["trace", prefix + "x", "--network", network, "--out", str(tmp_path / "p")]) == 2
    assert "no trace files" in capsys.readouterr().err and not (tmp_path / "p").exists()


def test_export_trace_command_round_trip(tmp_path):
    config = tmp_path / "small.yaml"
    config.write_text("""
name: small
fabric:
  sites:
    - name: a
      scale_up: {size: 8, bandwidth: 400GB/s, latency: 1us}
      scale_out: {tiers: 2, gpus_per_leaf: 8, leaves_per_pod: 4, spines_per_pod: 2, nic_bandwidth: 400Gbps}
workloads:
  training:
    - name: job one
      model: {name: m, layers: 4, hidden: 512, ffn_hidden: 2048, heads: 8, kv_heads: 8, vocab: 8000, seq_len: 1024}
      parallelism: {tp: 4, pp: 2, dp: 2}
      global_batch: 16
      first_rank: 16
""")
    out = tmp_path / "exp"
    assert cli.main(["export-trace", str(config), "--out", str(out), "--quiet"]) == 0
    exported = json.loads((out / "export-trace.json").read_text())["jobs"]["job one"]
    assert exported["ranks"] == 16 and os.path.exists(out / "job_one.15.et") and exported["gpus"][0] == 16
    assert cli.main(["trace", str(out / "job_one"), "--network", str(config), "--system",
                     str(out / "job_one.system.json"), "--out", str(tmp_path / "run"), "--quiet"]) == 0
    result = json.loads((tmp_path / "run" / "trace.json").read_text())
    assert result["makespan_s"] == pytest.approx(exported["step_time_s"], rel=1e-9)


@needs_astra
def test_a_two_dimensional_all_reduce_runs_per_dimension_as_its_system_file_says():
    """ASTRA-sim's 64-NPU 64 MiB all-reduce on SwRing_8x8_hgx with sys_2d_ring_ring.json: a ring per
    dimension (reduce-scatter on the 400 GB/s switches, all-reduce of the eighth left on the 50 GB/s
    rings, all-gather back), 4 chunks paying each step's route latency and 10 ns endpoint delay, and
    the reductions' memory time at local-mem-bw."""
    prefix = os.path.join(ASTRA, "generated", "all_reduce", "64npus_64MB", "all_reduce")
    fabric = _astra("SwRing_8x8_hgx")
    result = fmtrace.run(prefix, fabric, system=os.path.join(ASTRA, "system", "sys_2d_ring_ring.json"))
    S = 64 * MiB
    switch = 7 / 8 * S / (400 * GB) + 4 * 7 * (2 * 936.25e-9 + 10e-9)
    ring = 7 / 8 * S / 8 / (50 * GB) + 4 * 7 * (500e-9 + 10e-9)
    reduce = 3 * (1 - 1 / 64) * S / 1600e9  # local-mem-bw: three memory passes over every byte reduced
    assert result["makespan_s"] == pytest.approx(2 * (switch + ring) + reduce, rel=1e-9)
    assert result["system"]["per_dimension"] == {"all_reduce": ["ring", "ring"], "all_gather": ["ring", "ring"],
                                                 "reduce_scatter": ["ring", "ring"]}
    assert _makespan(prefix, fabric) > 3 * result["makespan_s"]  # one flat ring over all 64 NPUs (3.4x)
