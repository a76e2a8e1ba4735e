"""Plots for the command line (matplotlib, headless); every file is written atomically."""

from __future__ import annotations

import io

from .results import write_bytes


def save_figure(fig, path: str) -> None:
    """Save ``fig`` as a PNG at ``path``, atomically (``results.write_bytes``)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120, bbox_inches="tight")
    write_bytes(path, buffer.getvalue())


def new_figure():
    """matplotlib's pyplot on the headless Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# One colour per breakdown component, the same in every plot and run (matplotlib's tab10 order).
COMPONENT_COLOURS = {"compute": "#1f77b4", "tp": "#ff7f0e", "cp": "#8c564b", "ep": "#e377c2",
                     "pipeline": "#2ca02c", "dp": "#d62728"}


def loss_curve(history, path: str, *, exact: dict[str, float] | None = None, rates: str = "smooth") -> None:
    """The searched objective per optimizer step (on ``rates``: smooth or exact), with the exact step
    time at the labelled points (``{"baseline (exact)": s, "result (exact)": s}``) as horizontal lines."""
    plt = new_figure()
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    ax.plot(range(1, len(history) + 1), history, label=f"searched objective ({rates} rates)")
    for (label, value), style in zip((exact or {}).items(), ("--", ":", "-.")):
        ax.axhline(value, color="black", linestyle=style, linewidth=1, label=f"{label}: {value:.4g} s")
    ax.set_xlabel("step")
    ax.set_ylabel("step time (s)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    save_figure(fig, path)
    plt.close(fig)


def breakdown_bars(breakdowns: dict[str, dict[str, float]], path: str, *, spread: dict[str, dict] | None = None,
                   spread_label: str = "min-max over seeds") -> None:
    """Stacked bars of step-time breakdowns, one bar per label (e.g. baseline, optimized); each
    component keeps its colour (``COMPONENT_COLOURS``) and the legend sits outside the bars.
    ``spread``: per label, statistics of the step time over routing seeds (``min``, ``max``), drawn
    as an error bar over the bar."""
    plt = new_figure()
    fig, ax = plt.subplots(figsize=(6, 3.4))
    labels = list(breakdowns)
    parts = [p for p in next(iter(breakdowns.values())) if any(abs(b.get(p, 0.0)) > 0 for b in breakdowns.values())]
    parts.sort(key=lambda p: list(COMPONENT_COLOURS).index(p) if p in COMPONENT_COLOURS else len(COMPONENT_COLOURS))
    bottom = [0.0] * len(labels)
    for part in parts:
        values = [breakdowns[label].get(part, 0.0) for label in labels]
        ax.bar(labels, values, bottom=bottom, label=part, color=COMPONENT_COLOURS.get(part))
        bottom = [b + v for b, v in zip(bottom, values)]
    if spread:
        x = [i for i, label in enumerate(labels) if label in spread]
        lo, hi = ([spread[labels[i]][e] for i in x] for e in ("min", "max"))
        ax.vlines(x, lo, hi, color="black", linewidth=1.2, label=spread_label)
        ax.plot(x + x, lo + hi, linestyle="none", marker="_", markersize=10, color="black")
    ax.set_ylabel("seconds per step")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    save_figure(fig, path)
    plt.close(fig)


_UNIT_SCALE = {"bytes/s": (1e9 / 8, "Gbps"), "ratio": (1.0, "ratio")}


def _value(v: float, unit: str) -> str:
    return f"{v:.4g}:1" if unit == "ratio" else f"{v:.4g} {unit}"


def _geometric(values) -> bool:
    import numpy as np

    v = np.unique(np.asarray(values, float))
    return v.size >= 3 and (v > 0).all() and np.allclose(np.diff(np.log(v)), np.log(v[1] / v[0]), rtol=1e-6)


def sweep_lines(table: dict, names: list[str], output: str, path: str, *, units: dict[str, str] | None = None,
                band: tuple[str, str] | None = None) -> None:
    """``output`` against the first numeric swept parameter (in Gbps for capacities; log axis when the
    grid is geometric; a setting such as a policy name is a categorical axis when nothing is numeric),
    one line per value of the others, each with its own marker and line style; ``band``: the (low,
    high) columns shaded around each line (the min-max over routing seeds)."""
    import numpy as np

    plt = new_figure()
    fig, ax = plt.subplots(figsize=(6, 3.6))
    units = units or {}

    def scaled(name):
        return _UNIT_SCALE.get(units.get(name, ""), (1.0, units.get(name, "")))

    def numeric(name):
        return all(isinstance(v, (int, float, np.number)) and not isinstance(v, bool) for v in table[name])

    def label(name, v):
        return f"{name} = {_value(v / scaled(name)[0], scaled(name)[1])}" if numeric(name) else f"{name} = {v}"

    first = next((n for n in names if numeric(n)), names[0])
    names = [first] + [n for n in names if n != first]
    factor, unit = scaled(first)
    categories = None if numeric(first) else list(dict.fromkeys(table[first]))
    x = (np.asarray(table[first], float) / factor if categories is None
         else np.asarray([categories.index(v) for v in table[first]], float))
    others = [np.asarray(table[n], dtype=object) for n in names[1:]]
    keys = list(dict.fromkeys(zip(*others))) if others else [()]
    markers, styles = "osD^vP*X", ("-", "--", "-.", ":")
    for i, key in enumerate(keys):
        mask = np.ones(x.size, bool)
        for col, v in zip(others, key):
            mask &= col == v
        (line,) = ax.plot(x[mask], np.asarray(table[output])[mask], marker=markers[i % len(markers)],
                          linestyle=styles[i % len(styles)], markersize=5,
                          label=", ".join(label(n, v) for n, v in zip(names[1:], key)) or None)
        if band is not None:
            order = np.argsort(x[mask])
            ax.fill_between(x[mask][order], np.asarray(table[band[0]], float)[mask][order],
                            np.asarray(table[band[1]], float)[mask][order], color=line.get_color(), alpha=0.15,
                            linewidth=0)
    if categories is not None:
        ax.set_xticks(range(len(categories)), [str(c) for c in categories])
    elif _geometric(x):
        ax.set_xscale("log")
        ax.set_xticks(np.unique(x), [f"{v:g}" for v in np.unique(x)])
        ax.xaxis.set_minor_locator(plt.matplotlib.ticker.NullLocator())
    elif np.unique(x).size <= 12 and np.all(x == np.round(x)):  # counts and seeds: a tick at each value
        ax.set_xticks(np.unique(x), [f"{v:g}" for v in np.unique(x)])
    ax.ticklabel_format(axis="y", useOffset=False, style="plain")
    ax.set_xlabel(f"{first} ({unit})" if unit else first)
    ax.set_ylabel(output.removesuffix("_s").replace("_", " ") + " (s)" if output.endswith("_s") else output)
    ax.grid(alpha=0.3, which="both")
    if others:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    save_figure(fig, path)
    plt.close(fig)


def failure_bars(jobs: dict[str, dict], path: str, *, top: int = 20) -> None:
    """Per job, its ``top`` worst failures and its expected and p99 step time, as the change against
    its healthy step time (in %, so a 2% slowdown reads as 2 on the axis); one panel per job, each
    sized to its bars, titles clear of each other (the ``failures`` command's figure). Over several
    routing seeds (a job's ``stats_s``), each bar is the mean with a min-max error bar and the healthy
    fabric's min-max is a shaded band: a bar inside it is no effect beyond a new hash draw."""
    import numpy as np

    plt = new_figure()
    rows = []
    for name, job in jobs.items():
        times = {k: v for k, v in job["step_time_s"].items() if v is not None and np.isfinite(v)}
        rows.append((name, job, sorted(times, key=times.get, reverse=True)[:top], times))
    heights = [1.2 + 0.22 * max(len(worst), 1) for _, _, worst, _ in rows]
    fig, axes = plt.subplots(len(rows), 1, figsize=(7.5, sum(heights) + 0.6 * len(rows)), squeeze=False,
                             gridspec_kw={"height_ratios": heights}, layout="constrained")
    for ax, (name, job, worst, times) in zip(axes[:, 0], rows):
        healthy = job["healthy_step_time_s"]
        change = [100.0 * (times[k] / healthy - 1.0) for k in worst[::-1]]
        stats, base = job.get("stats_s", {}), job.get("healthy_stats_s")
        ranges = [[100.0 * (stats[k][e] / healthy - 1.0) for k in worst[::-1]] for e in ("min", "max")] \
            if stats and all(k in stats for k in worst) else None
        error = None if ranges is None else [np.subtract(change, ranges[0]), np.subtract(ranges[1], change)]
        bars = ax.barh(range(len(worst)), change, color="#7f7f7f", xerr=error,
                       error_kw={"elinewidth": 0.8, "capsize": 2, "ecolor": "black"})
        ax.set_yticks(range(len(worst)), worst[::-1], fontsize=6)
        ax.bar_label(bars, [f"{c:+.2f}%" for c in change], fontsize=6, padding=2)
        marks = [0.0] + change + (ranges[0] + ranges[1] if ranges else [])
        if base is not None and base["max"] > base["min"]:
            band = [100.0 * (base[e] / healthy - 1.0) for e in ("min", "max")]
            ax.axvspan(*band, color="#1f77b4", alpha=0.15, label=f"healthy min-max over seeds ({band[0]:+.2f}% to "
                                                                 f"{band[1]:+.2f}%)")
            marks += band
        for value, label, style in ((job["expected_step_time_s"], "expected", "--"),
                                    (job["p99_step_time_s"], "p99", ":")):
            if value is not None and np.isfinite(value):
                pct = 100.0 * (value / healthy - 1.0)
                marks.append(pct)
                ax.axvline(pct, color="black", linestyle=style, linewidth=1,
                           label=f"{label} {value:.4f} s ({pct:+.2f}%)")
        ax.axvline(0.0, color="#1f77b4", linewidth=1, label=f"healthy {healthy:.4f} s")
        lo, hi = min(marks), max(marks)
        pad = max(0.15 * (hi - lo), 0.5)  # at least a percent of axis, so a 2% change is never a sliver
        ax.set_xlim(lo - pad, hi + 2 * pad)
        ax.set_title(f"{name}: healthy {healthy:.4f} s; {len(job['disconnected'])} failure(s) disconnect it",
                     fontsize=9, loc="left")
        ax.set_xlabel("step time against healthy (%)", fontsize=8)
        ax.grid(axis="x", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    save_figure(fig, path)
    plt.close(fig)


def pareto_front(points: list[dict], path: str, *, chosen: tuple[float, float] | None = None,
                 baseline: tuple[float, float] | None = None) -> None:
    """Step time against cost of each refined optimum of a budget sweep, with the configured
    budget's result and the baseline marked."""
    plt = new_figure()
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    ax.plot([p["cost"] for p in points], [p["step_time_s"] for p in points], marker="o", label="refined optimum")
    if chosen is not None:
        ax.plot(*chosen, marker="*", markersize=12, linestyle="none", color="#d62728", label="at the budget")
    if baseline is not None:
        ax.plot(*baseline, marker="s", linestyle="none", color="black", label="baseline")
    ax.xaxis.set_major_formatter(plt.matplotlib.ticker.EngFormatter())
    ax.set_xlabel("cost")
    ax.set_ylabel("step time (s)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save_figure(fig, path)
    plt.close(fig)


TRACE_COLOURS = {"compute": "#1f77b4", "collective": "#ff7f0e", "send_recv": "#2ca02c"}


def trace_timeline(spans: dict[int, dict[str, list[tuple[float, float]]]], makespan: float, path: str, *,
                   critical: list[tuple[int, float, float]] = ()) -> None:
    """One row per rank (``spans``: rank -> kind -> [(start, duration)]), compute and communication in
    their own colours, the critical path's nodes outlined, the makespan marked."""
    plt = new_figure()
    ranks = sorted(spans)
    fig, ax = plt.subplots(figsize=(8, min(1.2 + 0.18 * len(ranks), 12)))
    labelled = set()
    for row, rank in enumerate(ranks):
        for kind, bars in spans[rank].items():
            if bars:
                ax.broken_barh(bars, (row - 0.4, 0.8), facecolors=TRACE_COLOURS.get(kind, "#7f7f7f"),
                               label=None if kind in labelled else kind)
                labelled.add(kind)
    rows = {rank: row for row, rank in enumerate(ranks)}
    for rank, start, duration in critical:
        if rank in rows:
            ax.broken_barh([(start, duration)], (rows[rank] - 0.45, 0.9), facecolors="none", edgecolors="black",
                           linewidth=0.6)
    ax.axvline(makespan, color="black", linestyle="--", linewidth=1, label=f"makespan {makespan:.4g} s")
    ax.set_yticks(range(len(ranks)))
    ax.set_yticklabels([str(r) for r in ranks], fontsize=6 if len(ranks) > 16 else 8)
    ax.set_ylabel("rank")
    ax.set_xlabel("time (s)")
    ax.invert_yaxis()
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    save_figure(fig, path)
    plt.close(fig)


def link_utilisation(by_tier: dict[str, dict], hot: list[dict], path: str) -> None:
    """Left: per link tier, the mean and the max over its links of their peak and of their mean
    utilisation (%); right: the hottest links' peak and mean utilisation (the ``run --links`` figure)."""
    import numpy as np

    plt = new_figure()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 0.6 + max(3.0, 0.3 * len(hot))), layout="constrained",
                                      gridspec_kw={"width_ratios": [1, 1.3]})
    tiers = list(by_tier)
    y = np.arange(len(tiers))
    bars = (("max_peak_util", "max of peak", "#d62728"), ("mean_peak_util", "mean of peak", "#ff9896"),
            ("max_mean_util", "max of mean", "#1f77b4"), ("mean_mean_util", "mean of mean", "#aec7e8"))
    height = 0.8 / len(bars)
    for i, (key, label, colour) in enumerate(bars):
        left.barh(y + (i - 1.5) * height, [100 * by_tier[t][key] for t in tiers], height, label=label, color=colour)
    left.set_yticks(y, [f"{t} ({by_tier[t]['used']}/{by_tier[t]['links']})" for t in tiers], fontsize=7)
    left.invert_yaxis()
    left.set_xlim(0, 105)
    left.set_xlabel("utilisation (% of capacity)", fontsize=8)
    left.set_title("by tier (links used / links)", fontsize=9, loc="left")
    left.grid(axis="x", alpha=0.3)
    left.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=4)
    rows = np.arange(len(hot))
    right.barh(rows - 0.2, [100 * h["peak_util"] for h in hot], 0.4, color="#d62728", label="peak")
    right.barh(rows + 0.2, [100 * h["mean_util"] for h in hot], 0.4, color="#1f77b4", label="mean over the step")
    right.set_yticks(rows, [f"{h['link']} ({h['tier']})" for h in hot], fontsize=6)
    right.invert_yaxis()
    right.set_xlim(0, 105)
    right.set_xlabel("utilisation (% of capacity)", fontsize=8)
    right.set_title(f"the {len(hot)} hottest links", fontsize=9, loc="left")
    right.grid(axis="x", alpha=0.3)
    right.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    save_figure(fig, path)
    plt.close(fig)
