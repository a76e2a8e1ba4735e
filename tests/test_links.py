"""The link view: per-link bytes and utilisation from the phases the evaluation timed, hot links,
utilisation by tier, flow-completion times; ``run --links`` and its files."""

import csv
import io
import json
import os
import re

import jax
import networkx as nx
import numpy as np
import pytest

import flowmodel as fm
from flowmodel import cli, config, links
from flowmodel import fabric as fb
from flowmodel import routing as rt
from flowmodel import scenario as sc
from flowmodel import steptime as st
from flowmodel import traffic as tr
from flowmodel.traffic._collectives import Phase

ROOT = os.path.join(os.path.dirname(__file__), "..")
pytestmark = pytest.mark.filterwarnings("ignore::flowmodel.scenario.ScenarioWarning")


def _load(name):
    return sc.prepare(config.load(os.path.join(ROOT, "configs", f"{name}.yaml")))


@pytest.fixture(scope="module")
def dsf():
    model = _load("dsf_vs_ecmp")
    fleet = model.evaluate()
    return model, fleet, model.links(fleet)


@pytest.fixture(scope="module")
def quickstart():
    model = _load("quickstart")
    fleet = model.evaluate()
    return model, fleet, model.links(fleet)


TINY = tr.Model("tiny", layers=8, hidden=1024, ffn_hidden=4096, heads=16, kv_heads=4, vocab=8000, seq_len=2048)


@pytest.fixture(scope="module")
def coupled():
    """Jobs a and b share spine-aggregation links (coupled), c is alone; plus a background stream."""
    clos = fb.Clos(tiers=3, gpus_per_leaf=8, leaves_per_pod=2, spines_per_pod=2, pods=2, aggs_per_plane=2,
                   oversubscription=(1.0, 4.0))
    su = fb.ScaleUp(size=4)
    fleet = fb.Fleet(sites=(fb.Site("a", scale_out=clos, scale_up=su), fb.Site("b", scale_out=clos, scale_up=su)),
                     long_haul=(fb.LongHaul("a", "b", capacity=200e9, length_km=10),))
    par = tr.Parallelism(tp=4, pp=1, dp=4)
    jobs = (tr.Training(TINY, par, global_batch=16, name="a", ranks=(*range(0, 8), *range(16, 24))),
            tr.Training(TINY, par, global_batch=16, name="b", ranks=(*range(8, 16), *range(24, 32))),
            tr.Training(TINY, par, global_batch=16, name="c", ranks=tuple(range(32, 48))))
    background = (tr.Background("storage", src=(0, 8), dst=(40, 48), rate=5e9),)
    model = sc.prepare(sc.Scenario("coupled", fleet, training=jobs, background=background))
    result = model.evaluate()
    return model, result, model.links(result)


def _route_hops(rp):
    return (np.asarray(rp.sub.routes) >= 0).sum(axis=1)


# ---- a closed form -------------------------------------------------------------------------------

def _bottleneck():
    """gpu0 and gpu1 send 4 and 8 bytes to gpu2 through sw; sw->gpu2 (4 B/s) is shared, the uplinks
    (10 B/s) are not."""
    g = nx.DiGraph()
    for i in range(3):
        g.add_node(f"gpu{i}", kind="gpu", rank=i)
    g.add_node("sw", kind="leaf")
    g.add_edge("gpu0", "sw", capacity=10.0, tier="nic")
    g.add_edge("gpu1", "sw", capacity=10.0, tier="nic")
    g.add_edge("sw", "gpu2", capacity=4.0, tier="leaf_spine")
    network, info = fb.compile_fabric(g)
    sub = rt.SubFlows(routes=np.array([[0, 2], [1, 2]], np.int32), parent=np.array([0, 1]), fraction=np.ones(2),
                      first=np.array([0, 1]), count=np.ones(2, np.int64), unreachable=np.zeros(0, np.int64))
    phase = Phase(src=np.array([0, 1]), dst=np.array([2, 2]), bytes=np.array([4.0, 8.0]), steps=1)
    return network, info, st.RoutedPhase(phase, sub, phase.bytes, "scale_out", num_links=3)


def test_two_flow_bottleneck_closed_form():
    network, info, rp = _bottleneck()
    load = links.replay_phase("w", "send", rp, 1.0, np.asarray(network.capacity), network.latency, st.EXACT)
    # 2 B/s each on sw->gpu2 until flow 0's 4 bytes are sent (t = 2); flow 1's last 4 bytes at 4 B/s (t = 3)
    np.testing.assert_allclose(load.finish_s, [2.0, 3.0], rtol=1e-12)
    assert load.duration_s == pytest.approx(3.0, rel=1e-12)
    np.testing.assert_allclose(load.bytes, [4.0, 8.0, 12.0], rtol=1e-12)
    np.testing.assert_allclose(load.peak_Bps, [2.0, 4.0, 4.0], rtol=1e-12)
    view = links.LinkView(info, np.asarray(network.capacity), np.zeros(3), {"w": 3.0}, (load,))
    hot = view.hot_links(3)
    assert [h["link"] for h in hot] == ["sw->gpu2", "gpu1->sw", "gpu0->sw"]
    assert hot[0]["peak_util"] == pytest.approx(1.0, rel=1e-12)  # (2 + 2) / 4, then 4 / 4
    assert hot[0]["mean_util"] == pytest.approx(12 / (4 * 3), rel=1e-12)
    np.testing.assert_allclose(view.peak_util, [2 / 10, 4 / 10, 1.0], rtol=1e-12)
    np.testing.assert_allclose(view.phase_mean_util(load), [4 / 30, 8 / 30, 1.0], rtol=1e-12)
    assert view.by_tier()["nic"] == pytest.approx({"links": 2, "used": 2, "mean_peak_util": 0.3, "max_peak_util": 0.4,
                                                   "mean_mean_util": 0.2, "max_mean_util": 8 / 30})
    assert view.fct() == {"w": {"send": {"flows": 2, "p50_s": pytest.approx(2.5), "p99_s": pytest.approx(2.99),
                                         "max_s": pytest.approx(3.0)}}}


def test_interval_loads_integrate_to_the_link_bytes_on_both_engines():
    rng = np.random.default_rng(0)
    F, L, H = 40, 12, 3
    routes = np.array([rng.choice(L, H, replace=False) for _ in range(F)], np.int32)
    routes[:, 1:][rng.random((F, H - 1)) < 0.3] = -1  # every flow keeps its first link
    sizes, capacity = rng.uniform(1, 10, F), rng.uniform(5, 20, L)
    starts = rng.uniform(0, 1, F)
    out = {}
    for engine in ("host", "xla"):
        _, events = fm.completion_events(routes, sizes, capacity, start_times=starts, engine=engine)
        out[engine] = fm.kernels.interval_loads(routes, capacity, events, engine=engine)
        np.testing.assert_allclose(out[engine].carried, fm.link_bytes(routes, sizes, L), rtol=1e-9)
        assert np.all(out[engine].peak <= capacity * (1 + 1e-12))
    np.testing.assert_allclose(out["host"].peak, out["xla"].peak, rtol=1e-9)


def test_interval_loads_refuse_traced_inputs():
    routes = np.array([[0]], np.int32)
    _, events = fm.completion_events(routes, [1.0], [1.0])
    with pytest.raises(ValueError, match="concrete"):
        jax.jit(lambda c: fm.kernels.interval_loads(routes, c, events).peak)(np.array([1.0]))


# ---- the view of shipped scenarios -----------------------------------------------------------------

def _check_bytes(model, view):
    """Per phase: sum over links of bytes = sum over flows of bytes x route length; per job, the step
    bytes are the model's (``steptime.step_bytes``)."""
    L = model.info.num_links
    for load in view.phases:
        plan = next((p for p in model.plans if p.job.name == load.workload), None)
        rp = st.routed_phases(plan)[load.phase] if plan else dict(model.transfers)[load.workload]
        flows = np.asarray(rp.sub.sizes(rp.sizes)) @ _route_hops(rp)
        assert load.bytes.sum() == pytest.approx(flows, rel=1e-12), load.label
    for plan in model.plans:
        own = sum((p.calls * p.bytes for p in view.phases if p.workload == plan.job.name), np.zeros(L))
        np.testing.assert_allclose(own, st.step_bytes(plan, L), rtol=1e-12, atol=1e-6)


def _check_utilisation(view):
    for values in [view.peak_util, view.mean_util] + [f(p) for p in view.phases
                                                       for f in (view.phase_mean_util, view.phase_peak_util)]:
        assert np.all(values >= 0) and np.all(values <= 1 + 1e-9), values.max()
    for tier, figures in view.by_tier().items():
        assert figures["max_peak_util"] <= 1 + 1e-9, tier
        assert figures["mean_mean_util"] <= figures["max_mean_util"], tier


def test_bytes_and_utilisation_on_dsf_vs_ecmp(dsf):
    model, _, view = dsf
    _check_bytes(model, view)
    _check_utilisation(view)
    assert {p.phase for p in view.phases} == {"tp_all_gather[0]", "tp_reduce_scatter[0]", "dp"}


def test_bytes_utilisation_and_timing_on_quickstart(quickstart):
    model, fleet, view = quickstart
    _check_bytes(model, view)
    _check_utilisation(view)
    _check_timing(model, fleet, view)


def test_coupled_jobs_and_background(coupled):
    model, fleet, view = coupled
    assert model.groups == ((0, 1), (2,))
    _check_bytes(model, view)
    _check_utilisation(view)
    _check_timing(model, fleet, view, rel=1e-5)  # coupled at the fixed point's tolerance
    np.testing.assert_array_equal(view.background_Bps, model.fixed_load)
    used = model.fixed_load > 0
    assert used.any() and np.all(view.peak_util[used] >= model.fixed_load[used] / view.capacity[used])
    crossing = dict(zip(*view.crossing()))
    assert set(crossing) >= {"a/dp_all_reduce", "b/dp_all_reduce", "c/dp_all_reduce"}
    assert np.any(crossing["a/dp_all_reduce"] & crossing["b/dp_all_reduce"])  # what couples them
    assert not np.any(crossing["a/dp_all_reduce"] & crossing["c/dp_all_reduce"])


def _check_timing(model, fleet, view, rel=1e-9, options=None):
    """Each collective's time in the step report is its replayed phases' fluid time plus the latency
    term: the view replays what the evaluation timed."""
    latency = np.asarray(model.network.latency)
    step_latency = (options or model.options).step_latency
    for plan in model.plans:
        step = fleet.steps[plan.job.name]
        report = step.collectives
        phases = st.routed_phases(plan)
        loads = {p.phase: p for p in view.phases if p.workload == plan.job.name}

        def seconds(name):
            rp = phases[name]
            hop = latency[np.asarray(rp.sub.routes)].sum(axis=1, where=np.asarray(rp.sub.routes) >= 0).max()
            begin = np.min(np.asarray(step.dp_starts)) if name == "dp" else 0.0  # a transport delays the first byte
            return loads[name].start_s - begin + loads[name].duration_s + rp.steps * (hop + step_latency)

        for kind in ("tp_all_gather", "tp_reduce_scatter", "dp_all_reduce"):
            names = [n for n in loads if links.collective_of(n) == kind]
            assert names, kind
            assert sum(seconds(n) for n in names) == pytest.approx(float(report[kind]["seconds"]), rel=rel), kind
        if "pp_send_recv" in report:
            per_rank = max(seconds(n) for n in loads if n.startswith("pp_forward["))
            assert per_rank == pytest.approx(float(report["pp_send_recv"]["seconds"]), rel=rel)


def test_transport_and_window_are_replayed(dsf):
    model = dsf[0]
    options = st.Options(step_latency=2e-6, transport="dctcp", congestion=st.Congestion(window=4e6))
    fleet = model.evaluate(options=options)
    view = model.links(fleet, options=options)
    _check_utilisation(view)
    _check_timing(model, fleet, view, options=options)
    # the profile's start delay, on the phases that reach the scale-out fabric (NVLink runs no TCP)
    tiers = view.info.tier
    packet = [bool(p.bytes[tiers != "scale_up"].any()) for p in view.phases]
    assert any(packet) and not all(packet)
    assert all((p.start_s > 0) == on for p, on in zip(view.phases, packet))
    plain = dsf[2]
    assert max(p.duration_s for p in view.phases) > max(p.duration_s for p in plain.phases)


def test_fct_percentiles_are_numpy_percentiles_of_the_kernel_finish_times(dsf):
    model, _, view = dsf
    plan = model.plans[0]
    rp = st.routed_phases(plan)["tp_all_gather[0]"]
    sizes, cap, weights, limit, _ = st.fluid_inputs(rp, model.network.capacity, model.network.latency)
    finish = np.asarray(rp.sub.flow_finish(fm.completion_times(rp.sub.routes, sizes, cap, weights=weights,
                                                               rate_limit=limit)))
    figures = view.fct()["dp-heavy"]["tp_all_gather"]
    p50, p99 = np.percentile(finish, [50, 99])
    assert figures == {"flows": finish.size, "p50_s": pytest.approx(p50, rel=1e-12),
                       "p99_s": pytest.approx(p99, rel=1e-12), "max_s": pytest.approx(finish.max(), rel=1e-12)}
    dp = next(p for p in view.phases if p.phase == "dp")  # DP flows start at their stage's last backward
    starts = np.asarray(fleet_dp_starts(model))[plan.dp_stage]
    np.testing.assert_allclose(dp.fct_s, dp.finish_s - starts, rtol=1e-12)
    got = view.fct()["dp-heavy"]["dp_all_reduce"]
    assert got["p99_s"] == pytest.approx(np.percentile(dp.fct_s, 99), rel=1e-12)


def fleet_dp_starts(model):
    return model.evaluate().steps[model.plans[0].job.name].dp_starts


def test_hot_links_are_ranked_by_peak_then_mean(dsf):
    _, _, view = dsf
    hot = view.hot_links(10)
    keys = [(round(h["peak_util"], 9), h["mean_util"], h["step_bytes"]) for h in hot]
    assert keys == sorted(keys, reverse=True)
    assert hot[0]["peak_util"] == pytest.approx(view.peak_util.max())
    rest = np.setdiff1d(np.arange(view.capacity.size), [h["index"] for h in hot])
    assert np.all(view.peak_util[rest] <= hot[-1]["peak_util"])
    assert all(h["collectives"] == ["dp_all_reduce"] for h in hot)  # ECMP collisions of DP rings
    assert view.by_tier()["leaf_spine"]["used"] < view.by_tier()["leaf_spine"]["links"]  # hashing leaves some idle


def test_view_needs_the_models_evaluation(dsf, quickstart):
    model, _, _ = dsf
    with pytest.raises(ValueError, match="jobs"):
        model.links(quickstart[1])


# ---- run --links ---------------------------------------------------------------------------------

def test_run_links_writes_csv_with_units_and_the_same_numbers(dsf, tmp_path, capsys):
    model, _, view = dsf
    out = tmp_path / "out"
    assert cli.main(["run", os.path.join(ROOT, "configs", "dsf_vs_ecmp.yaml"), "--links", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert links.hot_table(view) in printed
    assert sorted(os.listdir(out)) == ["links.csv", "links.png", "run.json"]
    text = (out / "links.csv").read_text()
    rows = list(csv.reader(io.StringIO(text)))
    header, body = rows[0], rows[1:]
    assert len(body) == model.info.num_links
    text_columns = {"link", "tier", "collectives"}
    for name in header:
        assert name in text_columns or re.search(r"(_Bps|_bytes|_util)$", name), name
    columns = view.columns()
    assert header == list(columns)
    for k, name in enumerate(header):
        got = [row[k] for row in body]
        if name in text_columns:
            assert got == [str(v) for v in columns[name]], name
        else:
            np.testing.assert_array_equal(np.array(got, float), columns[name], err_msg=name)
    # the phases' bytes from the CSV sum to the flows' bytes x route lengths
    plan = model.plans[0]
    for phase, rp in st.routed_phases(plan).items():
        total = np.array([row[header.index(f"dp-heavy/{phase}_bytes")] for row in body], float).sum()
        assert total == pytest.approx(np.asarray(rp.sub.sizes(rp.sizes)) @ _route_hops(rp), rel=1e-12), phase
    result = json.loads((out / "run.json").read_text())
    assert result["links"]["hot_links"] == json.loads(json.dumps(view.hot_links()))
    assert result["links"]["by_tier"] == json.loads(json.dumps(view.by_tier()))
    assert result["links"]["flow_completion"] == json.loads(json.dumps(view.fct()))
    assert result["units"]["_util"].startswith("fraction")


def test_run_without_links_writes_no_link_files(tmp_path):
    out = tmp_path / "out"
    assert cli.main(["run", os.path.join(ROOT, "configs", "dsf_vs_ecmp.yaml"), "--quiet", "--out", str(out)]) == 0
    assert sorted(os.listdir(out)) == ["run.json"]
    assert "links" not in json.loads((out / "run.json").read_text())


def test_readme_shows_the_hot_link_table_of_dsf_vs_ecmp(dsf):
    _, _, view = dsf
    readme = open(os.path.join(ROOT, "README.md")).read()
    assert links.hot_table(view, 5) in readme
    dp = view.fct()["dp-heavy"]["dp_all_reduce"]
    assert f"p99 {dp['p99_s'] * 1e3:.1f} ms against p50 {dp['p50_s'] * 1e3:.1f} ms" in readme
