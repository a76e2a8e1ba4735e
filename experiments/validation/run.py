"""Fidelity of the fluid model against packet-level TCP (ns-3 3.44), case by case.

    PYTHONPATH=. python experiments/validation/run.py            # ns-3 runs cached in out/validation/
    PYTHONPATH=. python experiments/validation/run.py --rerun    # simulate again (a variant per core)

For every case of ``cases.py`` and every TCP variant it runs the flows in ns-3 (pinned to the same
routes, all starting at 0) and in flowmodel twice: the pure fluid model (``transport=None``; the
long-haul cases get the existing window cap ``window / RTT`` as ``rate_limit``) and with the variant's
transport profile. It prints one Markdown table (also written to ``out/validation/table.md``):
makespan error and per-flow completion-time error (median, p90, max) of each, and the wall time of
both tools. A phased case (the training step) runs its phases one after another: its makespan is the
step's communication time, sum over phases of (calls per step x phase makespan).

``--draws N`` also runs every case N - 1 more times in ns-3, each flow starting at a time drawn uniformly
in [0, 10 us] (``cases.JITTER``: a collective's flows leave their hosts microseconds apart), and adds the peer's
own spread: the range of its makespans over the N draws (the first, all flows at 0, included) and the
profile's error against their median. Loss-based TCP's slow start ends in losses that strike flows
unevenly, so which flow a second cut or a timeout leaves behind, and with it the makespan, can turn on
microseconds (``windows.py`` shows the cuts).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import importlib.metadata
import inspect
import os
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

import flowmodel as fm  # noqa: E402
from flowmodel.peers import ns3  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cases as cases_mod  # noqa: E402

VARIANTS = ("newreno", "cubic", "dctcp")
OUT = os.path.join("out", "validation")


def phases(case):
    return case.phases or ((0, len(case.sizes)),)


def calls(case):
    return case.calls or (1.0,)


def _sub(case, lo, hi):
    routes = case.routes[lo:hi]
    return routes[:, : int((routes >= 0).sum(axis=1).max())], case.sizes[lo:hi]


def ns3_instances(case, variant, ack_every=2, draw=0):
    out = []
    for lo, hi in phases(case):
        routes, sizes = _sub(case, lo, hi)
        out.append(ns3.instance(routes, sizes, case.capacity, case.link_src, case.link_dst, latency=case.latency,
                                variant=variant, window=case.window, ack_every=ack_every,
                                start_times=cases_mod.start_times(case, lo, hi, draw)))
    return out


def cache_key(case, variant, ack_every=2, draw=0):
    """What a cached ns-3 result was run from: the case's instances, the peer's simulation code and the ns-3
    release (a changed case or peer runs again, never reads a stale result; the peer's docs can change freely)."""
    try:
        release = importlib.metadata.version("ns3")
    except importlib.metadata.PackageNotFoundError:  # ns-3 from elsewhere, or none: the cache still reads
        release = "unknown"
    h = hashlib.sha256((inspect.getsource(ns3._simulate) + inspect.getsource(ns3._channels) + ns3._HOOK_CODE
                        + release).encode())
    for inst in ns3_instances(case, variant, ack_every, draw):
        for k in sorted(inst):
            h.update(k.encode())
            h.update(np.ascontiguousarray(inst[k]).tobytes())
    return h.hexdigest()[:16]


def run_ns3(all_cases, variant, rerun=False, ack_every=2, draw=0):
    """{case name: (fct float[F], drops, retransmits, wall s)}, cached per variant, ACK count and draw, and rerun
    where a case or the peer changed (``cache_key``)."""
    name = f"ns3_{variant}" + ("" if ack_every == 2 else f"_ack{ack_every}") + ("" if draw == 0 else f"_draw{draw}")
    path = os.path.join(OUT, name + ".npz")
    cached = {}
    if os.path.exists(path) and not rerun:
        with np.load(path) as z:
            cached = {k: z[k] for k in z.files}
    keys = {c.name: cache_key(c, variant, ack_every, draw) for c in all_cases}
    todo = [c for c in all_cases if str(cached.get(f"{c.name}/key", "")) != keys[c.name]]
    if todo:
        batch = [inst for c in todo for inst in ns3_instances(c, variant, ack_every, draw)]
        t0 = time.perf_counter()
        results = iter(ns3.run(batch, timeout=3000))
        print(f"  ns-3 {variant}, draw {draw}: {len(todo)} cases in {time.perf_counter() - t0:.1f} s (one process)",
              flush=True)
        for c in todo:
            parts = [next(results) for _ in phases(c)]
            cached[f"{c.name}/fct"] = np.concatenate([p.finish for p in parts])
            cached[f"{c.name}/drops"] = np.concatenate([p.drops for p in parts])
            cached[f"{c.name}/retx"] = np.concatenate([p.retransmits for p in parts])
            cached[f"{c.name}/wall"] = np.float64(sum(p.wall_s for p in parts))
            cached[f"{c.name}/key"] = np.array(keys[c.name])
        os.makedirs(OUT, exist_ok=True)
        np.savez(path, **cached)
    return {c.name: (cached[f"{c.name}/fct"], cached[f"{c.name}/drops"], cached[f"{c.name}/retx"],
                     float(cached[f"{c.name}/wall"])) for c in all_cases}


def fluid(case, transport, timed=True):
    """(fct float[F], wall s of the compiled call) of the fluid model, ``transport`` None or a Transport."""
    out, wall = [], 0.0
    for lo, hi in phases(case):
        routes, sizes = _sub(case, lo, hi)
        kw = dict(latency=case.latency)
        if transport is None:
            if case.window is not None:
                kw["rate_limit"] = fm.window_limited_rate(routes, case.latency, case.window)
        else:
            kw["transport"] = transport.with_window(case.window)
            kw["reverse"] = fm.fabric.reverse_links(case.link_src, case.link_dst)  # the ACKs' way back
        inc = fm.incidence(routes, len(case.capacity))
        if timed:
            fm.completion_times(routes, sizes, case.capacity, incidence=inc, **kw).block_until_ready()
        t0 = time.perf_counter()
        out.append(np.asarray(fm.completion_times(routes, sizes, case.capacity, incidence=inc, **kw)))
        wall += time.perf_counter() - t0
    return np.concatenate(out), wall


def makespan(case, fct):
    return sum(k * fct[lo:hi].max() for (lo, hi), k in zip(phases(case), calls(case)))


def central(case, draws):
    """(per-flow median finish time, median makespan) of a case over its ns-3 draws (``draws``: the flows'
    finish times in each). Each flow's median is taken by its index: where equal flows trade places between
    draws (the straggler is a different flow each time), it is kinder per flow than any one draw."""
    return np.median(np.stack(draws), axis=0), float(np.median([makespan(case, fct) for fct in draws]))


def errors(case, ours, theirs, span=None):
    """(makespan relative error, per-flow |relative error|: median, p90, max), against ``theirs`` finish
    times and their makespan (or ``span``, such as the median over draws)."""
    m = makespan(case, ours) / (makespan(case, theirs) if span is None else span) - 1
    e = np.abs(ours / theirs - 1)
    return m, float(np.median(e)), float(np.quantile(e, 0.9)), float(e.max())


def table(all_cases, variants, ack_every=2, draws=1):
    """The Markdown rows and per-case errors, from the ns-3 results ``run_ns3`` cached (``draws`` of them)."""
    rows, summary = [], []
    head = ("| case | half | variant | ns-3 makespan | fluid: makespan err | fluid: per-flow med / p90 / max "
            "| profile: makespan err | profile: per-flow med / p90 / max | retx / flow | ns-3 wall | fluid wall |")
    if draws > 1:
        head += (f" ns-3 over {draws} draws: min - median - max | profile against the medians: makespan err "
                 "| per-flow med / p90 / max |")
    rows += [head, "|" + "---|" * (head.count("|") - 1)]
    for variant in variants:
        measured = [run_ns3(all_cases, variant, ack_every=ack_every, draw=d) for d in range(draws)]
        profile = fm.transport_profile(variant)
        for c in all_cases:
            theirs, _, retx, wall = measured[0][c.name]
            bare, _ = fluid(c, None)
            prof, fwall = fluid(c, profile)
            e0, e1 = errors(c, bare, theirs), errors(c, prof, theirs)
            spans = [makespan(c, m[c.name][0]) for m in measured]
            e2 = errors(c, prof, *central(c, [m[c.name][0] for m in measured]))
            summary.append((c.name, c.split, variant, e0, e1, (min(spans), float(np.median(spans)), max(spans)), e2))
            row = (f"| {c.name} | {c.split} | {variant} | {makespan(c, theirs) * 1e3:.2f} ms | {e0[0]:+.1%} "
                   f"| {e0[1]:.1%} / {e0[2]:.1%} / {e0[3]:.1%} | {e1[0]:+.1%} "
                   f"| {e1[1]:.1%} / {e1[2]:.1%} / {e1[3]:.1%} | {np.mean(retx):.0f} | {wall:.2f} s "
                   f"| {fwall * 1e3:.1f} ms |")
            if draws > 1:
                row += (f" {min(spans) * 1e3:.2f} - {np.median(spans) * 1e3:.2f} - {max(spans) * 1e3:.2f} ms "
                        f"| {e2[0]:+.1%} | {e2[1]:.1%} / {e2[2]:.1%} / {e2[3]:.1%} |")
            rows.append(row)
    return rows, summary


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rerun", action="store_true", help="simulate in ns-3 again instead of reading the cache")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    p.add_argument("--ack-every", type=int, default=2, help="ns-3 receivers' delayed-ACK count (default 2, as "
                   "Linux; the profiles were fitted with 2); 1 ACKs every segment, a sensitivity check")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="ns-3 children at once, one per variant and draw (default: one per core)")
    p.add_argument("--draws", type=int, default=1, help="ns-3 runs per case: the first with every flow at 0, the "
                   f"rest with starts drawn in [0, {cases_mod.JITTER * 1e6:g} us] (default 1; their spread joins "
                   "the table)")
    args = p.parse_args(argv)
    if args.jobs < 1:
        p.error(f"--jobs: must be >= 1, got {args.jobs}")
    if args.draws < 1:
        p.error(f"--draws: must be >= 1, got {args.draws}")
    all_cases = cases_mod.all_cases()
    if args.cases:
        known = {c.name for c in all_cases}
        unknown = sorted(set(args.cases.split(",")) - known)
        if unknown:
            p.error(f"--cases: unknown {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        all_cases = [c for c in all_cases if c.name in args.cases.split(",")]
    variants = args.variants.split(",")
    if not set(variants) <= set(VARIANTS):
        p.error(f"--variants: unknown {', '.join(sorted(set(variants) - set(VARIANTS)))}; known: {', '.join(VARIANTS)}")
    # the variants' ns-3 children run side by side (each is one process; the 16 flows over 1,000 km alone take
    # 6 min under Cubic), then the table reads their caches
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        runs = [(v, d) for d in range(args.draws) for v in variants]
        list(pool.map(lambda vd: run_ns3(all_cases, vd[0], args.rerun, args.ack_every, vd[1]), runs))
    rows, summary = table(all_cases, variants, args.ack_every, args.draws)
    text = "\n".join(rows)
    print(text)
    for variant in args.variants.split(","):
        mine = [x for x in summary if x[2] == variant]
        held = [x for x in mine if x[1] == "held"]
        if held:
            worst = max(held, key=lambda x: abs(x[4][0]))
            within = sum(abs(x[4][0]) <= 0.05 for x in held)
            print(f"{variant} held-out: makespan within 5% on {within} of {len(held)}, worst {worst[4][0]:+.1%} "
                  f"({worst[0]}); without a profile worst {max((x[3][0] for x in held), key=abs):+.1%}")
        medians = sum(x[4][1] <= 0.15 for x in mine)
        print(f"{variant} every case: per-flow median within 15% on {medians} of {len(mine)} "
              f"({medians / max(len(mine), 1):.0%})")
        if args.draws > 1:
            mid = sum(abs(x[6][0]) <= 0.05 for x in held)
            inside = sum(x[5][0] * 0.95 <= x[5][1] * (1 + x[6][0]) <= x[5][2] * 1.05 for x in held)
            worst = max(held, key=lambda x: abs(x[6][0]), default=None)
            if worst is not None:
                print(f"{variant} held-out against the median of {args.draws} draws: within 5% on {mid} of "
                      f"{len(held)}, worst {worst[6][0]:+.1%} ({worst[0]}); inside ns-3's range (5% either side) "
                      f"on {inside}")
            medians = sum(x[6][1] <= 0.15 for x in mine)
            print(f"{variant} every case against the per-flow medians: per-flow median within 15% on {medians} of "
                  f"{len(mine)}")
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "table.md" if args.ack_every == 2 else f"table_ack{args.ack_every}.md"), "w") as fh:
        fh.write(text + "\n")


if __name__ == "__main__":
    main()
