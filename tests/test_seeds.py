"""Hash-routed figures over several routing seeds: one batched evaluation equals one run per seed, and
every command reports the spread (or says that the routing has one value)."""

import json

import numpy as np
import pytest
import yaml

from flowmodel import cli, config, resilience, scenario, seeds
from flowmodel import fabric as fb
from flowmodel import routing as rt

# Two coupled TP8 x DP3 jobs sharing a leaf of an oversubscribed leaf-spine, with a background class:
# ECMP's draw moves both step times by tens of percent from seed to seed.
SMALL = yaml.safe_load("""
name: small_ecmp
fabric:
  sites:
    - name: a
      scale_up: {size: 8, bandwidth: 400GB/s, latency: 1us}
      scale_out: {tiers: 2, gpus_per_leaf: 16, leaves_per_pod: 4, spines_per_pod: 4, nic_bandwidth: 400Gbps,
                  oversubscription: [2], latency: 1us}
  routing: {policy: ecmp}
workloads:
  training:
    - name: one
      model: {name: small, layers: 4, hidden: 2048, ffn_hidden: 8192, heads: 16, kv_heads: 8, vocab: 32000,
              seq_len: 2048}
      parallelism: {tp: 8, dp: 3}
      global_batch: 6
    - name: two
      model: {name: small, layers: 4, hidden: 2048, ffn_hidden: 8192, heads: 16, kv_heads: 8, vocab: 32000,
              seq_len: 2048}
      parallelism: {tp: 8, dp: 3}
      global_batch: 6
      first_rank: 24
  background:
    - {name: bulk, src: [0, 8, 16, 24], dst: [48, 56, 40, 32], rate: 5GB/s}
failures: {switch_kinds: [spine], probability: 0.01}
""")


def _small(*overrides):
    data = yaml.safe_load(yaml.safe_dump(SMALL))
    for o in overrides:
        data = config.override(data, o)
    return config.parse(data)


def _write(tmp_path, data=SMALL):
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.slow
def test_sixteen_seeds_batched_equal_sixteen_single_seed_runs():
    model = scenario.prepare(_small())
    batch = seeds.over_seeds(model, range(16))
    assert model.groups == batch.groups == ((0, 1),)  # coupled: the batched fixed point is exercised
    got = batch.evaluate()
    assert len(batch._programs) == 1  # one compiled program for every seed
    for s in range(16):
        one = scenario.prepare(_small(f"fabric.routing.seed={s}")).evaluate()
        for name, r in one.steps.items():
            assert float(got.steps[name].step_time[s]) == pytest.approx(float(r.step_time), rel=1e-9, abs=0)
            for part, value in r.breakdown.items():
                assert float(got.steps[name].breakdown[part][s]) == pytest.approx(float(value), rel=1e-9, abs=1e-15)
    times = np.asarray(got.steps["one"].step_time)
    assert times.max() > 1.1 * times.min()  # the seeds do differ: the comparison means something


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["host", "xla"])
def test_seeds_batched_under_a_transport_profile_equal_single_seed_runs(engine):
    """Contention reads each seed's hop pairs, stacked beside the routes (and the incidences for xla)."""
    setting = ("model.transport=dctcp", f"model.engine={engine}")
    batch = seeds.over_seeds(scenario.prepare(_small(*setting)), range(2))
    got = batch.evaluate()
    assert {k for kinds in batch._tables for k in kinds} == ({"hop_pairs"} if engine == "host" else
                                                            {"hop_pairs", "incidence"})
    for s in range(2):
        one = scenario.prepare(_small(*setting, f"fabric.routing.seed={s}")).evaluate()
        for name, r in one.steps.items():
            assert float(got.steps[name].step_time[s]) == pytest.approx(float(r.step_time), rel=1e-9, abs=0)
    times = np.asarray(got.steps["one"].step_time)
    assert times.max() > 1.01 * times.min()


def test_reseeded_router_shares_the_seed_free_tables_and_draws_its_own_sample():
    fleet = fb.Fleet(sites=(fb.Site("a", scale_out=fb.Clos(tiers=2, gpus_per_leaf=8, leaves_per_pod=4,
                                                            spines_per_pod=8)),))
    network, info = fb.compile_fabric(fb.build(fleet))
    src, dst = np.array([0, 1, 9]), np.array([31, 30, 17])
    for max_paths, sampled in ((16, False), (3, True)):  # 8 paths per pair: sampled only below 8
        base = rt.Router(info, max_paths=max_paths, seed=0)
        base.candidates(src, dst)
        other = base.reseeded(5)
        assert other._table() is base._table() and other._common_memo is base._common_memo
        got, fresh = other.candidates(src, dst), rt.Router(info, max_paths=max_paths, seed=5).candidates(src, dst)
        assert got.sampled is sampled and base.candidates(src, dst).sampled is sampled
        np.testing.assert_array_equal(got.links, fresh.links)
        assert np.array_equal(got.links, base.candidates(src, dst).links) is not sampled


def test_one_seed_is_the_models_own_evaluation_and_spray_has_one_value():
    model = scenario.prepare(_small())
    one = seeds.over_seeds(model, [0])
    assert one.single and float(one.evaluate().step_time[0]) == float(model.evaluate().step_time)
    assert seeds.routing_seeds(model.scenario.routing) == tuple(range(8))
    assert seeds.routing_seeds(_small("fabric.routing.seeds=3", "fabric.routing.seed=4").routing) == (4, 5, 6)
    spray = _small("fabric.routing.policy=spray", "fabric.routing.seeds=8").routing
    assert seeds.routing_seeds(spray) == (0,) and "deterministic" in seeds.describe(spray, (0,))
    with pytest.raises(ValueError, match="spray routing draws nothing from the seed"):
        seeds.SeedSet(scenario.prepare(_small("fabric.routing.policy=spray")), [0, 1])
    # one scale-up domain: every flow has one path, so every seed routes alike and one evaluation serves all
    data = yaml.safe_load(yaml.safe_dump(SMALL))
    data["fabric"]["sites"] = [{"name": "a", "scale_up": {"size": 64, "bandwidth": "400GB/s", "latency": "1us"}}]
    del data["workloads"]["background"]
    model = scenario.prepare(config.parse(data))
    alike = seeds.over_seeds(model, range(3))
    assert alike._alike and not alike._routes[0]
    got = alike.evaluate()
    assert np.asarray(got.step_time).tolist() == [float(model.evaluate().step_time)] * 3


@pytest.mark.parametrize("value, message", [("0", "must be an integer >= 1, got 0"),
                                            ("-2", "must be an integer >= 1, got -2"),
                                            ("abc", "expected an integer, got 'abc'"),
                                            ("2.5", "expected an integer, got 2.5")])
def test_seeds_flag_and_key_are_checked(value, message, tmp_path, capsys):
    path = _write(tmp_path)
    assert cli.main(["run", path, "--seeds", value, "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == f"flowmodel: fabric.routing.seeds: {message}"
    assert not (tmp_path / "o").exists()
    data = yaml.safe_load(yaml.safe_dump(SMALL))
    data["fabric"]["routing"]["seeds"] = yaml.safe_load(value)
    with pytest.raises(config.ConfigError, match=f"^fabric.routing.seeds: {message}"):
        config.parse(data)


def test_run_json_gives_the_mean_the_spread_and_the_seeds(tmp_path, capsys):
    path = _write(tmp_path)
    assert cli.main(["run", path, "--seeds", "4", "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    result = json.loads((tmp_path / "o" / "run.json").read_text())
    assert result["routing_seeds"] == [0, 1, 2, 3] and result["statistic"] == "mean over 4 ECMP seeds 0-3"
    model = scenario.prepare(_small())
    want = seeds.over_seeds(model, range(4)).evaluate()
    for name, job in result["jobs"].items():
        per_seed = np.asarray(want.steps[name].step_time)
        assert job["step_time_per_seed_s"] == pytest.approx(per_seed.tolist(), rel=1e-12)
        stats = job["step_time_stats_s"]
        assert job["step_time_s"] == pytest.approx(per_seed.mean(), rel=1e-12) == stats["mean"]
        assert stats["min"] == pytest.approx(per_seed.min()) and stats["max"] == pytest.approx(per_seed.max())
        assert stats["min"] <= stats["p5"] <= stats["p50"] <= stats["p95"] <= stats["max"]
        assert sum(job["breakdown_s"].values()) == pytest.approx(job["step_time_s"], rel=1e-9)  # mean parts
        assert f"{name}: step time {job['step_time_s']:.4f} s (mean over 4 ECMP seeds 0-3; p5 " in out
    fleet = np.max([np.asarray(r.step_time) for r in want.steps.values()], axis=0)  # slowest job per seed
    assert result["step_time_s"] == pytest.approx(fleet.mean(), rel=1e-12)
    assert result["step_time_per_seed_s"] == pytest.approx(fleet.tolist(), rel=1e-12)
    assert result["provenance"]["seeds"]["fabric.routing.seeds"] == 4
    assert result["provenance"]["overrides"] == ["fabric.routing.seeds=4"]

    spray = yaml.safe_load(yaml.safe_dump(SMALL))
    spray["fabric"]["routing"]["policy"] = "spray"
    assert cli.main(["run", _write(tmp_path, spray), "--out", str(tmp_path / "s")]) == 0
    assert "(spray routing is deterministic: one value)" in capsys.readouterr().out
    result = json.loads((tmp_path / "s" / "run.json").read_text())
    assert result["routing_seeds"] == [0] and result["statistic"] == "spray routing is deterministic: one value"
    stats = result["step_time_stats_s"]
    assert stats["min"] == stats["max"] == result["step_time_s"]


@pytest.mark.slow
def test_failures_compare_distributions_and_flag_a_cut_within_the_seed_spread(tmp_path):
    model = scenario.prepare(_small())
    cuts = [resilience.Failure("a/spine0 down", switches=("a/spine0",), probability=0.01),
            resilience.Failure("a/gpu17 NIC at 5%", degrade=((("a/gpu17", "a/leaf1"), 0.05),), probability=0.01)]
    report = resilience.evaluate_failures(model, cuts, seeds=range(4))
    for name in ("one", "two"):
        healthy = report.healthy_samples[name]
        assert report.healthy[name] == pytest.approx(healthy.mean()) and healthy.max() > healthy.min()
        assert report.samples[name].shape == (2, 4)
        assert report.step_times[name] == pytest.approx(report.samples[name].mean(axis=1))
    # losing one of four spines lands inside the healthy spread of job one; a NIC at 5% is far outside
    assert report.within_seed_spread("one").tolist() == [True, False]
    assert report.step_times["one"][1] > 2 * healthy.max()
    w_h, w = resilience.case_weights(1.0, [0.01, 0.01])  # the expectation weighs the means
    assert report.expected["one"] == pytest.approx(w_h * report.healthy["one"] + w @ report.step_times["one"])
    one = resilience.evaluate_failures(model, cuts[:1])  # without seeds: the model's one draw, nothing flagged
    assert one.healthy["one"] == pytest.approx(report.healthy_samples["one"][0], rel=1e-12)
    assert not one.within_seed_spread("one").any()

    path = _write(tmp_path)
    assert cli.main(["failures", path, "--seeds", "4", "--out", str(tmp_path / "f"), "--quiet"]) == 0
    result = json.loads((tmp_path / "f" / "failures.json").read_text())
    job = result["jobs"]["one"]
    assert result["routing_seeds"] == [0, 1, 2, 3] and set(job["stats_s"]) == set(result["failures"])
    assert job["healthy_step_time_s"] == pytest.approx(report.healthy["one"], rel=1e-12)
    assert job["healthy_stats_s"]["min"] == pytest.approx(report.healthy_samples["one"].min(), rel=1e-12)
    assert "a/spine0 down" in job["within_seed_spread"]
    for scenario_name, stats in job["stats_s"].items():
        assert stats["mean"] == pytest.approx(job["step_time_s"][scenario_name], rel=1e-12)


def test_the_readme_seed_spread_is_what_run_prints(tmp_path, capsys, monkeypatch):
    import os
    import re

    root = os.path.join(os.path.dirname(__file__), "..")
    text = open(os.path.join(root, "README.md")).read().split("## The spread behind a hash-routed figure", 1)[1]
    bash = re.search(r"```bash\n(.*?)```", text, flags=re.S)
    commands = bash.group(1).splitlines()
    shown = re.search(r"```\n(.*?)```", text[bash.end():], flags=re.S).group(1).splitlines()
    monkeypatch.chdir(root)
    printed = []
    for i, line in enumerate(commands):
        words = line.split("#")[0].split()
        assert words[:2] == ["flowmodel", "run"]
        assert cli.main(["run", *words[2:], "--out", str(tmp_path / str(i))]) == 0
        printed += [x for x in capsys.readouterr().out.splitlines() if "step time" in x]
    assert printed == shown


def test_plots_draw_the_seed_spread(monkeypatch):
    from flowmodel import plots

    figures = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, path: figures.append(fig))
    stats = {"a down": {"min": 0.9, "max": 1.3}, "b down": {"min": 1.4, "max": 1.6}}
    job = {"healthy_step_time_s": 1.0, "step_time_s": {"a down": 1.05, "b down": 1.5}, "expected_step_time_s": 1.1,
           "p99_step_time_s": 1.5, "disconnected": [], "stats_s": stats,
           "healthy_stats_s": {"mean": 1.0, "min": 0.8, "max": 1.2}}
    plots.failure_bars({"job": job}, "f.png")
    ax = figures[-1].axes[0]
    band = [p for p in ax.patches if p.get_label().startswith("healthy min-max over seeds")]
    assert len(band) == 1 and "(-20.00% to +20.00%)" in band[0].get_label()
    errors = [c for c in ax.containers if hasattr(c, "has_xerr") and c.has_xerr]
    segments = errors[0].lines[2][0].get_segments()  # the worst failure on top: b down is drawn last
    assert [tuple(np.round(s[:, 0], 6)) for s in segments] == [(-10.0, 30.0), (40.0, 60.0)]
    plots.breakdown_bars({"baseline": {"compute": 1.0}, "optimized": {"compute": 0.8}}, "b.png",
                         spread={"baseline": {"min": 0.9, "max": 1.1}, "optimized": {"min": 0.7, "max": 0.85}})
    lines = figures[-1].axes[0].collections
    assert [tuple(seg[:, 1]) for seg in lines[0].get_segments()] == [(0.9, 1.1), (0.7, 0.85)]
    table = {"g": np.array([1.0, 2.0]), "step_time_s": np.array([2.0, 1.0]), "lo": np.array([1.5, 0.5]),
             "hi": np.array([2.5, 1.5])}
    plots.sweep_lines(table, ["g"], "step_time_s", "s.png", band=("lo", "hi"))
    filled = figures[-1].axes[0].collections
    assert len(filled) == 1 and filled[0].get_paths()[0].vertices[:, 1].min() == 0.5


def test_recommendation_jobs_are_batched_over_seeds_too():
    data = yaml.safe_load(yaml.safe_dump(SMALL))
    data["workloads"]["training"] = data["workloads"]["training"][:1]  # ranks 0-23; the DLRM job on 24-55
    data["workloads"]["recommendation"] = [{"name": "dlrm", "gpus": 32, "first_rank": 24, "tables": 64,
                                             "rows": 1000000, "dim": 128, "pooling": 20, "batch_per_gpu": 2048,
                                             "dense_params": 2.5e+7, "element_bytes": 2}]
    model = scenario.prepare(config.parse(data))
    got = seeds.over_seeds(model, range(3)).evaluate()
    for s in range(3):
        one = scenario.prepare(config.parse(config.override(yaml.safe_load(yaml.safe_dump(data)),
                                                            f"fabric.routing.seed={s}"))).evaluate()
        for name, r in (*one.steps.items(), *one.recommendation.items()):
            every = {**got.steps, **got.recommendation}
            assert float(every[name].step_time[s]) == pytest.approx(float(r.step_time), rel=1e-9, abs=0), (name, s)
        assert float(got.step_time[s]) == pytest.approx(float(one.step_time), rel=1e-9, abs=0)
    assert np.ptp(np.asarray(got.recommendation["dlrm"].step_time)) > 0  # its all-to-all crosses the spines
