"""Planning scenarios at fleet dimension: seeded regions of many sites, full-mesh long haul, several jobs.

Two recipes, both seeded (the same seed writes the same file):

- ``uniform``: 12 sites at random points in a 1,500 km square, full-mesh long haul (66 segments, fibre
  length = straight-line distance x 1.3), 2-tier 2:1 sites of 64 GPUs, four TP8 x DP24 tree
  all-reduce jobs on disjoint site triples; knobs: every segment and every site's leaf tier (78).
- ``mixed`` (``configs/region_plan.yaml`` is seed 0): 11 heterogeneous sites (3-tier halls, 2-tier
  halls, rapid-deployment tents with fewer spines), four training jobs of different sizes over
  different site sets and a disaggregated inference service; knobs: every segment and every site's
  oversubscribed tier (69).

The budget is the as-built cost of the knobs (``optimize.Space.cost_at`` at the built values), so the
optimizer can only move capacity, not add it.

    PYTHONPATH=. python experiments/region_plan.py --recipe uniform --seed 3 --out out/region_u3.yaml
"""

from __future__ import annotations

import argparse
import itertools
import os

import numpy as np
import yaml

ROUTE_FACTOR = 1.3  # fibre follows roads and rights of way: ~1.3 x the straight line
SQUARE_KM = 1500.0
MODEL_8B = {"name": "8b-class", "layers": 32, "hidden": 4096, "ffn_hidden": 14336, "heads": 32, "kv_heads": 8,
            "vocab": 128256, "seq_len": 8192}
MODEL_70B = {"name": "70b-class", "layers": 80, "hidden": 8192, "ffn_hidden": 28672, "heads": 64, "kv_heads": 8,
             "vocab": 128256, "seq_len": 8192}
SCALE_UP = {"size": 8, "bandwidth": "400GB/s", "latency": "936ns"}
# per-site designs: (scale_out section, GPUs)
HALL2 = ({"tiers": 2, "gpus_per_leaf": 16, "leaves_per_pod": 4, "spines_per_pod": 4, "nic_bandwidth": "400Gbps",
          "oversubscription": [2]}, 64)
TENT = ({"tiers": 2, "gpus_per_leaf": 16, "leaves_per_pod": 4, "spines_per_pod": 2, "nic_bandwidth": "400Gbps",
         "oversubscription": [4]}, 64)
HALL3 = ({"tiers": 3, "gpus_per_leaf": 16, "leaves_per_pod": 4, "spines_per_pod": 4, "pods": 2, "aggs_per_plane": 2,
          "nic_bandwidth": "400Gbps", "oversubscription": [1, 4]}, 128)
RATIOS = [1, 2, 4, 8]
COST = {"per_gbps": {"leaf_spine": 1.0, "spine_aggregation": 1.0}, "per_gbps_km": 0.01}


def _long_haul(names, points, capacity="1.6Tbps"):
    out = []
    for (i, a), (j, b) in itertools.combinations(enumerate(names), 2):
        km = ROUTE_FACTOR * float(np.hypot(*(points[i] - points[j])))
        out.append({"a": a, "b": b, "capacity": capacity, "length": f"{max(km, 1.0):.0f}km"})
    return out


def _job(name, model, tp, pp, dp, first_rank, global_batch):
    return {"name": name, "model": model, "parallelism": {"tp": tp, "pp": pp, "dp": dp}, "global_batch": global_batch,
            "efficiency": 0.5, "algorithm": "tree", "first_rank": first_rank}


def uniform(seed: int, sites: int = 12) -> dict:
    """The 78-knob recipe (12 sites): four TP8 x DP24 jobs, each on three consecutive sites of a
    random order of the sites (so each job's triple is a random set of points)."""
    rng = np.random.default_rng(seed)
    if sites % 3:
        raise ValueError(f"sites: must be a multiple of 3 (one job per site triple), got {sites}")
    names = [f"s{i}" for i in range(sites)]
    points = rng.uniform(0, SQUARE_KM, size=(sites, 2))
    so, gpus = HALL2
    site_list = [{"name": n, "scale_up": SCALE_UP, "scale_out": so} for n in names]
    jobs = [_job(f"job{j}", MODEL_8B, 8, 1, 24, j * 3 * gpus, 48) for j in range(sites // 3)]
    knobs = [_tier_knob(f"{n}/leaf_up") for n in names]
    long_haul = _long_haul(names, points)
    knobs += [_haul_knob(seg) for seg in long_haul]
    return _scenario(f"region_uniform_s{seed}", site_list, long_haul, {"training": jobs}, knobs)


def mixed(seed: int) -> dict:
    """11 heterogeneous sites, four jobs of different sizes and an inference service (69 knobs)."""
    rng = np.random.default_rng(seed)
    names, site_list, first = [], [], {}
    rank = 0
    for kind, (so, gpus), count in (("hall", HALL3, 3), ("west", HALL2, 5), ("tent", TENT, 3)):
        for i in range(count):
            name = f"{kind}{i}"
            names.append(name)
            first[name] = rank
            rank += gpus
            site_list.append({"name": name, "scale_up": SCALE_UP, "scale_out": so})
    points = rng.uniform(0, SQUARE_KM, size=(len(names), 2))
    jobs = [
        _job("big", MODEL_70B, 8, 2, 16, first["hall0"], 64),      # 256 GPUs: hall0 + hall1
        _job("mid", MODEL_8B, 8, 1, 24, first["west0"], 48),       # 192 GPUs: west0-2
        _job("pair", MODEL_8B, 8, 2, 8, first["west3"], 32),       # 128 GPUs: west3 + west4
        _job("tents", MODEL_8B, 8, 1, 16, first["tent0"], 32),     # 128 GPUs: tent0 + tent1
    ]
    serve = {"name": "serve", "model": MODEL_8B, "prefill": {"first_rank": first["hall2"], "instances": 16, "tp": 8},
             "decode": {"first_rank": first["tent2"], "instances": 8, "tp": 8}, "requests_per_s": 20.0,
             "prompt_tokens": 8192}
    knobs = []
    for name, site in zip(names, site_list):
        knobs.append(_tier_knob(f"{name}/leaf_up"))
        if site["scale_out"]["tiers"] == 3:
            knobs.append(_tier_knob(f"{name}/spine_up"))
    long_haul = _long_haul(names, points)
    knobs += [_haul_knob(seg) for seg in long_haul]
    return _scenario(f"region_plan_s{seed}", site_list, long_haul, {"training": jobs, "inference": [serve]}, knobs)


def _tier_knob(group):
    return {"group": group, "lower": 1, "upper": 8, "allowed": RATIOS}


def _haul_knob(segment):
    return {"group": f"long_haul/{segment['a']}-{segment['b']}", "lower": "400Gbps", "upper": "25.6Tbps"}


def _scenario(name, sites, long_haul, workloads, knobs) -> dict:
    tiers = {"leaf_spine"} | ({"spine_aggregation"} if any(s["scale_out"]["tiers"] == 3 for s in sites) else set())
    cost = {"per_gbps": {t: p for t, p in COST["per_gbps"].items() if t in tiers}, "per_gbps_km": COST["per_gbps_km"]}
    doc = {"name": name,
           "fabric": {"sites": sites, "long_haul": long_haul, "routing": {"policy": "ecmp", "site_paths": 1}},
           "workloads": workloads, "model": {"step_latency": "2us"},
           "optimize": {"knobs": knobs, "cost": cost, "budget": None, "objective": "throughput", "steps": 60,
                        "learning_rate": 0.05}}
    doc["optimize"]["budget"] = round(as_built_cost(doc), 6)
    return doc


def as_built_cost(doc: dict) -> float:
    """The cost of the knobs' capacity as built."""
    from flowmodel import config, fabric, optimize

    draft = dict(doc, optimize={k: v for k, v in doc["optimize"].items() if k != "budget"})
    scenario = config.parse(draft)
    _, info = fabric.compile_table(fabric.build_table(scenario.fleet))
    space = optimize.Space(info, scenario.optimize.knobs, scenario.optimize.cost)
    return float(space.cost_at({k.group: info.groups[k.group].value for k in scenario.optimize.knobs}))


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data):  # spell every site out: no YAML anchors in a file people read
        return True


def write(doc: dict, path: str, header: str) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        f.write(header)
        yaml.dump(doc, f, Dumper=_Dumper, sort_keys=False, default_flow_style=None, width=120)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--recipe", choices=("uniform", "mixed"), default="uniform")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sites", type=int, default=12, help="uniform recipe: number of sites (a multiple of 3)")
    parser.add_argument("--out", required=True, help="YAML file to write")
    args = parser.parse_args(argv)
    doc = uniform(args.seed, args.sites) if args.recipe == "uniform" else mixed(args.seed)
    knobs = len(doc["optimize"]["knobs"])
    header = (f"# Generated by experiments/region_plan.py --recipe {args.recipe} --seed {args.seed}"
              f"{f' --sites {args.sites}' if args.recipe == 'uniform' else ''}: {knobs} knobs, budget = as built.\n")
    write(doc, args.out, header)
    print(f"{args.out}: {len(doc['fabric']['sites'])} sites, {knobs} knobs, budget {doc['optimize']['budget']:.6g}")


if __name__ == "__main__":
    main()
