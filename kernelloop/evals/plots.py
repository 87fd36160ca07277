"""The bench plots, drawn with matplotlib's Agg backend (no display needed).

Each function takes plain numbers and a path, writes one PNG and returns the path. Callers
decide whether there is anything to plot; an empty input is a ValueError, not an empty chart.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot: headless machines have no display
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

from kernelloop.evals.metrics import solve_rate_curve  # noqa: E402

_DPI = 120
_GOOD, _BAD, _NONE = "#2a9d8f", "#e76f51", "#b0b0b0"


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=_DPI)
    plt.close(fig)
    return path


def plot_variant_speedups(speedups: Mapping[str, float | None], path: Path,
                          baseline: str = "FlexAttention") -> Path:
    """Bars: speedup of each variant over `baseline` (None: unsolved, drawn as an empty grey stub)."""
    if not speedups:
        raise ValueError("no variants to plot")
    labels = list(speedups)
    values = [speedups[k] or 0.0 for k in labels]  # None (unsolved) draws as a zero-height stub
    colors = [_NONE if speedups[k] is None else (_GOOD if value >= 1 else _BAD) for k, value in zip(labels, values)]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(labels)), 4.0))
    bars = ax.bar(range(len(labels)), values, color=colors)
    ax.axhline(1.0, color="black", linewidth=1, linestyle="--", label=f"{baseline} (1.0x)", zorder=0)
    for bar, label in zip(bars, labels):
        value = speedups[label]
        text = "not solved" if value is None else f"{value:.2f}x"
        ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom",
                    fontsize=8, xytext=(0, 2), textcoords="offset points",
                    bbox={"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none"})
    ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right")
    ax.set_ylabel(f"speedup over {baseline}")
    ax.set_title(f"Speedup per attention variant over {baseline}")
    ax.set_ylim(0, max([1.2, *values]) * 1.15)
    ax.legend(loc="upper right", fontsize=8)
    return _save(fig, path)


def plot_solve_curve(times_to_solve_s: Sequence[float | None], total: int, path: Path) -> Path:
    """Inference-time scaling: share of problems solved within t seconds spent on each, against t.

    `times_to_solve_s` has one entry per solved problem (its first correct attempt) and None
    for the unsolved; `total` counts every problem of the run.
    """
    if total <= 0:
        raise ValueError("no problems to plot")
    known = [t for t in times_to_solve_s if t is not None]
    horizon_s = max(max(known, default=0.0) * 1.05, 1.0)
    unit, per = ("min", 60.0) if horizon_s >= 120 else ("s", 1.0)
    grid = sorted({0.0, horizon_s, *known})
    rates = solve_rate_curve(times_to_solve_s, total, grid)
    fig, ax = plt.subplots(figsize=(6.5, 4.0))
    ax.step([g / per for g in grid], [100 * r for r in rates], where="post", color=_GOOD, linewidth=2)
    ax.set_xlabel(f"time spent per problem ({unit})")
    ax.set_ylabel(f"problems solved (% of {total})")
    ax.set_ylim(0, 105)
    ax.set_xlim(0, horizon_s / per)
    ax.set_title("Solve rate against time spent per problem")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def plot_speedup_distribution(speedups: Mapping[str, Sequence[float]], path: Path) -> Path:
    """Histograms on a log axis of correct problems' speedups, one series per baseline."""
    series = {name: list(values) for name, values in speedups.items() if values}
    if not series:
        raise ValueError("no speedups to plot")
    everything = [v for values in series.values() for v in values]
    low, high = min(everything + [0.5]), max(everything + [2.0])
    edges = [math.exp(math.log(low) + i * (math.log(high) - math.log(low)) / 24) for i in range(25)]
    fig, ax = plt.subplots(figsize=(6.5, 4.0))
    ax.hist(list(series.values()), bins=edges, label=[f"over {n} (n={len(v)})" for n, v in series.items()],
            alpha=0.85)
    ax.axvline(1.0, color="black", linewidth=1, linestyle="--")
    ax.set_xscale("log")
    ticks = [2.0 ** k for k in range(math.floor(math.log2(low)), math.ceil(math.log2(high)) + 1)]
    ax.set_xticks(ticks, [f"{t:g}x" for t in ticks])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("speedup (log scale; > 1 is faster)")
    ax.set_ylabel("problems")
    ax.set_title("Speedup distribution of correct kernels")
    ax.legend(fontsize=8)
    return _save(fig, path)
