"""The plots of ``yasgd bench largebatch`` (matplotlib, Agg backend): mean test accuracy
against batch size for both optimizers (error bars: the seeds' min and max; hollow
diamonds: the compared arms' means on their fresh seeds), and
validation accuracy per epoch at 8K for every grid point.
"""
from __future__ import annotations

import os
from typing import Dict, Optional, Sequence

from yasgd.bench import study_report as sr
from yasgd.bench.study import BASELINE_BATCH, SEED_BASE

COLORS = {"baseline": "#555555", "sgd": "#C44E52", "lars": "#4C72B0"}
LABEL = {"sgd": "SGD + linear scaling + warm-up", "lars": "yasgd recipe"}


def accuracy_plot(name: str) -> str:
    """The file name of the accuracy-against-batch plot of bench ``name``."""
    return f"bench_{name}_accuracy.png"


def epochs_plot(name: str, batch: int) -> str:
    """The file name of the per-epoch validation plot of bench ``name`` at ``batch``."""
    return f"bench_{name}_epochs_{batch // 1024}k.png"


def plot_accuracy(summaries: Sequence[Dict[str, object]], rows, out_dir: str, quick: bool,
                  name: str) -> Optional[str]:
    base = next((s for s in summaries if s["arm"] == "baseline"), None)
    p = sr.plt()
    fig, ax = p.subplots(figsize=(7.5, 4.6))
    bm = base and base["mean_test_top1"]
    if bm:
        ax.axhline(100 * bm, color=COLORS["baseline"], linestyle="--", linewidth=1,
                   label=f"batch 256 baseline ({100 * bm:.2f} %, mean)")
        ax.axhspan(100 * bm - 1.0, 100 * bm, color=COLORS["baseline"], alpha=0.1,
                   label="baseline - 1 point")
    for opt, marker in (("sgd", "o"), ("lars", "s")):
        arms = sorted((s for s in summaries if s["optimizer"] == opt and s["arm"] != "baseline"
                       and s["mean_test_top1"] is not None), key=lambda s: s["batch"])
        if not arms:
            continue
        xs = [s["batch"] for s in arms]
        ys = [100 * s["mean_test_top1"] for s in arms]
        lo = [y - 100 * min(s["test_top1_by_seed"]) for y, s in zip(ys, arms)]
        hi = [100 * max(s["test_top1_by_seed"]) - y for y, s in zip(ys, arms)]
        ax.errorbar(xs, ys, yerr=[lo, hi], marker=marker, color=COLORS[opt], capsize=3,
                    label=LABEL[opt] + " (chosen LR, mean over seeds)")
        for x, y in zip(xs, ys):
            ax.annotate(f"{y:.1f}", (x, y), textcoords="offset points", xytext=(4, 5),
                        fontsize=7, color=COLORS[opt])
    # the fresh seeds' means (no choice read those runs), beside each arm's own point
    fresh = [s for s in summaries if s.get("fresh_mean_test_top1") is not None]
    for i, s in enumerate(fresh):
        opt = "baseline" if s["arm"] == "baseline" else s["optimizer"]
        ax.plot([s["batch"] * 1.08], [100 * s["fresh_mean_test_top1"]], marker="D",
                markerfacecolor="none", color=COLORS[opt], linestyle="none",
                label=None if i else "the same arm on its fresh seeds (mean)")
    ticks = sorted({BASELINE_BATCH} | {s["batch"] for s in summaries})
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t // 1024}K" if t >= 1024 else str(t) for t in ticks])
    ax.set_xlabel("global batch size")
    ax.set_ylabel("test accuracy (%)")
    return sr.finish(p, fig, ax, "Fashion-MNIST, same epoch budget: test accuracy against "
                     "batch size", quick, "lower left", os.path.join(out_dir, accuracy_plot(name)))


def plot_epochs(study, searches, batch: int, out_dir: str, quick: bool,
                name: str) -> Optional[str]:
    """Validation accuracy per epoch at ``batch``: every grid point (seed 0) of both
    optimizers, the chosen one thicker, and the baseline's chosen run."""
    shown = [s for s in searches if s.arm.batch == batch or s.arm.name == "baseline"]
    if not shown:
        return None
    p = sr.plt()
    fig, ax = p.subplots(figsize=(7.5, 4.6))
    for s in shown:
        for f in s.grid:
            r = s.results.get((f, SEED_BASE))
            if not r or not r.get("curve") or (s.arm.name == "baseline" and f != s.best):
                continue
            chosen = f == s.best
            c = COLORS["baseline" if s.arm.name == "baseline" else s.arm.optimizer]
            ax.plot([e["epoch"] for e in r["curve"]], [100 * e["val_top1"] for e in r["curve"]],
                    color=c, linewidth=2.2 if chosen else 1.0, alpha=1.0 if chosen else 0.55,
                    marker="o" if chosen else None, markersize=3,
                    linestyle=":" if s.arm.name == "baseline" else
                    "-" if s.arm.optimizer == "lars" else "--",
                    label=f"{s.arm.label} lr {s.arm.lr(f):g}" + (" (chosen)" if chosen else ""))
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation accuracy (%)")
    return sr.finish(p, fig, ax, f"Validation accuracy per epoch at batch {batch // 1024}K "
                     f"(seed 0)", quick, "lower right",
                     os.path.join(out_dir, epochs_plot(name, batch)))
