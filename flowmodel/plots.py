"""Plots for the command line (matplotlib, headless); every file is written atomically."""

from __future__ import annotations

import os
import tempfile


def _save(fig, path: str) -> None:
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".png")
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=120, bbox_inches="tight")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _figure():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def loss_curve(history, path: str) -> None:
    """The searched objective per optimizer step."""
    plt = _figure()
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(range(1, len(history) + 1), history)
    ax.set_xlabel("step")
    ax.set_ylabel("objective (smooth step time, s)")
    ax.grid(alpha=0.3)
    _save(fig, path)
    plt.close(fig)


def breakdown_bars(breakdowns: dict[str, dict[str, float]], path: str) -> None:
    """Stacked bars of step-time breakdowns, one bar per label (e.g. baseline, optimized)."""
    plt = _figure()
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
    _save(fig, path)
    plt.close(fig)
