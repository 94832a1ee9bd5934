"""``yasgd bench largebatch`` (``make bench-largebatch``): the LARS paper's table in
miniature (You, Gitman, Ginsburg 2017, Table 3/4), on Fashion-MNIST with a CIFAR-style
ResNet-8, every run with the same epoch budget and the same LR schedule shape (linear
warm-up, then polynomial decay to 0):

    batch 256      SGD with momentum (the baseline)
    batch 1K..16K  (a) SGD + linear scaling rule + warm-up (Goyal et al. 2017):
                       lr = base_lr x batch / 256, base_lr from a small grid
                   (b) yasgd's full recipe: LARS (eta 0.001, eps 1e-9), warm-up, poly decay,
                       label smoothing 0.1, WD following the LR, BN momentum from the
                       BN updates (micro-batches) per epoch, zero-init last BN gamma (and
                       final polishing when the scale augments the data);
                       lr = c x sqrt(batch / 4096), c from a small grid

Every grid point is a real training run of the real code (``yasgd.config.load(None,
overrides)`` -> ``yasgd.train.build`` -> ``yasgd.train.fit``), one process per run,
``--jobs`` runs side by side (default 2, OMP_NUM_THREADS = cores / jobs each: the network
is too small for a second thread to pay, so runs side by side train more images per
second in all than one run with every thread), evaluated on the full 10,000 test images
after every epoch (``metrics.jsonl``, ``{"event": "eval", ...}``). Batches above 512 are
accumulated from micro-batches of 512
(``train.accumulate``): one process reaches 16K exactly as 32 workers x 512 would, BN
statistics per 512 images (the paper's GPUs: 40).

Scale (the example size the benchmark was specified with does not fit its time budget on
2 cores, so the full mode is smaller, and says so): a training subset of 49,152 images
(a multiple of 16K, so every batch size sees every image every epoch and nothing is
dropped), the demo's strided-stem
ResNet-8 of width 8, no data augmentation (the same pixels for every arm), 40 epochs
(240 steps at 8K, 120 at 16K), poly power 1, 1 baseline LR and 2 LRs per large-batch arm.
Before training, calibration runs (``--jobs`` side by side) measure images/s and
evaluation time on this machine now; the wall time of the whole plan is estimated from
them and printed.

Outputs in ``--out``: ``bench_largebatch.json`` (every run: config overrides, per-epoch
test accuracy, loss, LR, wall time), ``bench_largebatch.md`` (the paper-style table, every
grid point, the acceptance lines), ``bench_largebatch_accuracy.png`` (final test accuracy
against batch size, both optimizers) and ``bench_largebatch_epochs_8k.png`` (test accuracy
per epoch at 8K), every run directory under ``largebatch_runs/`` and each run's log in
``largebatch_runs/_work/``.

``python -m yasgd.bench.largebatch --out DIR [--quick] [--epochs E] [--limit N]
[--width W] [--jobs J]`` changes the scale (the CLI's ``yasgd bench largebatch`` uses the
defaults).

Modules: yasgd.bench.largebatch_plan (scales, configs, grid, estimate),
largebatch_workers (the processes that train and calibrate), largebatch_report and
largebatch_plots; this one schedules the processes.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Dict, List, Optional

from yasgd.bench import common
from yasgd.bench.largebatch_plan import (ARM_LABEL, BASELINE_BATCH, BUDGET_S, FULL,  # noqa: F401
                                         JOBS, LARS_REF_BATCH, MICRO, NAME, QUICK, RunSpec,
                                         Scale, _best, _fmt_min, _geometry, _lr_label,
                                         _overrides, estimate_s, plan, run_s, threads_per_job)
from yasgd.bench.largebatch_report import (_pct, _relative_paths, _spec_of,  # noqa: F401
                                           _status, report)
from yasgd.bench.largebatch_workers import worker_calibrate, worker_train  # noqa: F401


# -- workers (one process per run, JOBS side by side) ------------------------------------
def _worker_env(threads: int) -> Dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MXNET_OMP_MAX_THREADS=str(threads))
    for k in [k for k in env if k.startswith(("OMPI_", "PMI_", "PMIX_", "HOROVOD_RANK",
                                              "HOROVOD_SIZE"))]:
        del env[k]      # one process, never a Horovod job
    return env


# -- running ---------------------------------------------------------------------------
def _python_m(args: List[str], timeout: float, threads: int, log: Optional[str] = None) -> None:
    common.run_process("yasgd.bench.largebatch", args, env=_worker_env(threads),
                       timeout=timeout, log=log)


def calibrate(scale: Scale, tmp: str, jobs: int) -> Dict[str, object]:
    """``jobs`` calibration processes side by side (as the runs will be): the mean of
    their images/s and evaluation seconds."""
    from concurrent.futures import ThreadPoolExecutor
    threads = threads_per_job(jobs)

    def one(i: int) -> Dict[str, object]:
        path = os.path.join(tmp, f"calibration{i}.json")
        _python_m(["calibrate", "--width", str(scale.width), "--model", scale.model,
                   "--stem-stride", str(scale.stem_stride), "--result", path,
                   "--started", repr(time.time())], timeout=600, threads=threads,
                  log=os.path.join(tmp, f"calibration{i}.log"))
        return common.read_json(path)

    with ThreadPoolExecutor(max_workers=jobs) as ex:
        cals = list(ex.map(one, range(jobs)))
    mean = lambda xs: sum(xs) / len(xs)   # noqa: E731
    return {"train_img_s": {str(MICRO): mean([c["train_img_s"][str(MICRO)] for c in cals])},
            "startup_s": round(mean([c["startup_s"] for c in cals]), 2),
            "cpu_share": round(mean([c["cpu_share"] for c in cals]), 3),
            "eval_s": mean([c["eval_s"] for c in cals]), "jobs": jobs,
            "threads_per_job": threads, "per_process": cals}


def train_one(spec: RunSpec, tmp: str, timeout: float, threads: int) -> Dict[str, object]:
    spec_path = os.path.join(tmp, f"{spec.key}.spec.json")
    res_path = os.path.join(tmp, f"{spec.key}.result.json")
    common.write_json(spec_path, spec.to_dict())
    t0 = time.time()
    try:
        _python_m(["train", "--spec", spec_path, "--result", res_path], timeout=timeout,
                  threads=threads, log=os.path.join(tmp, f"{spec.key}.log"))
        res = common.read_json(res_path)
    except Exception as e:  # noqa: BLE001 -- a crashed run is a result too: say so
        res = {"final_top1": None, "diverged": False, "error": f"run failed: {e}", "epochs": []}
    res["wall_s"] = round(time.time() - t0, 1)
    return res


def run(out_dir: str = "results", quick: bool = False, epochs: Optional[int] = None,
        limit: Optional[int] = None, width: Optional[int] = None, jobs: int = JOBS) -> dict:
    import dataclasses
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
    ref = QUICK if quick else FULL
    scale = dataclasses.replace(ref)
    if epochs:
        scale.epochs = epochs
        scale.warmup_epochs = round(scale.warmup_epochs * epochs / ref.epochs, 2)
        scale.polish_epochs = min(scale.polish_epochs, epochs)
    if limit:
        scale.limit = limit
    if width:
        scale.width = width
    if jobs < 1:
        from yasgd import UsageError
        raise UsageError(f"--jobs must be at least 1, got {jobs}")
    threads = threads_per_job(jobs)
    os.makedirs(out_dir, exist_ok=True)
    run_dir = os.path.abspath(os.path.join(out_dir, "largebatch_runs"))
    tmp = os.path.join(run_dir, "_work")
    os.makedirs(tmp, exist_ok=True)
    specs = plan(scale, run_dir)
    full_specs = plan(FULL, run_dir)
    hw = common.hardware({"omp_num_threads": str(threads), "jobs": jobs})
    common.say(f"bench largebatch{' (--quick)' if quick else ''}: {scale.model} width "
               f"{scale.width} on the first {scale.limit:,} Fashion-MNIST training images "
               f"(test: all 10,000), {scale.epochs} epochs per run, {len(specs)} runs, "
               f"{jobs} at a time (one process each, OMP_NUM_THREADS={threads}); 1-min load "
               f"average {hw['load_avg_1min']}; per-run logs in {tmp}")
    t_start = time.time()
    cal = calibrate(scale, tmp, jobs)
    est = estimate_s(specs, scale, cal, jobs)
    same_model = (scale.width, scale.stem_stride) == (FULL.width, FULL.stem_stride)
    est_full = estimate_s(full_specs, FULL, cal, jobs) if same_model else None
    common.say(f"  calibration ({jobs} side by side): {cal['train_img_s'][str(MICRO)]:.0f} "
               f"img/s training per run at micro-batch {MICRO}, {cal['eval_s']:.1f} s per "
               f"evaluation, {cal['startup_s']:.1f} s start-up per run")
    share = cal.get("cpu_share") or 1.0
    common.say(f"  estimated wall time of this run: {_fmt_min(est)}"
               + (f"; of the full mode ({len(full_specs)} runs): {_fmt_min(est_full)}"
                  if est_full is not None and quick else "")
               + (f" -- over the {BUDGET_S // 60}-minute budget" if est > BUDGET_S else ""))
    if share < 0.9:
        common.say(f"  (the calibration processes got {100 * share:.0f} % of their threads' "
                   f"time: the machine is shared; on an idle one about {_fmt_min(est * share)})")
    results: List[Dict[str, object]] = []
    order = {s.key: i for i, s in enumerate(specs)}
    with ThreadPoolExecutor(max_workers=jobs) as ex:
        pending = {}
        for spec in specs:
            timeout = max(600.0, 6 * run_s(spec, scale, cal))
            pending[ex.submit(train_one, spec, tmp, timeout, threads)] = spec
        while pending:
            done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
            for fut in done:
                spec = pending.pop(fut)
                res = fut.result()
                results.append({**spec.to_dict(), **res})
                results.sort(key=lambda r: order[r["key"]])
                acc = res.get("final_top1")
                common.say(f"[{len(results)}/{len(specs)}] batch {spec.batch:>5} ({spec.micro} x "
                           f"{spec.accumulate}, {spec.steps_per_epoch} steps/epoch)  "
                           f"{ARM_LABEL[spec.arm]}  lr {_lr_label(spec)} -> final test accuracy "
                           f"{'n/a (' + str(res.get('error')) + ')' if acc is None else f'{100 * acc:.2f} %'}"
                           f", {res['wall_s']:.0f} s")
                if len(results) < len(specs):
                    # partial report after every run: a long run that is stopped still
                    # leaves results
                    report(results, scale, out_dir, quick, hw, cal, est, est_full,
                           time.time() - t_start, partial=(len(results), len(specs)))
    return report(results, scale, out_dir, quick, hw, cal, est, est_full,
                  time.time() - t_start, partial=None)


# -- command line ----------------------------------------------------------------------
def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m yasgd.bench.largebatch")
    ap.add_argument("--out", default="results")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--epochs", type=int, default=None, help="epoch budget of every run")
    ap.add_argument("--limit", type=int, default=None, help="training images (first N)")
    ap.add_argument("--width", type=int, default=None, help="ResNet width")
    ap.add_argument("--jobs", type=int, default=JOBS,
                    help=f"runs trained side by side, one process each with cores/jobs OMP "
                         f"threads (default {JOBS})")
    ap.add_argument("--worker", nargs="?", const="train", choices=("train", "calibrate"),
                    help=argparse.SUPPRESS)
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    ap.add_argument("--model", default="resnet8", help=argparse.SUPPRESS)
    ap.add_argument("--started", type=float, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--stem-stride", type=int, default=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        if args.worker == "calibrate":
            worker_calibrate(args.width or FULL.width, args.model, args.result,
                             args.started or time.time(), args.stem_stride)
        else:
            worker_train(args.spec, args.result)
        return 0
    run(out_dir=args.out, quick=args.quick, epochs=args.epochs, limit=args.limit,
        width=args.width, jobs=args.jobs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
