"""The training meter of one epoch (after pycls' ``TrainMeter``).

It carries what the loop measures between two log intervals, so that the loop passes one
object instead of loose counters:

* on the device, never waited for inside a step: the sum of the per-sample losses, the
  number of correct top-1 predictions (both float64) and the number of steps since the
  running loss sum became non-finite (yasgd.faults uses it to name the first bad step);
* on the host: the images seen this epoch, and the log window's start time and steps.

:meth:`TrainMeter.log` is the one sync point: the sums of every rank are reduced, a
non-finite loss ends the run, and the record of the ``train`` event is returned.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Dict

import numpy as np

from yasgd import faults

if TYPE_CHECKING:
    import mxnet as mx
    from yasgd.train import Setup


class TrainingError(RuntimeError):
    """The run cannot go on (non-finite loss, ...); also ``yasgd.train.TrainingError``."""


class TrainMeter:
    """Loss, accuracy and non-finite count of one epoch, and the current log window."""

    def __init__(self, ctx: "mx.Context"):
        import mxnet as mx
        self.loss_sum = mx.nd.zeros((1,), ctx=ctx, dtype="float64")
        self.correct = mx.nd.zeros((1,), ctx=ctx, dtype="float64")
        # steps since the loss sum became non-finite
        self.bad = mx.nd.zeros((1,), ctx=ctx, dtype="float64")
        self.seen = 0
        self.window_t, self.window_steps = time.time(), 0

    # -- inside a step: queued on the device, no sync --------------------------------------
    def add_batch(self, loss: "mx.nd.NDArray", out: "mx.nd.NDArray", y: "mx.nd.NDArray") -> None:
        """One micro-batch's per-sample losses and logits against its labels."""
        self.loss_sum += loss.sum().astype("float64")
        self.correct += (out.argmax(axis=1) == y.astype(out.dtype)).sum().astype("float64")
        self.seen += out.shape[0]

    def end_step(self) -> None:
        """An optimizer step is done: count it in the window and in the non-finite count."""
        import mxnet as mx
        self.window_steps += 1
        self.bad += 1 - mx.nd.contrib.isfinite(self.loss_sum)   # on the device (yasgd.faults)

    # -- at log intervals ----------------------------------------------------------------
    def log(self, s: "Setup", epoch: int, step: int) -> Dict[str, float]:
        """Reduce the sums over ranks, check the loss, write and return the ``train`` record.

        Raises :class:`TrainingError` when the mean loss is not finite, naming the first
        step at which some rank's loss sum stopped being finite."""
        # SYNC: metrics and the non-finite count reduced across ranks at log intervals only.
        local = np.concatenate([self.loss_sum.asnumpy(), self.correct.asnumpy(),
                                [float(self.seen)], self.bad.asnumpy()])
        tot = s.world.allreduce_sum(local, name=f"yasgd.metrics.{step}")
        loss, acc = tot[0] / tot[2], tot[1] / tot[2]
        if not np.isfinite(loss):
            first = faults.first_nonfinite_step(s.world, step, float(local[3]))
            where = f"first at step {first}" if first else f"at step {step}"
            raise TrainingError(f"non-finite training loss ({loss}) {where} (epoch {epoch + 1}, "
                                f"checked at step {step}); lower optim.lr or check the data")
        dt = max(time.time() - self.window_t, 1e-9)
        ips = self.window_steps * s.cfg.train.global_batch / dt
        opt = s.trainer._optimizer
        lr = opt.lr_scheduler(opt.num_update) if opt.lr_scheduler is not None else opt.learning_rate
        rec = {"epoch": epoch + 1, "step": step, "loss": float(loss), "train_acc": float(acc),
               "lr": float(lr), "img_per_s": float(ips)}
        s.log.event("train", **rec)
        return rec

    def next_window(self) -> float:
        """Start a new log window; returns the seconds per step of the one that ended."""
        per_step = (time.time() - self.window_t) / self.window_steps
        self.window_t, self.window_steps = time.time(), 0
        return per_step
