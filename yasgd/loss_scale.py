"""Loss scaling for float16 training (Micikevicius et al. 2018, "Mixed Precision Training").

Small float16 gradients underflow to zero. Multiplying the loss by a scale S before
backward multiplies every gradient by S; the update divides by S again. Here the division
is folded into Gluon's ``rescale_grad`` (the trainer's ``_scale``, which already carries
1 / ranks and, in ``step``, 1 / batch), so that LARS's gradient norm sees the true mean
gradient: the same seam MXNet AMP uses (``mxnet.contrib.amp``: ``trainer._scale``).

``train.loss_scale``:

* ``none``: no scaling (Fujitsu's MLPerf v0.6 MXNet scripts pass no loss scale to their
  float16 run: neither their parameters file nor their ``fit.py`` has one);
* ``N``: a static scale;
* ``dynamic``: start at 2^16, and after the allreduce check that every gradient is finite
  (the same decision on every rank, because every rank holds the same sums): a step whose
  gradients overflow is skipped and the scale halved; after ``train.loss_scale_window``
  good steps in a row the scale doubles (MXNet AMP's rule and defaults). The check reads
  one flag on the host per step: a sync point. A skipped step leaves the weights, the
  momentum and the optimizer's update count as they were.
"""
from __future__ import annotations

from typing import Dict, Optional

INITIAL_DYNAMIC_SCALE = 2.0 ** 16
FACTOR = 2.0
MIN_SCALE = 1.0


class LossScaler:
    """The loss scale of one training run, applied through ``trainer``'s ``_scale``."""

    def __init__(self, trainer, scale: float, dynamic: bool, window: int = 2000):
        if scale < MIN_SCALE or window < 1:
            raise ValueError(f"loss scale must be >= {MIN_SCALE} and window >= 1, "
                             f"got {scale}, {window}")
        self.trainer, self.dynamic, self.window = trainer, dynamic, int(window)
        self._base = trainer._scale        # 1 / ranks (yasgd.allreduce.DistributedTrainer)
        self.good = 0                      # finite steps since the last change of scale
        self.skipped = 0                   # steps skipped for overflow in this run
        self.scale = float(scale)

    @property
    def scale(self) -> float:
        return self._scale

    @scale.setter
    def scale(self, value: float) -> None:
        self._scale = float(value)
        self.trainer._scale = self._base / self._scale

    def step(self, batch_size: int, grads) -> bool:
        """Allreduce and update (``trainer.step``) with the scaled gradients ``grads`` (every
        trainable parameter's); dynamic: skip the update on overflow. True when it updated."""
        if not self.dynamic:
            self.trainer.step(batch_size)
            return True
        import mxnet as mx
        self.trainer.allreduce_grads()
        # SYNC: one flag per step, the same on every rank (the gradients are the sums)
        finite = bool(mx.nd.multi_all_finite(*grads, num_arrays=len(grads),
                                             init_output=True).asscalar())
        if finite:
            self.trainer.update(batch_size)
        self.after_step(finite)
        return finite

    def after_step(self, finite: bool) -> None:
        """The dynamic rule: halve on overflow (never below 1) and restart the count of good
        steps; double after ``window`` good steps in a row."""
        if not finite:
            self.skipped += 1
            self.good = 0
            self.scale = max(MIN_SCALE, self.scale / FACTOR)
            return
        self.good += 1
        if self.good >= self.window:
            self.good = 0
            self.scale = self.scale * FACTOR


def state(scaler: Optional[LossScaler]) -> Optional[Dict[str, float]]:
    """What a checkpoint keeps of a dynamic scaler (its scale and its count of good steps),
    so that a resumed run scales as the uninterrupted one would; None otherwise."""
    if scaler is None or not scaler.dynamic:
        return None
    return {"scale": scaler.scale, "good": scaler.good}


def restore(scaler: Optional[LossScaler], saved: Optional[Dict[str, float]]) -> None:
    """Put a checkpoint's :func:`state` back (a checkpoint without one keeps the initial)."""
    if scaler is None or not scaler.dynamic or not saved:
        return
    scaler.scale = max(MIN_SCALE, float(saved["scale"]))
    scaler.good = int(saved["good"])


def from_config(train_cfg, trainer) -> Optional[LossScaler]:
    """The scaler of ``train.loss_scale`` for ``trainer`` (None for ``none``)."""
    value = train_cfg.loss_scale
    if value == "none":
        return None
    if value == "dynamic":
        return LossScaler(trainer, INITIAL_DYNAMIC_SCALE, True, train_cfg.loss_scale_window)
    return LossScaler(trainer, float(value), False)
