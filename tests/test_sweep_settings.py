"""Sweeps over any config key: each combination of settings is a scenario of its own, prepared again;
its link-group points stay batched; the rows equal separate runs; bad keys and values are named."""

import csv
import json

import numpy as np
import pytest
import yaml

from flowmodel import cli, config, fabric, seeds
from flowmodel import scenario as scn

QUICKSTART = "configs/quickstart.yaml"
# b0's leaves 4:1 oversubscribed: where ECMP's hash collisions show and spray's even split does not
GRID = {"fabric.routing.policy": ["ecmp", "spray"], "long_haul/b0-b1": ["200Gbps", "1.6Tbps"], "b0/leaf_up": [4]}


def _config(tmp_path, grid):
    data = yaml.safe_load(open(QUICKSTART))
    data["sweep"] = {"grid": grid}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_settings_become_variants_checked_at_load(tmp_path):
    sc = config.load(str(_config(tmp_path, {**GRID, "fabric.routing.seed": [0, 3]})))
    assert sc.sweep.axes == {"long_haul/b0-b1": (200e9 / 8, 1.6e12 / 8), "b0/leaf_up": (4.0,)}
    assert [p for p, _ in sc.sweep.settings] == ["fabric.routing.policy", "fabric.routing.seed"]
    assignments = [a for a, _ in sc.sweep.variants]
    assert assignments == [(("fabric.routing.policy", p), ("fabric.routing.seed", s))
                           for p in ("ecmp", "spray") for s in (0, 3)]
    for (_, policy), (_, seed) in assignments[:1]:
        variant = sc.sweep.variants[0][1]
        assert (variant.routing.policy, variant.routing.seed) == (policy, seed)
    # every variant keeps the link-group axes and none of the settings (no sweep within a sweep)
    assert all(v.sweep.axes == sc.sweep.axes and not v.sweep.settings for _, v in sc.sweep.variants)
    assert {v.routing.policy for _, v in sc.sweep.variants} == {"ecmp", "spray"}


@pytest.mark.parametrize("grid, message", [
    ({"fabric.routing.policy": ["ecmp", "bogus"]},
     r"sweep.grid: at fabric.routing.policy = 'bogus': fabric.routing.policy: unknown policy 'bogus'"),
    ({"fabric.routing.polcy": ["ecmp"]}, r"fabric.routing.polcy: unknown key; did you mean 'policy'"),
    ({"workloads.training[5].global_batch": [64]}, r"workloads.training has 1 item"),
    ({"fabric.routing.policy": "ecmp"}, r"sweep.grid.fabric.routing.policy: expected a non-empty list"),
    ({"fabric..policy": ["ecmp"]}, r"sweep.grid.fabric..policy: expected a link group \(site/tier\) or a config key"),
    ({"fabric.routing.seed": [1, 1]}, r"sweep.grid.fabric.routing.seed: a value is listed twice"),
])
def test_bad_settings_are_named(tmp_path, grid, message):
    with pytest.raises(config.ConfigError, match=message):
        config.load(str(_config(tmp_path, grid)))


@pytest.mark.slow
def test_a_sweep_over_policy_equals_separate_runs(tmp_path):
    path = _config(tmp_path, GRID)
    assert cli.main(["sweep", str(path), "--out", str(tmp_path / "s"), "--quiet"]) == 0
    with open(tmp_path / "s" / "sweep.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0])[:3] == ["fabric.routing.policy", "long_haul/b0-b1_Bps", "b0/leaf_up_ratio"]
    assert [(r["fabric.routing.policy"], float(r["long_haul/b0-b1_Bps"])) for r in rows] == [
        (p, c) for p in ("ecmp", "spray") for c in (200e9 / 8, 1.6e12 / 8)]
    meta = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert meta["settings"] == ["fabric.routing.policy"] and (tmp_path / "s" / "sweep.png").exists()
    for policy in ("ecmp", "spray"):
        model = scn.prepare(config.load(QUICKSTART, overrides=[f"fabric.routing.policy={policy}"]))
        for row in (r for r in rows if r["fabric.routing.policy"] == policy):
            point = {"long_haul/b0-b1": float(row["long_haul/b0-b1_Bps"]), "b0/leaf_up": 4.0}
            net = fabric.apply_groups(model.network, model.info, point)
            per_seed = seeds.over_seeds(model).fleet(net, model.options.exact()).step_time  # ecmp: 8 seeds
            assert len(per_seed) == (8 if policy == "ecmp" else 1)
            assert float(row["step_time_s"]) == pytest.approx(float(np.mean(per_seed)), rel=1e-12, abs=0), policy
            assert float(row["step_time_min_s"]) == pytest.approx(float(np.min(per_seed)), rel=1e-12, abs=0)
    # behind a fast long haul spray beats ECMP on the oversubscribed leaves: the policy column is real
    fast = {r["fabric.routing.policy"]: float(r["step_time_s"])
            for r in rows if float(r["long_haul/b0-b1_Bps"]) == 2e11}
    assert fast["spray"] < fast["ecmp"] * (1 - 1e-2)


@pytest.mark.slow
def test_settings_alone_give_one_row_each(tmp_path, capsys):
    path = _config(tmp_path, {"workloads.training[0].global_batch": [64, 128]})
    assert cli.main(["sweep", str(path), "--out", str(tmp_path / "s"), "--quiet"]) == 0
    rows = json.loads((tmp_path / "s" / "sweep.json").read_text())["rows"]
    assert [r["workloads.training[0].global_batch"] for r in rows] == [64, 128]
    for row in rows:
        model = scn.prepare(config.load(QUICKSTART, overrides=[
            f"workloads.training[0].global_batch={row['workloads.training[0].global_batch']}"]))
        mean = float(np.mean(seeds.over_seeds(model).evaluate().step_time))  # over the 8 ECMP seeds
        assert row["step_time_s"] == pytest.approx(mean, rel=1e-12)
    assert rows[1]["step_time_s"] > rows[0]["step_time_s"]
    # a value that parses but cannot be planned is named with its sweep key, before any result is written
    path = _config(tmp_path, {"workloads.training[0].parallelism.tp": [8, 3]})
    assert cli.main(["sweep", str(path), "--out", str(tmp_path / "bad"), "--quiet"]) == 2
    assert "sweep.grid: at workloads.training[0].parallelism.tp = 3: " in capsys.readouterr().err
    assert not (tmp_path / "bad" / "sweep.csv").exists()
