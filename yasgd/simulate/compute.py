"""Per-GPU compute of ``yasgd simulate``: the step time t(b) and the lock-step of N ranks.

    t(b) = c (h + b)        one straight line in the per-GPU batch b (no jump at any batch):
                            h (images) = t0 / c, the batch whose per-image time equals the
                            step's fixed time: the least-squares line through a published
                            per-batch inference table, times the ratio of training h to
                            inference h of a published pair of per-batch training and inference
                            tables of one build; c (s per image) from a single-node MLPerf log:
                            c = t_log / (L(g) (h + b_log)), the log's iteration at its per-GPU
                            batch b_log on g GPUs in lock-step
    L(N) = 1 + E[max over N ranks of (U + G)]   U ~ uniform GPU-to-GPU speed spread,
                            G ~ normal step-time jitter (both relative; 1 where none is sourced)
"""
from __future__ import annotations

import math
from typing import Dict, Sequence, Tuple


def fixed_cost_images(curve: Sequence[Tuple[int, float]]) -> float:
    """h = t0 / c of the line t(b) = t0 + c b fitted to a published (batch, img/s) table's step
    times t = b / X by least squares of the relative error (every published batch weighs the
    same, whatever its step time). 0 where the fit shows no positive fixed cost."""
    pts = [(float(b), b / float(x)) for b, x in curve if x > 0]
    if len(pts) < 2:
        return 0.0
    # minimise sum ((t0 + c b - t) / t)^2: normal equations of the weighted line
    s11 = sum(1 / t ** 2 for b, t in pts)
    s1b = sum(b / t ** 2 for b, t in pts)
    sbb = sum(b * b / t ** 2 for b, t in pts)
    s1t = sum(1 / t for b, t in pts)
    sbt = sum(b / t for b, t in pts)
    det = s11 * sbb - s1b ** 2
    t0 = (s1t * sbb - sbt * s1b) / det
    c = (s11 * sbt - s1b * s1t) / det
    return t0 / c if c > 0 and t0 > 0 else 0.0


def train_to_infer_h(train: Sequence[Tuple[int, float]],
                     infer: Sequence[Tuple[int, float]]) -> float:
    """Training h over inference h of one build's published per-batch training and inference
    (scoring) tables, each by :func:`fixed_cost_images` over the batches both tables publish (the
    same batches weigh the same in both lines)."""
    common = {b for b, _ in train} & {b for b, _ in infer}
    h_train = fixed_cost_images([(b, x) for b, x in train if b in common])
    h_infer = fixed_cost_images([(b, x) for b, x in infer if b in common])
    return h_train / h_infer if h_infer > 0 else 1.0


def step_time(per_gpu_batch: float, per_image_s: float, h: float) -> float:
    """t(b) = c (h + b), seconds per training step of one GPU (optimizer update included)."""
    return per_image_s * (h + per_gpu_batch)


def per_image_cost(iteration_s: float, per_gpu_batch: float, h: float, lockstep: float) -> float:
    """c from a single-node log: its iteration is t(b_log) x L(g), so c = t / (L (h + b))."""
    return iteration_s / (lockstep * (h + per_gpu_batch))


_Z90 = 1.2815515655446004        # standard normal 90 % quantile


def _phi(x: float) -> float:
    return math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def _Phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2)))


def lockstep_factor(n: int, cv: float, spread: float) -> float:
    """L(n) = 1 + E[max over n ranks of (U + G)]: the slowest rank's step time over the mean one's.
    U ~ uniform(-spread/2, spread/2) (fixed speed of each GPU), G ~ normal(0, cv) (per-iteration
    jitter), both relative. Closed forms: spread = 0 -> 1 + cv z(n), z = E[max of n standard
    normals] (z(2) = 1/sqrt(pi)); cv = 0 -> 1 + spread/2 (n-1)/(n+1). 1 for n <= 1."""
    if n <= 1 or (cv <= 0 and spread <= 0):
        return 1.0
    if cv <= 0:
        return 1.0 + spread / 2 * (n - 1) / (n + 1)
    return 1.0 + _lockstep_excess(n, float(cv), float(spread))


_EXCESS_CACHE: Dict[Tuple[int, float, float], float] = {}


def _lockstep_excess(n: int, cv: float, spread: float) -> float:
    key = (n, cv, spread)
    if key not in _EXCESS_CACHE:
        a = spread / 2
        if a <= 1e-6 * cv:   # the uniform term is negligible (and its closed form cancels badly)
            cdf = lambda x: _Phi(x / cv)                                    # noqa: E731
        else:   # uniform(-a, a) + normal(0, cv): F(x) = cv/(2a) [psi((x+a)/cv) - psi((x-a)/cv)]
            psi = lambda t: t * _Phi(t) + _phi(t)                           # noqa: E731
            cdf = lambda x: cv / (2 * a) * (psi((x + a) / cv) - psi((x - a) / cv))  # noqa: E731
        lo, hi = -(a + 9 * cv), a + 9 * cv
        # E[max] = int_0^hi (1 - F^n) dx - int_lo^0 F^n dx, computed on each side separately
        _EXCESS_CACHE[key] = (_integrate(lambda x: 1.0 - cdf(x) ** n, 0.0, hi)
                              - _integrate(lambda x: cdf(x) ** n, lo, 0.0))
    return _EXCESS_CACHE[key]


def _integrate(f, lo: float, hi: float, steps: int = 4000) -> float:
    """Simpson's rule on [lo, hi] (steps even)."""
    h = (hi - lo) / steps
    total = f(lo) + f(hi)
    for i in range(1, steps):
        total += (4 if i % 2 else 2) * f(lo + i * h)
    return total * h / 3


def step_cv(latency_curve: Sequence[Tuple[int, float, float, float]], per_gpu_batch: float) -> float:
    """Relative step-time jitter of one GPU at this batch: (p90 - p50) / (z_0.9 mean) of the
    published latency percentiles (batch, mean, p50, p90) (a normal body; linear in batch between
    the published batches, clamped at the ends, so continuous in b). The training step is assumed
    to jitter by the same fraction as the published inference step at the same batch. 0 without a
    table."""
    pts = [(b, (p90 - p50) / (_Z90 * mean)) for b, mean, p50, p90 in latency_curve]
    if not pts:
        return 0.0
    if per_gpu_batch <= pts[0][0]:
        return pts[0][1]
    for (b0, c0), (b1, c1) in zip(pts, pts[1:]):
        if per_gpu_batch <= b1:
            return c0 + (c1 - c0) * (per_gpu_batch - b0) / (b1 - b0)
    return pts[-1][1]
