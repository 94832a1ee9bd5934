"""Parallel parameter initialization (YASGD, "framework optimizations").

Every rank seeds MXNet's and NumPy's generators with the same seed and
initialises its own copy of the weights: no broadcast from rank 0 is needed at
start-up (Fujitsu's MLPerf code: ``--weight_seed``, "same value to all ranks").
Because a silent mismatch would train ``size`` different models, a cheap
agreement check follows: every rank computes exact integer checksums of each
parameter's bits (:func:`checksums`), the vectors are allgathered once, and any difference
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


_BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def checksums(params: List) -> np.ndarray:
    """(n_params, 4) float64: per parameter, the sum of its elements' bit patterns as
    unsigned integers (mod 2**64) and the same over its even-indexed elements, each split
    into exact 32-bit halves. Integer sums are exact and independent of summation order and
    thread count, so equal parameters give equal rows on every rank, and any differing
    element changes them; two cheap integer passes over a host copy instead of float64
    arithmetic on the device."""
    rows = np.zeros((len(params), 4), dtype=np.float64)
    for j, p in enumerate(params):
        a = np.ascontiguousarray(p.data().asnumpy())
        bits = a.reshape(-1).view(_BITS[a.dtype.itemsize])
        for k, part in enumerate((bits, bits[::2])):
            s = int(np.add.reduce(part, dtype=np.uint64)) if part.size else 0
            rows[j, 2 * k], rows[j, 2 * k + 1] = float(s >> 32), float(s & 0xFFFFFFFF)
    return rows


def check_agreement(net, world=None) -> None:
    """Raise InitMismatchError on every rank if any rank's parameters differ."""
    size = world.size if world is not None else 1
    if size == 1:
        return
    import horovod.mxnet as hvd
    params = [p for p in net.collect_params().values()]
    local = mx.nd.array(checksums(params), dtype="float64")
    everyone = hvd.allgather(local, name="yasgd.init.check").asnumpy()   # sync point (once)
    table = everyone.reshape(size, len(params), 4)
    for j, p in enumerate(params):
        if not np.all(table[:, j, :] == table[0, j, :]):
            ranks = [r for r in range(size) if not np.all(table[r, j] == table[0, j])]
            mine, ref = (int(table[r, j, 0]) << 32 | int(table[r, j, 1]) for r in (ranks[0], 0))
            raise InitMismatchError(
                f"parallel initialization disagrees across ranks: parameter {p.name} "
                f"(first of {len(params)} in order) differs on rank(s) {ranks} from rank 0 "
                f"(checksum {mine:#018x} vs {ref:#018x}); is run.seed the same on every rank?")


def parallel_initialize(net, seed: int, ctx=None, initializer: Optional[mx.init.Initializer] = None,
                        broadcast: bool = False, check: bool = True, world=None) -> None:
    """Initialise ``net``'s parameters identically on every rank.

    seed: the same on every rank (parallel init). broadcast: instead broadcast
    rank 0's parameters (``World.broadcast_arrays``). check: verify agreement with one
    allgather.
    """
    from yasgd.model import default_initializer
    seed_everything(seed)
    net.initialize(initializer or default_initializer(), ctx=ctx or mx.cpu(), force_reinit=True)
    if world is not None and world.size > 1 and broadcast:
        world.broadcast_arrays([p.data() for p in net.collect_params().values()],
                               name="yasgd.init.bcast")
    if check:
        check_agreement(net, world)
