"""The plan of ``yasgd bench largebatch``: its scales, the arms' configs, the grid of runs
and the wall-time estimate of a plan from a calibration.

Every run is a ``yasgd.config.load(None, overrides)`` of :func:`_overrides`; batches above
:data:`MICRO` are accumulated from micro-batches of :data:`MICRO` (``train.accumulate``),
and :func:`_geometry` gives the step counts ``yasgd.train`` will compute for them.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

NAME = "largebatch"
MICRO = 512                   # micro-batch above which batches are accumulated
BASELINE_BATCH = 256
LARS_REF_BATCH = 4096         # LARS lr = c * sqrt(batch / LARS_REF_BATCH)
JOBS = 2                      # runs trained side by side (one process each)


BUDGET_S = 75 * 60            # the time budget the full mode is sized for


def threads_per_job(jobs: int) -> int:
    """OMP threads of each run when ``jobs`` run side by side on this machine's cores.
    (The ResNet-8 is too small for a second thread to pay: runs side by side, one thread
    each, train more images per second in all than one run with every thread.)"""
    return max(1, (os.cpu_count() or 2) // max(1, jobs))


@dataclass
class Scale:
    """Everything that sets the size of a bench run."""
    batches: Sequence[int]
    epochs: int
    limit: int                # training images (first N of the 60,000)
    width: int
    warmup_epochs: float
    polish_epochs: int
    baseline_lrs: Sequence[float]
    sgd_base_lrs: Sequence[float]     # x batch / 256
    lars_cs: Sequence[float]          # x sqrt(batch / 4096)
    model: str = "resnet8"
    seed: int = 0
    stem_stride: int = 2      # the demo's strided stem: a quarter of the compute per image
    power: float = 2.0        # polynomial decay of every run's LR after the warm-up
    augment: bool = True      # random crop (pad 2) + flip for every arm, or none for any


# The full scale, chosen from pilot runs at 8K: within the budget, steps at a large batch are
# what buys accuracy, so everything that costs steps went -- no augmentation (with so few
# steps it slowed fitting more than it helped), width 8 (width 16 was no better per step),
# 40 epochs, poly power 1 and a short warm-up (both fitted faster than power 2 and a longer
# warm-up), runs side by side. The LARS grid is c = 4 sqrt 2, 8 sqrt 2 (lr 8 and 16 at 8K).
FULL = Scale(batches=(1024, 4096, 8192, 16384), epochs=40, limit=49152, width=8,
             warmup_epochs=4.0, polish_epochs=0, baseline_lrs=(0.4,),
             sgd_base_lrs=(0.025, 0.05), lars_cs=(4 * math.sqrt(2), 8 * math.sqrt(2)),
             power=1.0, augment=False)
QUICK = Scale(batches=(1024, 8192), epochs=2, limit=8192, width=8,
              warmup_epochs=0.5, polish_epochs=0, baseline_lrs=(0.1,),
              sgd_base_lrs=(0.1,), lars_cs=(8.0,), power=1.0, augment=False)

ARM_LABEL = {"baseline": "SGD + momentum (baseline)",
             "sgd": "SGD + linear scaling + warm-up",
             "lars": "yasgd recipe (LARS + warm-up + poly + LS + WD sched. + BN)"}


# -- the plan --------------------------------------------------------------------------
@dataclass
class RunSpec:
    key: str
    arm: str                  # baseline | sgd | lars
    batch: int
    lr: float
    lr_factor: float          # base_lr (sgd/baseline) or c (lars)
    micro: int
    accumulate: int
    steps_per_epoch: int
    images_per_epoch: int
    overrides: List[str] = field(default_factory=list)

    def to_dict(self) -> Dict[str, object]:
        return dict(self.__dict__)


def _geometry(batch: int, limit: int) -> tuple:
    """(micro, accumulate, steps_per_epoch, images_per_epoch) as yasgd.train computes them
    for one rank (ArrayLoader: full micro-batches only; train: micro-batches // accumulate)."""
    micro = min(batch, MICRO)
    if batch % micro:
        raise ValueError(f"batch {batch} is not a multiple of the micro-batch {micro}")
    k = batch // micro
    n_micro = (limit // micro * micro) // micro
    steps = n_micro // k
    return micro, k, steps, steps * batch


def _lr_label(spec: RunSpec) -> str:
    if spec.arm == "lars":
        return f"{spec.lr:g} ({spec.lr_factor:g} x sqrt(B/4K))"
    if spec.arm == "sgd":
        return f"{spec.lr:g} ({spec.lr_factor:g} x B/256)"
    return f"{spec.lr:g}"


def _overrides(scale: Scale, arm: str, batch: int, lr: float, micro: int, k: int,
               run_dir: str, name: str) -> List[str]:
    common_ = [
        f"run.name={name}", f"run.dir={run_dir}", f"run.seed={scale.seed}",
        f"model.name={scale.model}", f"model.width={scale.width}", "model.classes=10",
        f"model.stem_stride={scale.stem_stride}",
        "data.kind=fashion_mnist", f"data.limit={scale.limit}",
        f"train.epochs={scale.epochs}", f"train.global_batch={batch}",
        f"train.batch_per_rank={micro}", f"train.accumulate={k}",
        "train.eval_every=1", "train.eval_offset=0", "train.progress=false", "train.keep_checkpoints=0", "mlperf.enabled=false",
        "train.log_interval=1000000", "train.hybridize=false",
        f"schedule.warmup_epochs={scale.warmup_epochs}", "schedule.warmup_begin_lr=0.0",
        f"schedule.power={scale.power}", "schedule.end_lr=0.0",
        f"optim.lr={lr!r}", "optim.momentum=0.9",
    ] + ([] if scale.augment else ["data.pad_crop=0", "data.flip=false"])
    if arm == "lars":
        return common_ + [
            "optim.name=lars", "optim.eta=0.001", "optim.epsilon=1e-9", "optim.wd=5e-4",
            "optim.fused=true", "optim.momentum_correction=false",
            "optim.wd_in_denominator=true", "schedule.wd_schedule=follow_lr",
            "train.label_smoothing=0.1", "model.bn_momentum_rule=iterations",
            "model.zero_init_last_gamma=true", f"data.polish_epochs={scale.polish_epochs}",
        ]
    # the baseline and arm (a): plain SGD with momentum, constant WD, no label smoothing,
    # fixed BN momentum, BN gammas initialised to one, no polishing
    return common_ + [
        "optim.name=sgd", "optim.wd=5e-4", "schedule.wd_schedule=constant",
        "train.label_smoothing=0.0", "model.bn_momentum_rule=fixed", "model.bn_momentum=0.9",
        "model.zero_init_last_gamma=false", "data.polish_epochs=0",
    ]


def plan(scale: Scale, run_dir: str) -> List[RunSpec]:
    """Every run, in the order they are trained: the baseline, then 8K and 16K (what the
    acceptance compares), then the other batch sizes."""
    specs: List[RunSpec] = []

    def add(arm: str, batch: int, lr: float, factor: float) -> None:
        micro, k, steps, imgs = _geometry(batch, scale.limit)
        if steps == 0:
            raise ValueError(f"data.limit={scale.limit} gives batch {batch} no full step")
        lr = round(lr, 3)
        key = f"{arm}-b{batch}-lr{lr:g}"
        specs.append(RunSpec(key, arm, batch, lr, factor, micro, k, steps, imgs,
                             _overrides(scale, arm, batch, lr, micro, k, run_dir,
                                        f"lb-{key}")))

    for lr in scale.baseline_lrs:
        add("baseline", BASELINE_BATCH, lr, lr)
    order = sorted(scale.batches, key=lambda b: (b not in (8192, 16384), b))
    for b in order:
        for base in scale.sgd_base_lrs:
            add("sgd", b, base * b / BASELINE_BATCH, base)
        for c in scale.lars_cs:
            add("lars", b, c * math.sqrt(b / LARS_REF_BATCH), c)
    return specs

def _best(results: Sequence[Dict[str, object]], arm: str, batch: int) -> Optional[Dict[str, object]]:
    """The grid point of ``arm`` at ``batch`` with the best final test accuracy."""
    cands = [r for r in results if r["arm"] == arm and r["batch"] == batch
             and r.get("final_top1") is not None]
    return max(cands, key=lambda r: r["final_top1"]) if cands else None


# -- the estimate ----------------------------------------------------------------------
def run_s(spec: RunSpec, scale: Scale, cal: Dict[str, object]) -> float:
    """Seconds of one run: start-up + epochs x (train + evaluation)."""
    ips = {int(k): v for k, v in cal["train_img_s"].items()}
    rate = ips.get(spec.micro) or ips[MICRO]
    return cal["startup_s"] + scale.epochs * (spec.images_per_epoch / rate + cal["eval_s"])


def estimate_s(specs: Sequence[RunSpec], scale: Scale, cal: Dict[str, object],
               jobs: int = 1) -> float:
    """Wall seconds of the whole plan: the runs in plan order, each taken by the first of
    ``jobs`` free workers (as ``run`` schedules them), with the calibration's per-run rates
    (measured with ``jobs`` calibrations side by side)."""
    free = [0.0] * max(1, jobs)
    for s in specs:
        i = free.index(min(free))
        free[i] += run_s(s, scale, cal)
    return max(free) + 10.0   # report and plots


def _fmt_min(s: float) -> str:
    return f"{s / 60:.1f} min"
