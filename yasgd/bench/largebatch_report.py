"""The report of ``yasgd bench largebatch``: the paper-style table (best of each arm's LR
grid), every grid point, the acceptance lines and the notes, written by
``yasgd.bench.common.write_results``; the plots come from yasgd.bench.largebatch_plots.
Every number is read from the runs' results (the BN momentum as the networks' BatchNorm
layers held it, the steps each run took).
"""
from __future__ import annotations

import os
from typing import Dict, List, Optional, Sequence

from yasgd.bench import common
from yasgd.bench.largebatch_plan import (ARM_LABEL, BASELINE_BATCH, BUDGET_S, FULL, MICRO, NAME,
                                         RunSpec, Scale, _best, _fmt_min, _geometry, _lr_label)
from yasgd.bench.largebatch_plots import _plot_accuracy, _plot_epochs


def _bn_held(results: Sequence[Dict[str, object]], arms: Sequence[str]) -> str:
    """The BN momentum the runs of ``arms`` held, by batch size where it differs."""
    held: Dict[object, List[int]] = {}
    for r in results:
        if r["arm"] in arms and r.get("bn_momentum") is not None:
            m = r["bn_momentum"]
            key = f"{m:.4g}" if isinstance(m, float) else str(m)
            held.setdefault(key, []).append(r["batch"])
    if not held:
        return "n/a"
    if len(held) == 1:
        return next(iter(held))
    return ", ".join(f"{m} at {'/'.join(_batch_label(b) for b in sorted(set(bs)))}"
                     for m, bs in sorted(held.items(), key=lambda kv: min(kv[1])))


def _batch_label(b: int) -> str:
    return f"{b // 1024}K" if b >= 1024 else str(b)


def _pct(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{100 * x:.2f}"


def _status(r: Dict[str, object]) -> str:
    if r.get("diverged"):
        return "diverged"
    if r.get("final_top1") is None:
        return "failed"
    return ""


def _relative_paths(obj, out_dir: str):
    """``obj`` with every absolute path under ``out_dir`` made relative to it (the JSON is
    committed as an example: no paths of the machine it ran on)."""
    root = os.path.abspath(out_dir) + os.sep
    if isinstance(obj, str):
        return obj.replace(root, "")
    if isinstance(obj, list):
        return [_relative_paths(x, out_dir) for x in obj]
    if isinstance(obj, dict):
        return {k: _relative_paths(v, out_dir) for k, v in obj.items()}
    return obj


def report(results: List[Dict[str, object]], scale: Scale, out_dir: str, quick: bool,
           hw: Dict[str, object], cal: Dict[str, object], est: float,
           est_full: Optional[float], wall: float, partial: Optional[tuple]) -> dict:
    os.makedirs(out_dir, exist_ok=True)
    base = _best(results, "baseline", BASELINE_BATCH)
    base_acc = base["final_top1"] if base else None
    batches = sorted({r["batch"] for r in results if r["arm"] != "baseline"})
    for r in results:
        b = _best(results, r["arm"], r["batch"])
        r["best_of_grid"] = b is not None and b["key"] == r["key"]

    def delta(a: Optional[float], b: Optional[float]) -> Optional[float]:
        return None if a is None or b is None else 100 * (a - b)

    def sd(x: Optional[float]) -> str:
        return "n/a" if x is None else f"{x:+.2f}"

    # table 1: the paper's layout, the best of each arm's grid
    rows = [[f"{BASELINE_BATCH}", base["steps_per_epoch"] * scale.epochs if base else "n/a",
             f"{_pct(base_acc)} (lr {base['lr']:g})" if base else "n/a", "", "", ""]]
    summary = []
    for b in batches:
        s, l = _best(results, "sgd", b), _best(results, "lars", b)
        sa, la = (s or {}).get("final_top1"), (l or {}).get("final_top1")
        any_r = next(r for r in results if r["batch"] == b)
        rows.append([f"{b:,}", any_r["steps_per_epoch"] * scale.epochs,
                     f"{_pct(sa)} (lr {s['lr']:g})" if s else "n/a",
                     f"{_pct(la)} (lr {l['lr']:g})" if l else "n/a",
                     sd(delta(la, base_acc)), sd(delta(la, sa))])
        summary.append({"batch": b, "sgd_best_top1": sa, "sgd_best_lr": (s or {}).get("lr"),
                        "recipe_best_top1": la, "recipe_best_lr": (l or {}).get("lr"),
                        "recipe_minus_baseline_pts": delta(la, base_acc),
                        "recipe_minus_sgd_pts": delta(la, sa)})
    t1 = common.md_table(["batch", "steps", "SGD: test top-1 % (LR)",
                          "yasgd recipe: test top-1 % (LR)", "recipe - baseline (pts)",
                          "recipe - SGD (pts)"], rows, "rrrrrr")
    # table 2: every grid point
    rows2 = []
    for r in sorted(results, key=lambda r: (r["batch"], r["arm"] != "baseline",
                                            r["arm"] == "lars", r["lr"])):
        curve = [e["top1"] for e in r.get("epochs", [])]
        rows2.append([f"{r['batch']:,}", ARM_LABEL[r["arm"]], _lr_label(_spec_of(r)),
                      f"{r['micro']} x {r['accumulate']}",
                      _pct(r.get("final_top1")) + (" **best**" if r["best_of_grid"] else ""),
                      _pct(max(curve)) if curve else "n/a",
                      f"{r.get('bn_momentum', 0):.3g}" if r.get("bn_momentum") is not None else "",
                      f"{r.get('wall_s', 0):.0f}", _status(r)])
    t2 = common.md_table(["batch", "arm", "LR", "micro x accumulate", "final top-1 %",
                          "best epoch top-1 %", "BN momentum", "wall s", ""], rows2,
                         "llllrrrrl")
    table = ("Best of each arm's LR grid (final test accuracy after the same epoch budget; "
             f"baseline: batch {BASELINE_BATCH}, SGD + momentum):\n\n" + t1
             + "\n\nEvery grid point:\n\n" + t2)

    def at(b: int, key: str) -> Optional[float]:
        return next((s[key] for s in summary if s["batch"] == b), None)

    acc = [common.acceptance("yasgd recipe at 8K within 2.0 points of the batch-256 baseline "
                             "(recipe - baseline)", at(8192, "recipe_minus_baseline_pts"),
                             -2.0, unit=" pts")]
    for b in (8192, 16384):
        line = common.acceptance(f"yasgd recipe above the best SGD arm at {b // 1024}K "
                                 f"(recipe - SGD)", at(b, "recipe_minus_sgd_pts"), 0.0,
                                 unit=" pts")
        if line["value"] is not None:
            line["met"] = line["value"] > 0.0      # strictly above
        acc.append(line)

    notes = [
        f"Scale: {scale.model} of width {scale.width} on the first {scale.limit:,} of "
        f"Fashion-MNIST's 60,000 training images (every batch size sees every one of them each "
        f"epoch), tested on all 10,000 test images after every epoch; {scale.epochs} epochs "
        f"per run; {cal.get('jobs', 1)} run(s) at a time, one process each with "
        f"OMP_NUM_THREADS={cal.get('threads_per_job', 2)}; batches above {MICRO} "
        f"accumulated from micro-batches of {MICRO} (BN statistics per {MICRO} images); "
        f"seed {scale.seed} for every run; "
        + ("random crop (zero padding 2) and horizontal flip for every arm."
           if scale.augment else "no data augmentation for any arm (the same pixels for "
           "every arm; with so few steps at a large batch, augmentation mostly slows "
           "fitting)."),
        f"Schedule of every run: linear warm-up from 0 over {scale.warmup_epochs:g} epochs, "
        f"then polynomial decay (power {scale.power:g}) to 0 at the end, per step: "
        + ", ".join(f"{_geometry(b, scale.limit)[2] * scale.epochs} steps at "
                    f"{b // 1024 if b >= 1024 else b}{'K' if b >= 1024 else ''}"
                    for b in [BASELINE_BATCH] + list(batches)) + " in all.",
        f"Baseline and SGD arm: SGD with momentum 0.9, WD 5e-4 (constant, not on BN/bias), "
        f"no label smoothing, BN momentum fixed (as the networks' BatchNorm layers held it: "
        f"{_bn_held(results, ('baseline', 'sgd'))}), BN gammas initialised to 1, no polishing; "
        f"baseline LR grid {', '.join(f'{x:g}' for x in scale.baseline_lrs)}; SGD arm "
        f"lr = base x batch/256 with base in {{{', '.join(f'{x:g}' for x in scale.sgd_base_lrs)}}} "
        f"(linear scaling rule, Goyal et al. 2017).",
        f"yasgd recipe: LARS (eta 0.001, eps 1e-9, momentum 0.9, WD 5e-4 following the LR, "
        f"no LARS/WD on BN and bias, fused path), label smoothing 0.1, BN momentum "
        f"1 - 1/(micro-batches per epoch), the BN updates of an epoch "
        f"(model.bn_momentum_rule=iterations, clipped to [0.5, 0.999]; as the networks' "
        f"BatchNorm layers held it: {_bn_held(results, ('lars',))}), "
        f"last BN gamma of each residual block initialised to 0"
        + (f", last {scale.polish_epochs} epoch(s) without augmentation"
           if scale.augment and scale.polish_epochs else "")
        + f"; lr = c x sqrt(batch/4096) with c in "
        f"{{{', '.join(f'{x:g}' for x in scale.lars_cs)}}}.",
        "The best LR of each arm is picked by final test accuracy (there is no separate "
        "validation split), as in the LARS paper's tables; every grid point is listed.",
        f"Wall time: {_fmt_min(wall)} measured (estimate before starting: {_fmt_min(est)}"
        + (f"; full mode estimated at {_fmt_min(est_full)} from the same calibration"
           if est_full is not None and quick else "")
        + f"). Calibration ({cal.get('jobs', 1)} side by side): "
          f"{cal['train_img_s'][str(MICRO)]:.0f} img/s training per run at micro-batch "
          f"{MICRO}, {cal['eval_s']:.1f} s per evaluation, the processes busy "
          f"{100 * (cal.get('cpu_share') or 1.0):.0f} % of their threads' time (shared "
          f"machine: 1-min load average {hw['load_avg_1min']} at start). Per-run wall "
          f"times are of runs sharing the machine with {cal.get('jobs', 1) - 1} other(s).",
        f"Scale chosen for the budget: the example size this benchmark was specified with "
        f"(all 60,000 images, width 16, 20 epochs) trains too slowly on 2 cores to give "
        f"enough steps at a large batch within {BUDGET_S // 60} minutes, so the full mode "
        f"trains a subset of {FULL.limit:,} images, width {FULL.width} with a strided stem, no "
        f"augmentation for any arm (with so few steps it slowed fitting more than it "
        f"helped), {FULL.epochs} epochs, poly power {FULL.power:g} for every arm (it fitted "
        f"faster than power 2 in pilot runs), a single baseline LR, and runs side by side.",
    ]
    if partial:
        notes.insert(0, f"PARTIAL: {partial[0]} of {partial[1]} runs done.")
    plots: List[str] = []
    if partial is None:
        plots = [_plot_accuracy(results, base_acc, batches, out_dir, quick),
                 _plot_epochs(results, out_dir, quick)]
        plots = [p for p in plots if p]
    setup = {"scale": dict(scale.__dict__), "micro_batch": MICRO, "calibration": cal,
             "estimate_s": round(est, 1), "estimate_full_s": None if est_full is None else round(est_full, 1),
             "wall_s": round(wall, 1), "budget_s": BUDGET_S,
             "jobs": cal.get("jobs", 1), "omp_num_threads": cal.get("threads_per_job"),
             "baseline_top1": base_acc, "summary": summary}
    records = [_relative_paths(dict(r), out_dir) for r in results]
    paths = common.write_results(
        out_dir, NAME, records, table, notes=notes,
        title="Large-batch training in miniature: SGD vs yasgd's recipe (yasgd bench largebatch)",
        setup=setup, quick=quick, hw=hw, acceptance_lines=acc, plots=plots,
        extra={"partial": list(partial) if partial else None})
    if partial is None:
        common.say(t1)
        common.say("")
        common.say(t2)
        common.say("")
        common.say(common.acceptance_table(acc))
        common.say(f"wall time {_fmt_min(wall)}; wrote {paths['json']}, {paths['md']}"
                   + "".join(f", {p}" for p in plots))
    return {"records": records, "summary": summary, "acceptance": acc, "paths": paths,
            "plots": plots}


def _spec_of(r: Dict[str, object]) -> RunSpec:
    return RunSpec(r["key"], r["arm"], r["batch"], r["lr"], r["lr_factor"], r["micro"],
                   r["accumulate"], r["steps_per_epoch"], r["images_per_epoch"])
