"""What each flow's TCP did in ns-3, case by case: where slow start ended, what the cuts left, who timed out.

    PYTHONPATH=. python experiments/validation/windows.py                       # the long-haul cases
    PYTHONPATH=. python experiments/validation/windows.py --cases longhaul_100km --variants newreno --draw 1

Runs the cases of ``cases.py`` in ns-3 with window traces (``flowmodel.peers.ns3``, ``trace=True``;
nothing cached) and prints, per flow, in segments of 1448 bytes: the window its share of the
bottleneck needs (share x RTT, the profile's slow-start target) and the bottleneck's alone (the
link's bandwidth-delay product); slow start's peak and the threshold its end set; the cuts after it
and the retransmission timeouts (ns-3's "loss" state); the window when the first other flow ended
and at its own end; its finish time in ns-3 and under the variant's profile. Also written to
``out/validation/windows.md``. This is where a makespan error comes from: a profile is one static
transform per flow, and a flow that a second cut or a timeout leaves far below its share sets the
makespan of equal flows alone.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
import run  # noqa: E402  (sets x64)

import flowmodel as fm  # noqa: E402
from flowmodel.peers import ns3  # noqa: E402


def rtts(case):
    """float[F] s: each flow's propagation round trip."""
    hop = case.routes >= 0
    return 2 * np.where(hop, case.latency[np.where(hop, case.routes, 0)], 0.0).sum(axis=1)


def rows(case, variant, result):
    """Markdown rows, one per flow, of one traced ns-3 run."""
    w, F = result.windows, len(case.sizes)
    seg = ns3.SEGMENT
    ours, _ = run.fluid(case, fm.transport_profile(variant), timed=False)
    rtt = rtts(case)
    hop = case.routes >= 0
    link = np.where(hop, case.routes, 0)
    on = np.bincount(case.routes[hop], minlength=len(case.capacity))
    cap = np.where(hop, case.capacity[link], np.inf)
    share = np.min(np.where(hop, cap / np.maximum(on[link], 1), np.inf), axis=1)
    alone, at_share = cap.min(axis=1) * rtt, share * rtt
    if case.window is not None:
        alone, at_share = np.minimum(alone, case.window), np.minimum(at_share, case.window)
    first_end = np.sort(result.finish)
    out = []
    for f in range(F):
        cut_t, cut_v = w.cuts(f)
        _, state_v = w.states(f)
        t, cw = w.cwnd(f)
        before = cw[t < cut_t[0]] if cut_t.size else cw
        others = first_end[first_end != result.finish[f]]
        when = others[0] if others.size and others[0] < result.finish[f] else np.nan
        at_other = f"{w.window_at(f, when) / seg:.0f} at {when * 1e3:.1f} ms" if np.isfinite(when) else "-"
        exit_ = f"{cut_v[0] / seg:.0f} at {cut_t[0] * 1e3:.1f} ms" if cut_t.size else "-"
        later = ", ".join(f"{v / seg:.0f}" for v in cut_v[1:6]) + (" ..." if cut_v.size > 6 else "")
        out.append(f"| {case.name} | {variant} | {f} | {case.sizes[f] / 1e6:g} MB | {at_share[f] / seg:.0f} "
                   f"/ {alone[f] / seg:.0f} | {before.max() / seg:.0f} | {exit_} | {later or '-'} "
                   f"| {int(np.sum(state_v == ns3.STATES.index('loss')))} | {at_other} "
                   f"| {w.window_at(f, result.finish[f]) / seg:.0f} | {result.finish[f] * 1e3:.2f} ms "
                   f"| {ours[f] * 1e3:.2f} ms ({ours[f] / result.finish[f] - 1:+.1%}) |")
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default="", help="comma-separated case names (default: every long-haul case)")
    p.add_argument("--variants", default=",".join(run.VARIANTS))
    p.add_argument("--draw", type=int, default=0, help="the flows' start times: draw 0 starts every flow at 0, "
                   "a later one as run.py --draws does (cases.start_times)")
    args = p.parse_args(argv)
    if args.draw < 0:
        p.error(f"--draw: must be >= 0, got {args.draw}")
    all_cases = run.cases_mod.all_cases()
    known = {c.name: c for c in all_cases}
    names = args.cases.split(",") if args.cases else [c.name for c in all_cases if c.window is not None]
    unknown = sorted(set(names) - set(known))
    if unknown:
        p.error(f"--cases: unknown {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    phased = [n for n in names if known[n].phases]
    if phased:
        p.error(f"--cases: {', '.join(phased)} runs in phases; trace a single-phase case")
    variants = args.variants.split(",")
    if not set(variants) <= set(run.VARIANTS):
        p.error(f"--variants: unknown {', '.join(sorted(set(variants) - set(run.VARIANTS)))}; "
                f"known: {', '.join(run.VARIANTS)}")
    head = ("| case | variant | flow | bytes | window at its share / alone | slow start's peak | its end set "
            "| later cuts | timeouts | window when the first other flow ended | at its end | ns-3 | profile |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    print("\n".join(lines), flush=True)
    for name in names:
        case = known[name]
        starts = run.cases_mod.start_times(case, 0, len(case.sizes), args.draw)
        batch = [ns3.instance(case.routes, case.sizes, case.capacity, case.link_src, case.link_dst,
                              latency=case.latency, variant=v, window=case.window, start_times=starts, trace=True)
                 for v in variants]
        for v, result in zip(variants, ns3.run(batch, timeout=3000)):
            lines += rows(case, v, result)
            print("\n".join(lines[-len(case.sizes):]), flush=True)
    os.makedirs(run.OUT, exist_ok=True)
    with open(os.path.join(run.OUT, "windows.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
