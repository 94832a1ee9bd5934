"""LARS (You, Gitman, Ginsburg 2017, arXiv 1708.03888), as YASGD uses it.

For every layer l with weights w, gradient g (the true global mean gradient:
``rescale_grad`` folded in), weight decay beta, trust coefficient eta:

    local_lr = eta * ||w|| / (||g|| + beta * ||w|| + eps)     (1 if ||w|| = 0 or ||g|| = 0)
    v        = m * v + lr_t * local_lr * (g + beta * w)
    w        = w - v

Every choice that implementations make differently is an explicit option:
``epsilon`` (MXNet 0, MLPerf 1e-9), ``wd_in_denominator`` (the paper: yes),
``momentum_correction`` (Goyal et al.: m_t = m * lr_t / lr_{t-1}; MXNet's LARS
turns it on silently, here it is off unless asked), ``exclude_1d``: what
parameters with ndim <= 1 (BN gamma/beta, biases), selected by shape
(yasgd.params), never by name, are left out of: ``"lars_and_wd"`` (default, every
large-batch recipe: plain momentum SGD, no WD), ``"wd"`` (LARS, no WD) or
``"none"`` (LARS and WD, the rule applied to every tensor).

Two paths compute the same thing:

* fused (default): the squared norms of all weights and all gradients in ONE
  batched operator call (the paper's "batched norm computation"), the trust
  ratios of all layers in one call, and the momentum update of all layers in
  one multi-tensor call (``yasgd.ops``: the project's operator library, or
  MXNet's ``multi_sum_sq``/``multi_lars``/``preloaded_multi_sgd_mom_update``);
  no host synchronisation (on MKLDNN builds one, in the first step after an inference
  forward of a guarded network, see ``yasgd.ops.guard_layouts``).
* per-layer (``fused=False``): one norm, ratio and update per layer with plain
  NDArray arithmetic; the reference for debugging.

``multi_precision``: fp16 weights keep fp32 master copies; norms and updates
use the fp32 masters.
"""
from __future__ import annotations

from typing import Callable, List, Optional

import mxnet as mx
import numpy as np

from yasgd.params import EXCLUDE_1D, gets_lars, gets_wd


@mx.optimizer.register
class YasgdLARS(mx.optimizer.Optimizer):
    """LARS with momentum; see the module docstring for the rule.

    Parameters (all keyword): learning_rate (peak LR, or the schedule's), momentum,
    wd (beta), eta, epsilon, momentum_correction, wd_in_denominator, exclude_1d, fused,
    multi_precision, lr_scheduler (an mx.lr_scheduler.LRScheduler, e.g.
    yasgd.schedule.WarmupPolySchedule), wd_scheduler (callable num_update -> wd,
    e.g. yasgd.schedule.WDSchedule), rescale_grad.
    """

    def __init__(self, learning_rate: float = 0.1, momentum: float = 0.9, wd: float = 0.0,
                 eta: float = 0.001, epsilon: float = 0.0, momentum_correction: bool = False,
                 wd_in_denominator: bool = True, exclude_1d: str = "lars_and_wd",
                 fused: bool = True, multi_precision: bool = False,
                 lr_scheduler=None, wd_scheduler: Optional[Callable[[float], float]] = None,
                 **kwargs):
        super().__init__(learning_rate=learning_rate, wd=wd, lr_scheduler=lr_scheduler,
                         multi_precision=multi_precision, **kwargs)
        self.momentum = float(momentum)
        self.eta = float(eta)
        self.epsilon = float(epsilon)
        self.momentum_correction = bool(momentum_correction)
        self.wd_in_denominator = bool(wd_in_denominator)
        if exclude_1d not in EXCLUDE_1D:
            raise ValueError(f"exclude_1d must be one of {', '.join(EXCLUDE_1D)}, got {exclude_1d!r}")
        self.exclude_1d = exclude_1d
        self.fused = bool(fused)
        self.wd_scheduler = wd_scheduler
        self.aggregate_num = 1 << 30   # gluon.Trainer hands us every parameter in one call
        self._last_lr: Optional[float] = None

    # -- state -------------------------------------------------------------------
    def create_state(self, index, weight):
        return mx.nd.zeros(weight.shape, weight.context, dtype=weight.dtype, stype=weight.stype)

    def create_state_multi_precision(self, index, weight):
        if self.multi_precision and weight.dtype == np.float16:
            master = weight.astype(np.float32)
            return (master, self.create_state(index, master))
        return self.create_state(index, weight)

    # -- the step ----------------------------------------------------------------
    def update(self, index, weight, grad, state):
        self.update_multi_precision(index, weight, grad, state)

    def update_multi_precision(self, index, weight, grad, state):
        if not isinstance(index, (list, tuple)):
            index, weight, grad, state = [index], [weight], [grad], [state]
        self._update_count(index)
        lr = self.lr_scheduler(self.num_update) if self.lr_scheduler is not None else self.lr
        wd = self.wd_scheduler(self.num_update) if self.wd_scheduler is not None else self.wd
        momentum = self.momentum
        if self.momentum_correction and self._last_lr:
            momentum *= lr / self._last_lr
        self._last_lr = lr
        lrs = self._get_lrs(index)                        # schedule x lr_mult
        wds = [wd * m for m in self._wd_mults(index)]     # schedule x wd_mult

        mp = [isinstance(s, (tuple, list)) for s in state]
        masters = [s[0] if m else None for s, m in zip(state, mp)]
        moms = [s[1] if m else s for s, m in zip(state, mp)]
        # Structure decides: ndim >= 2 gets LARS and WD, ndim <= 1 what exclude_1d leaves it.
        lars = [i for i, w in enumerate(weight) if gets_lars(w.shape, self.exclude_1d)]
        plain = [i for i, w in enumerate(weight) if not gets_lars(w.shape, self.exclude_1d)]
        for i, w in enumerate(weight):
            if not gets_wd(w.shape, self.exclude_1d):
                wds[i] = 0.0
        step = self._fused_step if self.fused else self._per_layer_step
        step(lars, plain, weight, grad, moms, masters, lrs, wds, momentum)

    def _wd_mults(self, index) -> List[float]:
        wd0 = self.wd
        if wd0 == 0:
            return [1.0 for _ in index]
        return [w / wd0 for w in self._get_wds(index)]

    def _fused_step(self, lars, plain, weight, grad, moms, masters, lrs, wds, momentum):
        from yasgd import ops
        from yasgd.hostcopy import device_array
        ctx = weight[0].context
        order = lars + plain
        w_of = [masters[i] if masters[i] is not None else weight[i] for i in order]
        g_of = [grad[i] for i in order]
        lr_arr = device_array([lrs[i] for i in order], ctx)   # no blocking copy to a GPU
        wd_arr = device_array([wds[i] for i in order], ctx)
        n = len(lars)
        if n:
            # The batched norm computation: ||w||^2 and ||g||^2 of every LARS layer.
            if all(a.dtype == w_of[0].dtype for a in w_of[:n] + g_of[:n]):
                sq = ops.multi_sum_sq(w_of[:n] + g_of[:n])
                w_sq, g_sq = sq[:n], sq[n:]
            else:  # fp16 gradients with fp32 master weights
                w_sq, g_sq = ops.multi_sum_sq(w_of[:n]), ops.multi_sum_sq(g_of[:n])
            den_wd = wd_arr[:n] if self.wd_in_denominator else mx.nd.zeros((n,), ctx=ctx)
            local = ops.lars_trust_ratio(lr_arr[:n], w_sq, g_sq, den_wd, eta=self.eta,
                                         eps=self.epsilon, rescale_grad=self.rescale_grad)
            lr_arr = mx.nd.concat(local, lr_arr[n:], dim=0) if len(plain) else local
        mp = masters[order[0]] is not None
        if any((masters[i] is not None) != mp for i in order):
            raise ValueError("mixing fp16 and fp32 parameters in one LARS call is not supported")
        ops.multi_sgd_mom_update([weight[i] for i in order], g_of, [moms[i] for i in order],
                                 lr_arr, wd_arr, momentum=momentum, rescale_grad=self.rescale_grad,
                                 weights32=[masters[i] for i in order] if mp else None)

    def _per_layer_step(self, lars, plain, weight, grad, moms, masters, lrs, wds, momentum):
        from yasgd import ops
        lars_set = set(lars)
        for i in lars + plain:
            w = masters[i] if masters[i] is not None else weight[i]
            g = grad[i].astype("float32") if grad[i].dtype != w.dtype else grad[i]
            g = g * self.rescale_grad
            lr = mx.nd.full((1,), lrs[i], ctx=w.context)
            if i in lars_set:
                # one norm call per layer (same kernel as the fused path, so same numerics)
                w_norm = mx.nd.sqrt(ops.multi_sum_sq([w]))
                g_norm = mx.nd.sqrt(ops.multi_sum_sq([g]))
                den_wd = wds[i] if self.wd_in_denominator else 0.0
                ratio = self.eta * w_norm / (g_norm + den_wd * w_norm + self.epsilon)
                ok = (w_norm > 0) * (g_norm > 0)
                lr = lr * mx.nd.where(ok, ratio, mx.nd.ones_like(ratio))
            mom = moms[i]
            mom[:] = momentum * mom - mx.nd.broadcast_mul(lr.reshape((1,) * w.ndim), wds[i] * w + g)
            w[:] = w + mom
            if masters[i] is not None:
                weight[i][:] = w.astype(weight[i].dtype)


LARS = YasgdLARS
