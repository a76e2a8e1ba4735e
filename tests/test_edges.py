"""The edges of the API: unit strings in Python as in YAML, the memory check before a fabric is built,
the trace nodes that take no time, and an ASTRA-sim network file given where a scenario belongs."""

import glob
import json
import os
import time
import warnings

import numpy as np
import pytest
import yaml

from flowmodel import _memory, cli, config, optimize
from flowmodel import fabric as fb
from flowmodel import routing as rt
from flowmodel import scenario as sc
from flowmodel import trace as fmtrace
from flowmodel import traffic as tr
from flowmodel.traffic import _chakra as chakra

CONFIGS = os.path.join(os.path.dirname(__file__), "..", "configs")


def _small_fleet():
    clos = fb.Clos(tiers=2, gpus_per_leaf=8, leaves_per_pod=2, spines_per_pod=2)
    return fb.Fleet(sites=(fb.Site("a", scale_out=clos), fb.Site("b", scale_out=clos)),
                    long_haul=(fb.LongHaul("a", "b", capacity=100e9, length_km=10.0),))


# --- units: the Python API reads the config's unit strings, with the config's errors


def test_fabric_specs_read_unit_strings_as_si():
    assert fb.ScaleUp(bandwidth="400GB/s", latency="936ns") == fb.ScaleUp(bandwidth=400e9, latency=936e-9)
    assert fb.Clos(nic_bandwidth="400Gbps", latency="1us") == fb.Clos(nic_bandwidth=50e9, latency=1e-6)
    assert fb.LongHaul("a", "b", "1.6Tbps", "2km", "5us") == fb.LongHaul("a", "b", 200e9, 2.0, 5 * 1e-6)
    assert fb.ring(["a", "b", "c"], capacity="25.6Tbps", length_km="2km") == fb.ring(["a", "b", "c"],
                                                                                      capacity=3.2e12, length_km=2.0)
    assert fb.Site("s", border_oversubscription="2").border_oversubscription == 2.0
    su = fb.ScaleUp(bandwidth=400e9)  # SI floats pass unchanged
    assert su.bandwidth == 400e9 and type(su.bandwidth) is float


def test_bad_unit_strings_give_the_config_error():
    with pytest.raises(ValueError) as api:
        fb.ScaleUp(bandwidth="400Gbs")
    text = "fabric:\n  sites: [{name: a, scale_up: {bandwidth: 400Gbs}}]\nworkloads: {}\n"
    with pytest.raises(config.ConfigError) as yml:
        config.parse(yaml.safe_load(text))
    assert str(api.value) == "scale_up.bandwidth: " + str(yml.value).split(": ", 1)[1]
    with pytest.raises(ValueError, match=r"long_haul\[a-b\]\.length_km: unknown length unit 'kms' in '2kms'"):
        fb.LongHaul("a", "b", "1Tbps", "2kms")
    with pytest.raises(ValueError, match=r"scale_out\.latency: cannot read 'soon' as a time"):
        fb.Clos(latency="soon")
    with pytest.raises(ValueError, match=r"scale_up\.bandwidth: must be > 0, got '0Gbps'"):
        fb.ScaleUp(bandwidth="0Gbps")


def test_apply_groups_takes_strings_in_each_groups_unit():
    network, info = fb.compile_fabric(fb.build(_small_fleet()))
    as_string = fb.apply_groups(network, info, {"long_haul/a-b": "1.6Tbps", "a/leaf_up": "4"})
    as_float = fb.apply_groups(network, info, {"long_haul/a-b": 200e9, "a/leaf_up": 4.0})
    assert np.array_equal(np.asarray(as_string.capacity), np.asarray(as_float.capacity))
    values = fb.group_values(as_string, info, ["long_haul/a-b", "a/leaf_up"])
    assert float(values["long_haul/a-b"]) == pytest.approx(200e9) and float(values["a/leaf_up"]) == pytest.approx(4)
    with pytest.raises(ValueError, match=r"groups\[long_haul/a-b\]: unknown bandwidth unit 'Tbs' in '1.6Tbs'"):
        fb.apply_groups(network, info, {"long_haul/a-b": "1.6Tbs"})
    with pytest.raises(ValueError, match=r"groups\[a/leaf_up\]: expected a number \(a ratio\), got '400Gbps'"):
        fb.apply_groups(network, info, {"a/leaf_up": "400Gbps"})


def test_knob_bounds_and_background_rates_read_bandwidths():
    knob = optimize.Knob("long_haul/a-b", "400Gbps", "12.8Tbps", allowed=("400Gbps", "1.6Tbps", 1.6e12))
    assert (knob.lower, knob.upper, knob.allowed) == (50e9, 1.6e12, (50e9, 200e9, 1.6e12))
    assert optimize.Knob("a/leaf_up", 1, 8) == optimize.Knob("a/leaf_up", 1.0, 8.0)  # ratios stay numbers
    with pytest.raises(ValueError, match=r"knobs\[g\]\.upper: cannot read 'lots' as a bandwidth"):
        optimize.Knob("g", "400Gbps", "lots")
    assert tr.Background("bg", (0, 1), (2, 3), "100Gbps").rate == 12.5e9
    assert tr.Background("bg", (0, 1), (2, 3), ("100Gbps", 1e9)).rate == (12.5e9, 1e9)
    with pytest.raises(ValueError, match=r"background\[bg\]\.rate\[1\]: unknown bandwidth unit"):
        tr.Background("bg", (0, 1), (2, 3), ("100Gbps", "1Gbs"))
    model = tr.Model("m", layers=4, hidden=512, ffn_hidden=2048, heads=8, kv_heads=8, vocab=8000, seq_len=1024)
    job = tr.Training(model, tr.Parallelism(tp=2, dp=2), global_batch=4, hbm="80GB")
    assert job.hbm == 80e9
    with pytest.raises(ValueError, match=r"training\.hbm: unknown size unit 'GiB/s'"):
        tr.Training(model, tr.Parallelism(tp=2, dp=2), global_batch=4, hbm="80GiB/s")


# --- memory: counted from the description, refused before building


def _routed_flows(model) -> int:
    flows = 0
    for plan in model.plans:
        phases = [p for ps in plan.collectives.values() for p in ps]
        phases += [p for side in (plan.pp_forward, plan.pp_backward) for ps in side if ps for p in ps]
        phases += [plan.dp] if plan.dp is not None else []
        flows += sum(p.phase.num_flows for p in phases)
    return flows


@pytest.mark.parametrize("name", ["quickstart", "gw_regional_ring"])
def test_estimate_counts_what_prepare_builds(name):
    scenario = config.load(os.path.join(CONFIGS, f"{name}.yaml"))
    est = _memory.estimate(scenario)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sc.ScenarioWarning)
        model = sc.prepare(scenario)
    assert (est.gpus, est.nodes, est.links) == (model.info.num_gpus, len(model.info.nodes), model.info.num_links)
    flows = _routed_flows(model)
    assert flows <= est.flows <= 1.1 * flows  # a tree's DP flows are bounded above (4(n-1)/n per rank)


def test_estimate_counts_a_full_mesh_scale_up_and_one_site():
    fleet = fb.Fleet(sites=(fb.Site("a", scale_out=fb.Clos(tiers=3, gpus_per_leaf=4, leaves_per_pod=2,
                                                            spines_per_pod=2, pods=2, aggs_per_plane=2),
                                    scale_up=fb.ScaleUp(size=4, topology="full_mesh")),))
    network, info = fb.compile_fabric(fb.build(fleet))
    assert _memory.fabric_counts(fleet) == (len(info.nodes), info.num_links)


def test_shipped_configs_fit_and_a_huge_one_is_refused():
    for path in sorted(glob.glob(os.path.join(CONFIGS, "*.yaml"))):
        est = _memory.estimate(config.load(path))
        assert est.bytes < 3e9, (path, est.describe())  # 129K GPUs: about 2.0 GB, measured 1.1 GB
        if config.load(path).optimize is not None:  # optimize's estimate, for the configs it runs on
            # region_plan, the largest: 1.7 GB estimated, 1.0 GB measured
            assert _memory.estimate(config.load(path), gradients=True).bytes < 3e9, path
    scenario = config.load(os.path.join(CONFIGS, "quickstart.yaml"))
    assert _memory.check_fits(scenario, available=1e12).nodes == 338
    with pytest.raises(ValueError, match=r"fabric: too large for this machine's memory: 256 GPUs, 338 nodes, "
                                         r"1,250 links, 1,152 flows: about 0\.6 GB estimated, 0\.5 GB available"):
        _memory.check_fits(scenario, available=0.5e9)
    with pytest.raises(ValueError, match=r"1,152 flows with gradients: about 1\.2 GB estimated, 1\.0 GB available"):
        _memory.check_fits(scenario, available=1e9, gradients=True)


def test_run_refuses_a_fabric_too_large_before_building_it(tmp_path, capsys):
    out = tmp_path / "out"
    t0 = time.perf_counter()
    code = cli.main(["run", os.path.join(CONFIGS, "multi_building_129k.yaml"), "--out", str(out),
                     "--set", "fabric.sites[0].scale_out.pods=100000"])  # 800M GPUs: terabytes
    elapsed = time.perf_counter() - t0
    err = capsys.readouterr().err
    assert code == 2
    assert "800,000,000 GPUs" in err and "GB estimated" in err and "GB available" in err
    assert elapsed < 5.0  # parse and count only: building it would take hours
    assert not out.exists()


def test_optimize_is_checked_with_gradients(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(_memory, "available_bytes", lambda: 1.1e9)  # the quickstart's run fits, its search not
    quickstart = os.path.join(CONFIGS, "quickstart.yaml")
    assert cli.main(["optimize", quickstart, "--out", str(tmp_path / "out"), "--quiet"]) == 2
    assert "flows with gradients: about 1.2 GB estimated, 1.1 GB available" in capsys.readouterr().err
    assert cli.main(["validate", quickstart, "--quiet"]) == 0


# --- trace.json: nodes that take no time are counted


def _write(path, nodes):
    w = chakra.TraceWriter(path)
    for node_type, name, deps, attrs, duration in nodes:
        w.add(node_type, name, deps=deps, attrs=attrs, duration=duration)
    w.close()


def _network_yml(path):
    path.write_text(yaml.safe_dump({"topology": ["Switch"], "npus_count": [2], "bandwidth": [50.0],
                                    "latency": [500.0]}))
    return str(path)


def _zero_time_trace(tmp_path):
    MiB = 1048576
    for rank in (0, 1):
        _write(str(tmp_path / f"t.{rank}.et"), [
            (chakra.COMP, "c", [], None, 1e-3),
            (chakra.COLL, "barrier", [0], {"comm_type": 9}, 0.0),
            (chakra.COLL, "ar", [1], {"comm_type": 0, "comm_size": MiB}, 0.0),
            (chakra.COLL, "solo", [2], {"comm_type": 0, "comm_size": MiB, "comm_group": [rank]}, 0.0),
            (chakra.RECV if rank else chakra.SEND, "lonely", [3], {"comm_size": MiB}, 0.0),
            (chakra.MEM_LOAD, "load", [4], None, 0.0),
            (chakra.MEM_STORE, "store", [5], None, 0.0),
        ])
    return str(tmp_path / "t")


def test_zero_time_nodes_are_counted_per_kind(tmp_path):
    prefix = _zero_time_trace(tmp_path)
    fleet = fb.Fleet(sites=(fb.Site("a", scale_up=fb.ScaleUp(size=2, bandwidth=100e9, latency=0.0)),))
    network, info = fb.compile_fabric(fb.build(fleet))
    out = fmtrace.run(prefix, fmtrace.Fabric("two", network, info, rt.Router(info)))
    notes = out["zero_time_nodes"]
    assert {k: v["count"] for k, v in notes.items()} == {"barrier": 2, "single_rank_collective": 2,
                                                         "send_recv_without_peer": 2, "memory_load": 2,
                                                         "memory_store": 2}
    assert all(v["why"] for v in notes.values())
    assert out["makespan_s"] == pytest.approx(1e-3 + 1048576 / 100e9, rel=1e-12)  # they add nothing


def test_trace_json_notes_them(tmp_path, capsys):
    prefix = _zero_time_trace(tmp_path)
    out = tmp_path / "out"
    assert cli.main(["trace", prefix, "--network", _network_yml(tmp_path / "network.yml"), "--out", str(out)]) == 0
    written = json.loads((out / "trace.json").read_text())
    assert written["zero_time_nodes"]["barrier"]["count"] == 2
    assert "took no time: 2 memory load node(s)" in capsys.readouterr().out


# --- an ASTRA-sim network file where a scenario belongs


@pytest.mark.parametrize("command", ["run", "validate"])
def test_a_network_file_given_to_run_points_to_trace(tmp_path, capsys, command):
    path = _network_yml(tmp_path / "network.yml")
    args = [command, path] + (["--out", str(tmp_path / "out")] if command == "run" else [])
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert "looks like an ASTRA-sim network file" in err and f"flowmodel trace PREFIX --network {path}" in err
    assert "unknown key" not in err

