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


def loss_curve(history, path: str) -> None:
    """The searched objective per optimizer step."""
    plt = new_figure()
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(range(1, len(history) + 1), history)
    ax.set_xlabel("step")
    ax.set_ylabel("objective (smooth step time, s)")
    ax.grid(alpha=0.3)
    save_figure(fig, path)
    plt.close(fig)


def breakdown_bars(breakdowns: dict[str, dict[str, float]], path: str) -> None:
    """Stacked bars of step-time breakdowns, one bar per label (e.g. baseline, optimized)."""
    plt = new_figure()
    fig, ax = plt.subplots(figsize=(5, 3.2))
    labels = list(breakdowns)
    parts = [p for p in next(iter(breakdowns.values())) if any(abs(b.get(p, 0.0)) > 0 for b in breakdowns.values())]
    bottom = [0.0] * len(labels)
    for part in parts:
        values = [breakdowns[label].get(part, 0.0) for label in labels]
        ax.bar(labels, values, bottom=bottom, label=part)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_ylabel("seconds per step")
    ax.legend(fontsize=8)
    save_figure(fig, path)
    plt.close(fig)


def sweep_lines(table: dict, names: list[str], output: str, path: str) -> None:
    """``output`` against the first swept parameter, one line per value of the others."""
    import numpy as np

    plt = new_figure()
    fig, ax = plt.subplots(figsize=(5, 3.2))
    x = np.asarray(table[names[0]])
    others = [np.asarray(table[n]) for n in names[1:]]
    keys = sorted(set(zip(*others))) if others else [()]
    for key in keys:
        mask = np.ones(x.size, bool)
        for col, v in zip(others, key):
            mask &= col == v
        label = ", ".join(f"{n}={v:.3g}" for n, v in zip(names[1:], key)) or None
        ax.plot(x[mask], np.asarray(table[output])[mask], marker="o", label=label)
    ax.set_xlabel(names[0])
    ax.set_ylabel(output)
    ax.grid(alpha=0.3)
    if others:
        ax.legend(fontsize=7)
    save_figure(fig, path)
    plt.close(fig)
