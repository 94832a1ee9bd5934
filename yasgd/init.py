"""Parallel parameter initialization (YASGD, "framework optimizations").

Every rank seeds MXNet's and NumPy's generators with the same seed and
initialises its own copy of the weights: no broadcast from rank 0 is needed at
start-up (Fujitsu's MLPerf code: ``--weight_seed``, "same value to all ranks").
Because a silent mismatch would train ``size`` different models, a cheap
agreement check follows: every rank computes (sum, sum of squares) of each
parameter on its device, the vectors are allgathered once, and any difference
raises :class:`InitMismatchError` on every rank at once (no hang), naming the
first parameter that differs. ``broadcast=True`` gives the usual init +
broadcast from rank 0 instead.
"""
from __future__ import annotations

from typing import List, Optional

import mxnet as mx
import numpy as np


class InitMismatchError(RuntimeError):
    """Ranks hold different initial parameters."""


def seed_everything(seed: int) -> None:
    mx.random.seed(seed)
    np.random.seed(seed % (2 ** 32))


def checksums(params: List) -> mx.nd.NDArray:
    """(n_params, 2) float64 on the host: sum and sum of squares of each parameter."""
    parts = []
    for p in params:
        d = p.data().astype("float64")
        parts.append(mx.nd.stack(mx.nd.sum(d), mx.nd.sum(d * d)).reshape((1, 2)))
    return mx.nd.concat(*parts, dim=0).as_in_context(mx.cpu())


def check_agreement(net, world=None) -> None:
    """Raise InitMismatchError on every rank if any rank's parameters differ."""
    size = world.size if world is not None else 1
    if size == 1:
        return
    import horovod.mxnet as hvd
    params = [p for p in net.collect_params().values()]
    local = checksums(params)
    everyone = hvd.allgather(local, name="yasgd.init.check").asnumpy()   # sync point (once)
    table = everyone.reshape(size, len(params), 2)
    for j, p in enumerate(params):
        if not np.all(table[:, j, :] == table[0, j, :]):
            ranks = [r for r in range(size) if not np.all(table[r, j] == table[0, j])]
            raise InitMismatchError(
                f"parallel initialization disagrees across ranks: parameter {p.name} "
                f"(first of {len(params)} in order) differs on rank(s) {ranks} from rank 0 "
                f"(sum {table[ranks[0], j, 0]:.9g} vs {table[0, j, 0]:.9g}); "
                f"is run.seed the same on every rank?")


def parallel_initialize(net, seed: int, ctx=None, initializer: Optional[mx.init.Initializer] = None,
                        broadcast: bool = False, check: bool = True, world=None) -> None:
    """Initialise ``net``'s parameters identically on every rank.

    seed: the same on every rank (parallel init). broadcast: instead broadcast
    rank 0's parameters. check: verify agreement with one allgather.
    """
    from yasgd.model import default_initializer
    seed_everything(seed)
    net.initialize(initializer or default_initializer(), ctx=ctx or mx.cpu(), force_reinit=True)
    if world is not None and world.size > 1 and broadcast:
        import horovod.mxnet as hvd
        hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    if check:
        check_agreement(net, world)
