"""The plots of ``yasgd bench largebatch`` (matplotlib, Agg backend): final test accuracy
against batch size for both optimizers, and test accuracy per epoch at 8K.
"""
from __future__ import annotations

import os
from typing import Optional

from yasgd.bench.largebatch_plan import ARM_LABEL, BASELINE_BATCH, NAME, _best

COLORS = {"baseline": "#555555", "sgd": "#C44E52", "lars": "#4C72B0"}


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _plot_accuracy(results, base_acc, batches, out_dir, quick) -> Optional[str]:
    """Final test accuracy against batch size: best of each grid (lines), every grid
    point (small dots), the baseline and the 2-point band below it."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    if base_acc is not None:
        ax.axhline(100 * base_acc, color=COLORS["baseline"], linestyle="--", linewidth=1,
                   label=f"batch 256 baseline ({100 * base_acc:.2f} %)")
        ax.axhspan(100 * base_acc - 2.0, 100 * base_acc, color=COLORS["baseline"], alpha=0.1,
                   label="baseline - 2 points")
    for arm, marker in (("sgd", "o"), ("lars", "s")):
        pts = [r for r in results if r["arm"] == arm and r.get("final_top1") is not None]
        ax.scatter([r["batch"] for r in pts], [100 * r["final_top1"] for r in pts], s=12,
                   color=COLORS[arm], alpha=0.35, zorder=2)
        best = [(b, _best(results, arm, b)) for b in batches]
        best = [(b, r) for b, r in best if r is not None]
        if best:
            xs, ys = [b for b, _ in best], [100 * r["final_top1"] for _, r in best]
            ax.plot(xs, ys, marker=marker, color=COLORS[arm], label=ARM_LABEL[arm] + " (best LR)",
                    zorder=3)
            for x, y in zip(xs, ys):
                ax.annotate(f"{y:.1f}", (x, y), textcoords="offset points", xytext=(4, 5),
                            fontsize=7, color=COLORS[arm])
    base_pts = [r for r in results if r["arm"] == "baseline" and r.get("final_top1") is not None]
    ax.scatter([r["batch"] for r in base_pts], [100 * r["final_top1"] for r in base_pts],
               color=COLORS["baseline"], marker="D", s=20, zorder=3)
    ax.set_xscale("log", base=2)
    ticks = [BASELINE_BATCH] + list(batches)
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t // 1024}K" if t >= 1024 else str(t) for t in ticks])
    ax.set_xlabel("global batch size")
    ax.set_ylabel("final test accuracy (%)")
    accs = [100 * r["final_top1"] for r in results if r.get("final_top1") is not None]
    if accs:
        lo = min(accs)
        top = max(accs + ([100 * base_acc] if base_acc else []))
        ax.set_ylim(max(0.0, min(lo, top - 15) - 2), min(100.0, top + 2))
    return _finish(plt, fig, ax, "Fashion-MNIST, same epoch budget: final test accuracy "
                   "against batch size", quick, "lower left",
                   os.path.join(out_dir, f"bench_{NAME}_accuracy.png"))


def _plot_epochs(results, out_dir, quick, batch: int = 8192) -> Optional[str]:
    """Test accuracy per epoch at 8K: every grid point of both arms (the best thicker),
    with the baseline's best run for reference."""
    runs = [r for r in results if r["batch"] == batch and r.get("epochs")]
    if not runs:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    base = _best(results, "baseline", BASELINE_BATCH)
    if base and base.get("epochs"):
        ax.plot([e["epoch"] for e in base["epochs"]], [100 * e["top1"] for e in base["epochs"]],
                color=COLORS["baseline"], linestyle=":", marker=".",
                label=f"batch 256 baseline, lr {base['lr']:g}")
    for r in sorted(runs, key=lambda r: (r["arm"], r["lr"])):
        best = r.get("best_of_grid")
        ax.plot([e["epoch"] for e in r["epochs"]], [100 * e["top1"] for e in r["epochs"]],
                color=COLORS[r["arm"]], linewidth=2.2 if best else 1.0,
                alpha=1.0 if best else 0.55, marker="o" if best else None, markersize=3,
                linestyle="-" if r["arm"] == "lars" else "--",
                label=f"{'recipe' if r['arm'] == 'lars' else 'SGD'} lr {r['lr']:g}"
                      + (" (best)" if best else "")
                      + (" diverged" if r.get("diverged") else ""))
    from matplotlib.ticker import MaxNLocator
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.set_ylabel("test accuracy (%)")
    return _finish(plt, fig, ax, f"Test accuracy per epoch at batch {batch // 1024}K", quick,
                   "lower right", os.path.join(out_dir, f"bench_{NAME}_epochs_{batch // 1024}k.png"))


def _finish(plt, fig, ax, title: str, quick: bool, legend_loc: str, path: str) -> str:
    """Title, grid and legend of a bench plot; save it to ``path`` and return the path."""
    ax.set_title(title + (" (--quick)" if quick else ""), fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc=legend_loc)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
