"""Learning-rate and weight-decay schedules as functions of the (fractional) step.

Warm-up then polynomial decay, as in both papers:

    lr(t) = lr_0 + (lr_peak - lr_0) * t / W                        0 <= t < W
    lr(t) = lr_end + (lr_peak - lr_end) * (1 - (t - W)/(T - W))^p  W <= t <= T
    lr(t) = lr_end                                                  t > T

t is the update count (MXNet's ``num_update``: 1 at the first step) and may be
fractional; W = warm-up steps, T = total steps, p = power. You et al. 2017 use
p = 2 from lr_peak to 0 without a warm-up offset in the decay; Fujitsu's
MLPerf v0.6 code uses 36 warm-up epochs of 90 at batch 86K, p = 2.2 and
lr_end = 0.0325 (per-iteration warm-up, decay over the remaining steps).

Weight decay (Fujitsu MLPerf v0.6: WD warms up and decays with the LR):
``follow_lr`` gives wd(t) = wd * lr(t) / lr_peak; ``constant`` gives wd.
"""
from __future__ import annotations

import mxnet as mx


class WarmupPolySchedule(mx.lr_scheduler.LRScheduler):
    """Linear warm-up from ``warmup_begin_lr`` to ``base_lr`` over ``warmup_steps``,
    then polynomial decay with ``power`` to ``end_lr`` at ``total_steps``."""

    def __init__(self, base_lr: float, warmup_steps: float, total_steps: float,
                 power: float = 2.0, end_lr: float = 0.0, warmup_begin_lr: float = 0.0):
        super().__init__(base_lr=base_lr)
        if total_steps <= 0 or warmup_steps < 0 or warmup_steps > total_steps:
            raise ValueError(f"need 0 <= warmup_steps ({warmup_steps}) <= total_steps ({total_steps}) "
                             f"and total_steps > 0")
        if power <= 0:
            raise ValueError(f"power must be positive, got {power}")
        self.peak_lr = float(base_lr)
        self.warmup_steps = float(warmup_steps)
        self.total_steps = float(total_steps)
        self.power = float(power)
        self.end_lr = float(end_lr)
        self.warmup_begin_lr = float(warmup_begin_lr)

    def __call__(self, num_update: float) -> float:
        t, w, T = float(num_update), self.warmup_steps, self.total_steps
        if t < w:
            return self.warmup_begin_lr + (self.peak_lr - self.warmup_begin_lr) * t / w
        if t >= T:
            return self.end_lr
        frac = (t - w) / (T - w)
        return self.end_lr + (self.peak_lr - self.end_lr) * (1.0 - frac) ** self.power


class WDSchedule:
    """Weight decay at update t: constant, or following the LR schedule."""

    def __init__(self, wd: float, mode: str = "constant", lr_schedule: WarmupPolySchedule = None):
        if mode not in ("constant", "follow_lr"):
            raise ValueError(f"unknown wd schedule {mode!r}")
        if mode == "follow_lr" and lr_schedule is None:
            raise ValueError("wd schedule follow_lr needs the lr schedule")
        self.wd, self.mode, self.lr_schedule = float(wd), mode, lr_schedule

    def __call__(self, num_update: float) -> float:
        if self.mode == "constant":
            return self.wd
        return self.wd * self.lr_schedule(num_update) / self.lr_schedule.peak_lr


def from_config(optim_cfg, schedule_cfg, steps_per_epoch: int, epochs: int):
    """(lr_schedule, wd_schedule) for a run, in steps."""
    lr = WarmupPolySchedule(base_lr=optim_cfg.lr,
                            warmup_steps=schedule_cfg.warmup_epochs * steps_per_epoch,
                            total_steps=epochs * steps_per_epoch, power=schedule_cfg.power,
                            end_lr=schedule_cfg.end_lr, warmup_begin_lr=schedule_cfg.warmup_begin_lr)
    return lr, WDSchedule(optim_cfg.wd, schedule_cfg.wd_schedule, lr)
