"""Units, the scenario schema, bad configs, and the command line contract."""

import copy
import json
import os

import numpy as np
import pytest
import yaml

from flowmodel import _units, cli, config, scenario

HERE = os.path.dirname(__file__)
QUICKSTART = os.path.join(HERE, "..", "configs", "quickstart.yaml")


@pytest.mark.parametrize("text, kind, value", [
    ("400Gbps", "bandwidth", 50e9), ("50GB/s", "bandwidth", 50e9), ("1.6Tbps", "bandwidth", 200e9),
    ("100MiB/s", "bandwidth", 100 * 2**20), (12.5e9, "bandwidth", 12.5e9), ("2us", "time", 2e-6),
    ("936ns", "time", 936e-9), ("1.5ms", "time", 1.5e-3), ("10km", "length", 10.0), ("500m", "length", 0.5),
    ("256MiB", "size", 256 * 2**20), ("4GB", "size", 4e9), ("1e3", "time", 1e3),
])
def test_units(text, kind, value):
    assert _units.parse(text, kind, "x") == pytest.approx(value, rel=1e-15)


@pytest.mark.parametrize("text, kind, match", [
    ("400Gbs", "bandwidth", r"x: unknown bandwidth unit 'Gbs' in '400Gbs'; known: .*Gbps"),
    ("fast", "bandwidth", "x: cannot read 'fast' as a bandwidth"),
    ("10 parsecs", "length", "unknown length unit 'parsecs'"),
    (True, "time", "expected a time"),
    ("inf", "time", "cannot read"),
])
def test_bad_units(text, kind, match):
    with pytest.raises(ValueError, match=match):
        _units.parse(text, kind, "x")


def _quickstart() -> dict:
    with open(QUICKSTART) as fh:
        return yaml.safe_load(fh)


def test_quickstart_loads():
    sc = config.load(QUICKSTART)
    assert [s.name for s in sc.fleet.sites] == ["b0", "b1"]
    assert sc.fleet.num_gpus == 256 and sc.training[0].parallelism.size == 256
    assert sc.fleet.sites[0].scale_out.nic_bandwidth == 50e9 and sc.fleet.long_haul[0].capacity == 100e9
    assert sc.options.step_latency == 2e-6 and len(sc.optimize.knobs) == 3 and sc.optimize.knobs[2].upper == 1.6e12


def test_renamed_and_invalid_options_name_the_key():
    data = _quickstart()
    data["model"]["alpha"] = "2us"
    with pytest.raises(config.ConfigError, match=r"^model.alpha: was renamed to 'model.step_latency'"):
        config.parse(data)
    for value in (0, -3):
        data = _quickstart()
        data["fabric"]["routing"] = {"policy": "qp_scaling", "qps": value}
        with pytest.raises(config.ConfigError, match=rf"^fabric.routing.qps: must be an integer >= 1, got {value}"):
            config.parse(data)
    data = _quickstart()
    data["fabric"]["routing"] = {"policy": "ecmq"}
    with pytest.raises(config.ConfigError, match=r"^fabric.routing.policy: unknown policy 'ecmq'"):
        config.parse(data)
    data = _quickstart()
    data["model"]["sharpness"] = 0
    with pytest.raises(config.ConfigError, match=r"^model.sharpness: must be > 0, got 0"):
        config.parse(data)
    data = _quickstart()
    data["optimize"]["learning_rate"] = -1
    with pytest.raises(config.ConfigError, match=r"^optimize.learning_rate: must be > 0 and finite, got -1"):
        config.parse(data)


def test_oversubscription_is_a_list_a_number_or_left_out():
    data = _quickstart()
    so = data["fabric"]["sites"][0]["scale_out"]
    so["oversubscription"] = 3
    assert config.parse(data).fleet.sites[0].scale_out.oversubscription == (3.0,) * (so["tiers"] - 1)
    del so["oversubscription"]
    assert config.parse(data).fleet.sites[0].scale_out.oversubscription == (1.0,) * (so["tiers"] - 1)
    so["oversubscription"] = "3:1"
    with pytest.raises(config.ConfigError, match=r"scale_out.oversubscription: expected a number, got '3:1'"):
        config.parse(data)


def test_congestion_options():
    data = _quickstart()
    assert config.parse(data).options.congestion is None  # off unless asked for
    data.setdefault("model", {}).update(window="64MB", queueing=True, buffer="8MiB")
    c = config.parse(data).options.congestion
    assert (c.window, c.queueing, c.buffer_bytes, c.packet_bytes) == (64e6, True, 8 * 2**20, 4096.0)
    data["model"]["window"] = "-1MB"
    with pytest.raises(config.ConfigError, match=r"model.window: must be > 0, got '-1MB'"):
        config.parse(data)
    data["model"]["window"] = "64Mbps"
    with pytest.raises(config.ConfigError, match=r"model.window: unknown size unit 'Mbps'"):
        config.parse(data)
    data["model"].update(window="64MB", packet="9KB")
    assert config.parse(data).options.congestion.packet_bytes == 9000.0
    data["model"]["queueing"] = False  # queue shape without a queue: an error, not silently dropped
    with pytest.raises(config.ConfigError, match=r"model.packet: is used only with model.queueing: true, got 9000.0"):
        config.parse(data)
    del data["model"]["packet"]
    with pytest.raises(config.ConfigError, match=r"model.buffer: is used only with model.queueing: true"):
        config.parse(data)


def _mutated(path: str, value):
    data = _quickstart()
    node = data
    keys = path.split("/")
    for k in keys[:-1]:
        node = node[int(k)] if isinstance(node, list) else node[k]
    last = keys[-1]
    if value is _DELETE:
        del node[last]
    else:
        node[int(last) if isinstance(node, list) else last] = value
    return data


_DELETE = object()


@pytest.mark.parametrize("path, value, match", [
    ("fabric/sites/0/scale_out/oversubscription/1", -1,
     r"^fabric.sites\[0\].scale_out.oversubscription\[1\]: must be > 0 and finite, got -1"),
    ("fabric/sites/0/scale_out/nic_bandwidth", "400Gbs", r"^fabric.sites\[0\].scale_out.nic_bandwidth: unknown"),
    ("fabric/sites/0/scale_out/spines", 4, r"^fabric.sites\[0\].scale_out.spines: unknown key; did you mean "
                                           r"'spines_per_pod'\?"),
    ("workloads/training/0/parallelism/dp", 16, r"^workloads.training\[0\]: needs GPUs 0..511, the fabric has 256"),
    ("fabric/sites/0/scale_up/size", 4, r"parallelism.tp: TP group .* spans scale-up domains"),
    ("workloads/training/0/model", "gpt-9", r"^workloads.training\[0\].model: unknown model preset 'gpt-9'"),
    ("workloads/training/0/global_batch", _DELETE, r"^workloads.training\[0\].global_batch: is required"),
    ("workloads/training/0/global_batch", 64_000_000_000,
     r"^workloads.training\[0\].global_batch: 64000000000 gives 8000000000 micro-batches per pipeline .* at most "
     r"65536 micro-batches"),
    ("fabric/long_haul/0/b", "b7", r"^fabric: long_haul\[b0-b7\]: unknown site 'b7'"),
    ("optimize/knobs/0/lower", 9, r"^optimize.knobs\[0\]: bounds reversed, lower 9.0 > upper 8.0"),
    ("optimize/budget", -5, r"^optimize.budget: must be > 0 and finite, got -5"),
    ("model/sharpness", "high", r"^model.sharpness: expected a number, got 'high'"),
    ("workloads/training/0/parallelism/pp", 0,
     r"^workloads.training\[0\].parallelism.pp: must be an integer >= 1, got 0"),
])
def test_bad_configs_name_the_key(path, value, match):
    data = _mutated(path, value)
    with pytest.raises(ValueError, match=match):
        # semantic checks that need the fabric happen when the scenario is prepared
        scenario.prepare(config.parse(data))


def test_mutated_configs_load_or_fail_with_one_line():
    rng = np.random.default_rng(0)
    base = _quickstart()
    leaves = []

    def walk(node, path):
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, path + [k])
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, path + [i])
        else:
            leaves.append(path)

    walk(base, [])
    junk = [-1, 0, 0.5, 1e30, float("nan"), "x", "12Qbps", None, True, [], {}, "1us", 3, "-2GB/s"]
    outcomes = {"loaded": 0, "refused": 0}
    for _ in range(2000):
        data = copy.deepcopy(base)
        path = leaves[rng.integers(len(leaves))]
        node = data
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = junk[rng.integers(len(junk))]
        try:
            config.parse(data)
            outcomes["loaded"] += 1
        except config.ConfigError as e:
            assert "\n" not in str(e) and ":" in str(e)
            outcomes["refused"] += 1
    assert outcomes["loaded"] > 100 and outcomes["refused"] > 100


def test_cli_run_and_bad_config(tmp_path, capsys):
    small = _quickstart()
    out = tmp_path / "run"
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(small))
    assert cli.main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    result = json.loads((out / "run.json").read_text())
    assert result["step_time_s"] > 0 and set(result["breakdown_s"]) >= {"compute", "tp", "pipeline", "dp"}
    assert result["step_time_s"] == pytest.approx(sum(result["breakdown_s"].values()), rel=1e-9)
    bad = tmp_path / "bad.yaml"
    small["fabric"]["sites"][0]["scale_out"]["oversubscription"] = [1, -1]
    bad.write_text(yaml.safe_dump(small))
    assert cli.main(["run", str(bad), "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "oversubscription[1]" in err[0]
    assert not (tmp_path / "bad").exists()
    (tmp_path / "broken.yaml").write_text("fabric: [unclosed\n")
    assert cli.main(["run", str(tmp_path / "broken.yaml")]) == 2
    assert "not valid YAML" in capsys.readouterr().err


def test_cli_optimize(tmp_path):
    data = _quickstart()
    data["optimize"]["steps"] = 15
    path = tmp_path / "q.yaml"
    path.write_text(yaml.safe_dump(data))
    assert cli.main(["optimize", str(path), "--out", str(tmp_path / "o"), "--quiet"]) == 0
    result = json.loads((tmp_path / "o" / "optimize.json").read_text())
    for key in ("baseline_step_time_s", "optimized_step_time_s", "parameters", "history", "units"):
        assert key in result
    assert result["optimized_step_time_s"] <= result["baseline_step_time_s"] * (1 + 1e-9)
    assert result["optimized_cost"] <= data["optimize"]["budget"] * (1 + 1e-9) and result["budget"] == 100000
    assert result["baseline_cost"] == pytest.approx(75200.0)  # 4:1 spines and the 800 Gbps x 30 km link
    # every rounding of the spine ratios, the long-haul link refined on the exact model: the whole budget
    assert result["optimality_check"]["passed"] and result["roundings"] == 16
    assert result["optimized_cost"] == pytest.approx(100000.0, rel=1e-9)
    assert result["optimized_objective"] <= result["searched_objective"] * (1 + 1e-12)
    assert result["objective"] == "step_time"  # so the objective is the slowest job's step time
    assert result["optimized_objective"] == pytest.approx(result["optimized_step_time_s"], rel=1e-12)
    assert result["parameters"]["b0/spine_up"]["unit"] == "ratio"
    assert result["parameters"]["b0/spine_up"]["value"] in (1, 2, 4, 8)
    assert len(result["history"]) == 15
    # searched on the one seed, reported over the default 8 with their spread
    assert result["search_seeds"] == [0] and result["over_seeds"]["routing_seeds"] == list(range(8))
    for k in ("baseline", "optimized"):
        stats = result["over_seeds"][f"{k}_step_time_stats_s"]
        assert stats["min"] <= result[f"{k}_step_time_s"] <= stats["max"] and stats["min"] <= stats["mean"]
    assert (tmp_path / "o" / "optimize_loss.png").stat().st_size > 0
    assert (tmp_path / "o" / "optimize_breakdown.png").exists()


def test_cli_sweep(tmp_path):
    data = _quickstart()
    data["sweep"] = {"grid": {"long_haul/b0-b1": ["200Gbps", "1.6Tbps"], "b0/spine_up": [1, 8]}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    assert cli.main(["sweep", str(path), "--out", str(tmp_path / "s"), "--quiet"]) == 0
    table = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert table["parameter_units"] == {"long_haul/b0-b1": "bytes/s", "b0/spine_up": "ratio"}
    rows = table["rows"]  # every column ends in its unit
    assert set(rows[0]) >= {"long_haul/b0-b1_Bps", "b0/spine_up_ratio", "step_time_s", "compute_s"}
    assert all(k.endswith(tuple(cli.UNITS)) for k in rows[0])
    assert (tmp_path / "s" / "sweep.csv").read_text().splitlines()[0].split(",") == list(rows[0])
    assert len(rows) == 4 and {r["long_haul/b0-b1_Bps"] for r in rows} == {25e9, 200e9}
    assert table["routing_seeds"] == list(range(8))  # each point the mean over the seeds, with its range
    assert all(r["step_time_min_s"] <= r["step_time_s"] <= r["step_time_max_s"] for r in rows)
    slow = [r["step_time_s"] for r in rows if r["long_haul/b0-b1_Bps"] == 25e9]
    fast = [r["step_time_s"] for r in rows if r["long_haul/b0-b1_Bps"] == 200e9]
    assert min(slow) > max(fast)  # a thinner long-haul link never helps
    assert (tmp_path / "s" / "sweep.csv").exists() and (tmp_path / "s" / "sweep.png").exists()
    data["sweep"] = {"grid": {"b9/spine_up": [1, 2]}}
    path.write_text(yaml.safe_dump(data))
    assert cli.main(["sweep", str(path), "--out", str(tmp_path / "bad"), "--quiet"]) == 2


SHIPPED = ["quickstart", "llama3_24k", "multi_building_129k", "dsf_vs_ecmp", "mixed_workloads", "gw_regional_ring",
           "time_to_train"]


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_configs_load_and_say_what_they_reproduce(name):
    path = os.path.join(HERE, "..", "configs", f"{name}.yaml")
    assert open(path).readline().startswith("# ")  # a comment header
    sc = config.load(path)
    assert sc.name == name and (sc.training or sc.inference)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["dsf_vs_ecmp", "mixed_workloads", "gw_regional_ring", "time_to_train"])
def test_shipped_configs_run(name, tmp_path):
    path = os.path.join(HERE, "..", "configs", f"{name}.yaml")
    assert cli.main(["run", path, "--out", str(tmp_path), "--quiet"]) == 0
    result = json.loads((tmp_path / "run.json").read_text())
    assert np.isfinite(result["step_time_s"]) and result["step_time_s"] > 0


def test_cli_failures_and_result_file_permissions(tmp_path):
    data = _quickstart()
    data["failures"] = {"tiers": ["long_haul"], "probability": 0.1}
    path = tmp_path / "f.yaml"
    path.write_text(yaml.safe_dump(data))
    old = os.umask(0o022)
    try:
        assert cli.main(["failures", str(path), "--out", str(tmp_path / "f"), "--quiet"]) == 0
        assert cli.main(["run", str(path), "--out", str(tmp_path / "r"), "--quiet"]) == 0
    finally:
        os.umask(old)
    result = json.loads((tmp_path / "f" / "failures.json").read_text())
    job = result["jobs"]["llm"]
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    assert job["healthy_step_time_s"] == pytest.approx(run["step_time_s"], rel=1e-12)
    assert result["failures"] == ["b0/border-b1/border down"] and job["disconnected"] == result["failures"]
    # the only failure cuts the job in two: it is left out of the expectation (and listed), leaving the healthy case
    assert job["expected_step_time_s"] == pytest.approx(job["healthy_step_time_s"], rel=1e-12)
    assert (tmp_path / "f" / "failures.json").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "f" / "failures.png").stat().st_mode & 0o777 == 0o644
    del data["failures"]
    path.write_text(yaml.safe_dump(data))
    assert cli.main(["failures", str(path), "--out", str(tmp_path / "g"), "--quiet"]) == 2


@pytest.mark.slow
def test_failures_weigh_probability_and_healthy_weight_as_documented(tmp_path):
    """gw_regional_ring: expected = (w_h t_h + sum_i p_i t_i) / (w_h + sum_i p_i), hand-computed from the
    per-scenario times the same run writes, and it moves with failures.probability."""
    path = os.path.join(HERE, "..", "configs", "gw_regional_ring.yaml")
    expected = {}
    for p, w in ((0.5, 1.0), (0.0001, 1.0), (0.5, 3.0)):
        out = tmp_path / f"{p}-{w}"
        assert cli.main(["failures", path, "--out", str(out), "--quiet", "--set", f"failures.probability={p}",
                         "--set", f"failures.healthy_weight={w}"]) == 0
        job = json.loads((out / "failures.json").read_text())["jobs"]["dp-across-region"]
        t = list(job["step_time_s"].values())
        by_hand = (w * job["healthy_step_time_s"] + sum(p * x for x in t)) / (w + p * len(t))
        assert job["expected_step_time_s"] == pytest.approx(by_hand, rel=1e-12)
        expected[p, w] = job["expected_step_time_s"]
    assert expected[0.5, 1.0] > expected[0.5, 3.0] > expected[0.0001, 1.0] * 1.01  # the cuts cost 10-29% each


def test_cli_sampled_failures_and_inference_under_failure(tmp_path):
    """failures.sample draws as resilience.sampled_failures does; each inference service's KV transfer
    is reported under every draw; the draws carry the healthy cases (healthy_weight 0)."""
    from flowmodel import resilience

    data = _quickstart()
    data["failures"] = {"tiers": ["long_haul"], "probability": 0.3, "sample": {"count": 6, "seed": 3}}
    data["workloads"]["inference"] = [{"name": "serve", "model": dict(data["workloads"]["training"][0]["model"]),
                                       "prefill": {"first_rank": 0}, "decode": {"first_rank": 8},
                                       "requests_per_s": 5.0, "prompt_tokens": 1024}]
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    assert cli.main(["failures", str(path), "--out", str(tmp_path / "s"), "--quiet"]) == 0
    result = json.loads((tmp_path / "s" / "failures.json").read_text())
    sc = config.load(str(path))
    draws = resilience.sampled_failures(scenario.prepare(sc).graph, {"long_haul": 0.3}, 6, seed=3)
    assert result["failures"] == [d.name for d in draws] and result["healthy_weight"] == 0.0
    kv = result["inference"]["serve"]
    assert set(kv["kv_transfer_s"]) == set(result["failures"]) and kv["healthy_kv_transfer_s"] > 0
    job = result["jobs"]["llm"]
    ok = [t for t in job["step_time_s"].values() if t is not None]
    assert job["expected_step_time_s"] == pytest.approx(sum(ok) / len(ok), rel=1e-12)  # equal weights 1 / count
    with pytest.raises(config.ConfigError, match="failures.healthy_weight: not with failures.sample"):
        config.parse({**data, "failures": {**data["failures"], "healthy_weight": 1.0}})


def test_result_files_record_their_provenance(tmp_path):
    import jax

    import flowmodel

    out = tmp_path / "p"
    assert cli.main(["run", QUICKSTART, "--out", str(out), "--quiet", "--set", "fabric.routing.seed=3",
                     "--set", "workloads.training[0].global_batch=128"]) == 0
    record = json.loads((out / "run.json").read_text())["provenance"]
    assert record["flowmodel_version"] == flowmodel.__version__ and record["jax_version"] == jax.__version__
    assert record["overrides"] == ["fabric.routing.seed=3", "workloads.training[0].global_batch=128"]
    assert record["config"]["workloads"]["training"][0]["global_batch"] == 128  # resolved after --set
    assert config.parse(record["config"]) == config.load(QUICKSTART, record["overrides"])  # it re-creates the run
    assert record["seeds"]["fabric.routing.seed"] == 3
    assert record["backend"] == jax.default_backend() and record["precision"] == "float64"
    stages = record["stage_wall_time_s"]
    assert {"read config", "build fabric", "compile and evaluate"} <= set(stages)
    assert all(t >= 0 for t in stages.values()) and sum(stages.values()) <= record["wall_time_s"] * (1 + 1e-9)
    assert sorted(os.listdir(out)) == ["run.json"]  # the lock is gone


def test_a_second_command_on_the_same_out_is_refused_until_the_first_ends(tmp_path, capsys):
    import signal
    import subprocess
    import sys

    out = tmp_path / "o"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from flowmodel.results import OutputLock; "
                               f"OutputLock({str(out)!r}).acquire(); print('held', flush=True); time.sleep(120)"],
                              stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        assert holder.stdout.readline().strip() == "held"
        capsys.readouterr()
        assert cli.main(["run", QUICKSTART, "--out", str(out), "--quiet"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"flowmodel: --out {out}: another flowmodel command (pid {holder.pid}) is writing there; "
                       f"wait for it or choose another --out"]
        assert not (out / "run.json").exists()
    finally:
        holder.send_signal(signal.SIGKILL)  # dies holding it: its lock file stays, the kernel's lock does not
        holder.wait()
    assert (out / ".flowmodel.lock").exists()
    assert cli.main(["run", QUICKSTART, "--out", str(out), "--quiet"]) == 0  # a dead owner never blocks
    assert sorted(os.listdir(out)) == ["run.json"]


def test_ctrl_c_leaves_nothing_half_written(tmp_path, monkeypatch, capsys):
    from flowmodel import results

    def interrupted(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(results.os, "replace", interrupted)  # Ctrl-C as the first result file lands
    out = tmp_path / "new" / "o"
    assert cli.main(["run", QUICKSTART, "--out", str(out), "--quiet"]) == 130
    assert "flowmodel: interrupted" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()  # no temporary file, no lock, no folder it made


@pytest.mark.parametrize("key, value, message", [
    ("fabric.sites[0].scale_out.nic_bandwidth", "400",
     "fabric.sites[0].scale_out.nic_bandwidth: 400: needs a unit, e.g. 400Gbps"),
    ("fabric.long_haul[0].capacity", "1.6e12", "fabric.long_haul[0].capacity: 1.6e12: needs a unit, e.g. 1.6e12Gbps"),
    ("fabric.sites[0].scale_up.latency", "1", "fabric.sites[0].scale_up.latency: 1: needs a unit, e.g. 1us"),
    ("fabric.long_haul[0].length", "'10'", "fabric.long_haul[0].length: 10: needs a unit, e.g. 10km"),
    ("workloads.training[0].hbm", "80", "workloads.training[0].hbm: 80: needs a unit, e.g. 80GB"),
])
def test_a_unitless_physical_quantity_is_refused(key, value, message, tmp_path, capsys):
    import re

    with pytest.raises(config.ConfigError, match=re.escape(message)):
        config.load(QUICKSTART, [f"{key}={value}"])
    capsys.readouterr()
    assert cli.main(["validate", QUICKSTART, "--set", f"{key}={value}"]) == 2
    assert message in capsys.readouterr().err
    data = _quickstart()  # the same in a file
    data["fabric"]["sites"][0]["scale_out"]["nic_bandwidth"] = 400
    with pytest.raises(config.ConfigError, match="nic_bandwidth: 400: needs a unit, e.g. 400Gbps"):
        config.parse(data)


def test_plain_numbers_stay_for_ratios_counts_and_zero_and_python_keeps_si_floats():
    sc = config.load(QUICKSTART, ["fabric.sites[0].scale_out.oversubscription=[1, 4]", "model.step_latency=0"])
    assert sc.options.step_latency == 0.0
    from flowmodel import fabric as fb

    assert fb.ScaleUp(size=8, bandwidth=400e9, latency=1e-6).bandwidth == 400e9  # SI floats from Python


def test_console_figures_in_config_units_and_residue_as_zero():
    assert _units.show(50e9, "bytes/s") == "400Gbps" and _units.show(1.4397e12 / 8 * 8, "bytes/s") == "11.5176Tbps"
    assert _units.show(4.0, "ratio") == "4"
    assert _units.format_value(-0.0, "time") == "0ns" and _units.format_value(5.55e-17, "time") == "0ns"
    assert _units.tidy(5.55e-17, 0.6) == 0.0 and _units.tidy(-0.0) == 0.0 and str(_units.tidy(-0.0)) == "0.0"
    assert _units.tidy(1e-6, 0.6) == 1e-6
    assert cli._floats({"compute": 0.6, "dp": 5.55e-17, "tp": -0.0}) == {"compute": 0.6, "dp": 0.0, "tp": 0.0}
