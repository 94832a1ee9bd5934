"""What the training benches (``bench largebatch``, ``bench ablation``) share in their
reports: the table of each arm's LR search and seeds, the compute statement, the
acceptance line on the grids, and the plots' frame. Every figure is read from the arms'
summaries (yasgd.bench.study.Search.summary), which read the cached runs' results.
"""
from __future__ import annotations

import os
from typing import Dict, List, Optional, Sequence

from yasgd import outputs
from yasgd.bench import common


def pct(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{100 * x:.2f}"


def spread(x: Optional[float]) -> str:
    """A spread in points (never signed)."""
    return "n/a" if x is None else f"{x:.2f}"


def pts(x: Optional[float]) -> str:
    if x is None:
        return "n/a"
    r = round(x, 2)
    return "0.00" if r == 0 else f"{r:+.2f}"       # no signed zero


def larger_spread(*summaries: Optional[Dict[str, object]],
                  key: str = "spread_pts") -> Optional[float]:
    """The larger of the given arms' spreads (points; on the test top-1 unless ``key`` says
    ``val_spread_pts`` or ``fresh_spread_pts``); None while any has none."""
    vals = [s.get(key) for s in summaries if s is not None]
    return None if not vals or None in vals else max(vals)


def diff_pts(a: Optional[Dict[str, object]], b: Optional[Dict[str, object]],
             key: str = "mean_test_top1") -> Optional[float]:
    """a - b in points on ``key`` (the test mean unless told); None while either is unknown."""
    x, y = (a or {}).get(key), (b or {}).get(key)
    return None if x is None or y is None else 100 * (x - y)


def seeds_text(xs: Sequence[int]) -> str:
    return ", ".join(str(x) for x in xs)


def cell(mean: Optional[float], spread: Optional[float], lr: Optional[float] = None) -> str:
    """A mean (%) with half its spread and, when given, the LR: "90.68 ± 0.04 (lr 8)"."""
    if mean is None:
        return "pending"
    return (f"{100 * mean:.2f}" + (f" ± {spread / 2:.2f}" if spread is not None else "")
            + (f" (lr {lr:g})" if lr is not None else ""))


def holds(x: Optional[bool]) -> str:
    return {True: "yes", False: "**no**", None: "pending"}[x]


def fresh_arm(s: Dict[str, object]) -> Dict[str, object]:
    """An arm on its fresh seeds (seeds no choice read), by the rule fixed before their runs:
    its fresh mean lies within the larger of its two spreads (its seeds', its fresh seeds')
    of its mean. ``holds`` is None while a fresh run is still to train."""
    m, fm = s["mean_test_top1"], s["fresh_mean_test_top1"]
    shift = None if m is None or fm is None else 100 * (fm - m)
    # the larger of the two spreads (one fresh seed, as in --quick, has none of its own)
    spreads = [x for x in (s["spread_pts"], s["fresh_spread_pts"]) if x is not None]
    allowed = max(spreads) if spreads and shift is not None else None
    return {"arm": s["arm"], "label": s["label"], "batch": s["batch"],
            "lr": s["best_lr"], "seeds": s["seeds"], "fresh_seeds": s["fresh_seeds"],
            "mean": m, "spread_pts": s["spread_pts"],
            "fresh_test_top1_by_seed": s["fresh_test_top1_by_seed"], "fresh_mean": fm,
            "fresh_spread_pts": s["fresh_spread_pts"], "shift_pts": shift,
            "allowed_pts": allowed,
            "holds": None if shift is None or allowed is None else abs(shift) <= allowed}


def tally(checks: Sequence[Optional[bool]]) -> Dict[str, object]:
    """A fresh-seed check's count: how many hold, of how many; pending while any is None."""
    return {"passed": sum(1 for c in checks if c), "checks": len(checks),
            "pending": None in checks}


def fresh_line(criterion: str, fresh: Dict[str, object]) -> Dict[str, object]:
    """The acceptance line of a fresh-seed check (``passed`` of ``checks``): open (met None)
    while a fresh run is still to train."""
    line = common.acceptance(criterion, fresh["passed"], fresh["checks"], unit=" checks",
                             count=True)
    if fresh["pending"] or not fresh["checks"]:
        line["met"] = None
    return line


def fresh_arm_table(arms: Sequence[Dict[str, object]]) -> str:
    """One row per :func:`fresh_arm`: its seeds and fresh seeds, the shift and the check."""
    rows = [[a["label"], "" if a["lr"] is None else f"{a['lr']:g}", seeds_text(a["seeds"]),
             cell(a["mean"], a["spread_pts"]), seeds_text(a["fresh_seeds"]),
             ", ".join(pct(t) for t in a["fresh_test_top1_by_seed"]),
             cell(a["fresh_mean"], a["fresh_spread_pts"]), pts(a["shift_pts"]),
             spread(a["allowed_pts"]), holds(a["holds"])] for a in arms]
    return common.md_table(["arm", "LR", "seeds", "test top-1 % (mean ± spread/2)",
                            "fresh seeds", "test top-1 % by fresh seed",
                            "fresh: mean ± spread/2", "fresh - mean (pts)",
                            "larger spread (pts)", "within"], rows, "lrrrrrrrrl")


def search_table(summaries: Sequence[Dict[str, object]]) -> str:
    """One row per arm: every grid point's validation top-1 (the chosen one in bold, a grid
    whose best is at an edge flagged), the test top-1 of each seed at the chosen LR, the mean
    and the spread."""
    rows = []
    for s in summaries:
        cells = []
        states = s.get("grid_state") or ["done"] * len(s["grid_lrs"])
        for lr, v, st in zip(s["grid_lrs"], s["grid_val_top1"], states):
            c = f"{lr:g}: {pct(v) if st == 'done' else st}"
            cells.append(f"**{c}**" if s["best_lr"] is not None and lr == s["best_lr"] else c)
        where = ("inside" if s["best_inside_grid"] else
                 "at the edge (grid capped)" if s["grid_capped"] else
                 "searching" if s["best_lr"] is None else "at the edge")
        rows.append([s["label"], f"{s['batch']:,}", "; ".join(cells), where,
                     ", ".join(pct(t) for t in s["test_top1_by_seed"]) or "",
                     pct(s["mean_test_top1"]), spread(s["spread_pts"])])
    return common.md_table(["arm", "batch", "LR grid: validation top-1 % (chosen in bold)",
                            "chosen LR", "test top-1 % by seed", "mean", "spread (pts)"],
                           rows, "lrllrrr")


def grids_line(summaries: Sequence[Dict[str, object]]) -> Dict[str, object]:
    """Acceptance: every arm's best LR strictly inside its grid."""
    inside = sum(1 for s in summaries if s["best_inside_grid"])
    line = common.acceptance("every arm's best LR (validation) strictly inside its LR grid",
                             inside, len(summaries), unit=" arms", count=True)
    line["met"] = inside == len(summaries) and all(s["complete"] for s in summaries)
    return line


def compute_note(comp: Dict[str, object], jobs: int) -> str:
    left = comp.get("runs_left_at_least") or 0
    return (f"Compute: {comp['runs']} runs in this table, {comp['run_wall_h']:.2f} h of run "
            f"wall time ({comp['core_h']:.2f} core-hours; {comp['mean_run_s']:.0f} s a run, "
            f"{jobs} side by side)"
            + ("; nothing left to train." if not left else
               f"; at least {left} run(s) still to train"
               + ("" if comp.get("left_core_h_at_least") is None else
                  f" (about {comp['left_core_h_at_least']:.1f} more core-hours)")
               + ": the same command continues from the cache."))


def code_note(code: Dict[str, object]) -> str:
    """The code every run of a table ran (``Study.code``): one version, each module once."""
    if not code.get("version"):
        return "Code version of every run in this table: n/a (no runs)."
    return (f"Code version of every run in this table: {code['version']}, one source of each "
            f"of the {len(code['modules'])} yasgd modules the runs loaded (the JSON's "
            f"setup.code lists each with its SHA-256); the cache reads only runs of the "
            f"checkout's code.")


def method_note(scale) -> str:
    return (f"Method, fixed before any run: each arm's LR is searched on a validation split, "
            f"the {min(60000 - scale.limit, scale.eval_limit or 60000):,} Fashion-MNIST training "
            f"images after the first "
            f"{scale.limit:,} the runs train on, with seed 0: a grid of 3 points (ratio 2), "
            f"extended by one point beyond whichever edge holds the best validation top-1 "
            f"until the best is strictly inside (a diverged run counts as 0); then the other "
            "seeds train at the chosen LR. The test set ("
            + (f"its first {scale.eval_limit:,} images" if scale.eval_limit else "all 10,000 images")
            + ") is read once per "
            "run, after training, and only for the tables: an arm's figure is the mean of its "
            "seeds' test top-1 at the chosen LR, its spread max - min over those seeds.")


def relative_paths(obj, out_dir: str):
    """``obj`` with every absolute path under ``out_dir`` made relative to it."""
    root = os.path.abspath(out_dir) + os.sep
    if isinstance(obj, str):
        return obj.replace(root, "")
    if isinstance(obj, list):
        return [relative_paths(x, out_dir) for x in obj]
    if isinstance(obj, dict):
        return {k: relative_paths(v, out_dir) for k, v in obj.items()}
    return obj


def plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as p
    return p


def finish(p, fig, ax, title: str, quick: bool, legend_loc: Optional[str], path: str) -> str:
    ax.set_title(title + (" (--quick)" if quick else ""), fontsize=9)
    ax.grid(True, alpha=0.3)
    if legend_loc and ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc=legend_loc)
    fig.tight_layout()
    outputs.save_figure(fig, path, dpi=110)
    p.close(fig)
    return path


def seeds_of(summaries: Sequence[Dict[str, object]]) -> List[int]:
    out: List[int] = []
    for s in summaries:
        out = sorted(set(out) | set(s["seeds"]))
    return out
