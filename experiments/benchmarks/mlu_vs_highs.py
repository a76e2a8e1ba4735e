"""Min-MLU traffic splits: flowmodel's batched gradient search vs SciPy HiGHS one LP at a time.

    PYTHONPATH=. python3 experiments/benchmarks/mlu_vs_highs.py [--batch 64] [--flows 300] [--json FILE]

Instance: a k=8 fat-tree with 2:1 leaf and 3:1 spine oversubscription, capacities x U(0.7, 1.3),
``--flows`` random GPU pairs with all their up-down paths (NIC links left out: every path of a pair
shares them), and ``--batch`` demand matrices (each demand U(1, 20) GB/s). flowmodel solves all of
them in one ``vmap``-ed call; HiGHS solves them one by one. Prints median times, their ratio and the
largest gap to the LP optimum.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

from common import median_time, print_table, write_json  # noqa: E402

import flowmodel as fm  # noqa: E402
from flowmodel import fabric as fb  # noqa: E402
from flowmodel import routing as rt  # noqa: E402
from flowmodel.peers import fattree  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--flows", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    clos = fb.Clos.from_radix(8, oversubscription=(2.0, 3.0))
    net, info = fb.compile_fabric(fb.build(fb.Fleet(sites=(fb.Site("s", scale_out=clos, scale_up=None),))))
    rng = np.random.default_rng(0)
    src, dst = fattree.random_pairs(info.num_gpus, args.flows, rng)
    c = rt.Router(info, max_paths=64).candidates(src, dst)
    nic = info.tier == "nic"
    routes = -np.sort(-np.where((c.links < 0) | nic[np.maximum(c.links, 0)], -1, c.links), axis=1)
    capacity = np.asarray(net.capacity) * rng.uniform(0.7, 1.3, info.num_links)
    demands = rng.uniform(1e9, 20e9, (args.batch, args.flows))

    batched = jax.jit(jax.vmap(lambda d: fm.optimize.split_for_min_mlu(routes, c.flow, d, capacity, check=False)))
    (_, mlus), t_flowmodel = median_time(lambda: batched(jnp.asarray(demands)), args.repeats)

    def highs():
        return [fm.optimize.lp_min_mlu(routes, c.flow, d, capacity)[1] for d in demands]

    lps, t_highs = median_time(lambda: np.asarray(highs()), args.repeats)
    gap = np.asarray(mlus) / np.asarray(lps) - 1
    row = {"batch": args.batch, "paths": routes.shape[0], "flowmodel_s": t_flowmodel, "highs_s": t_highs,
           "ratio": t_highs / t_flowmodel, "max_gap_pct": 100 * float(gap.max()), "min_gap_pct": 100 * float(gap.min())}
    print_table([row], [("batch", "batch", "d"), ("paths", "paths", "d"), ("flowmodel s", "flowmodel_s", ".3f"),
                        ("HiGHS s", "highs_s", ".3f"), ("ratio", "ratio", ".2f"),
                        ("max gap %", "max_gap_pct", ".4f"), ("min gap %", "min_gap_pct", ".4f")])
    write_json(args.json, [row])


if __name__ == "__main__":
    main()
