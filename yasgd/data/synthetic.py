"""Synthetic data for throughput runs: the loader protocol with no decoding at all.

One batch of random images (standard normal, shape ``(B, 3, image_size,
image_size)``, float32) and random labels is generated once, on the loader's
context, from ``seed``; every step yields those same arrays, so the loader costs
nothing and a run measures the model and the communication only (Horovod's and
NVIDIA's ``--synthetic`` / ``--benchmark`` modes do the same).

``data.synthetic_samples`` is the size of the (pretend) data set, shared by all
ranks like a real one, with the counts of :mod:`yasgd.data.sampler`: an epoch is
``synthetic_samples // (size * B)`` batches on every rank, and the validation loader
shards the same number of samples over the ranks exactly once
(``[r * N // size, (r + 1) * N // size)``, last batch short).
"""
from __future__ import annotations

import numpy as np

from yasgd import UsageError
from yasgd.data.sampler import EpochSampler, val_shard


class _Synthetic:
    def __init__(self, batch_size: int, ctx, image_size: int, num_classes: int, seed: int,
                 batches: int, last: int = 0):
        import mxnet as mx
        self.batch_size, self.num_classes, self.ctx = int(batch_size), int(num_classes), ctx
        self._len = int(batches)
        rng = np.random.RandomState(seed)
        x = rng.standard_normal((batch_size, 3, image_size, image_size)).astype(np.float32)
        y = rng.randint(0, num_classes, size=batch_size).astype(np.float32)
        self._data = mx.nd.array(x, ctx=ctx, dtype=np.float32)
        self._label = mx.nd.array(y, ctx=ctx, dtype=np.float32)
        self._last = int(last)  # size of a short last batch (0: none)
        self.epoch, self.polish = 0, False

    def __len__(self) -> int:
        return self._len

    def set_epoch(self, epoch: int, polish: bool = False) -> None:
        self.epoch, self.polish = int(epoch), bool(polish)

    def __iter__(self):
        full = self._len - (1 if self._last else 0)
        for _ in range(full):
            yield self._data, self._label
        if self._last:
            yield self._data[:self._last], self._label[:self._last]


def build(data_cfg, rank: int, size: int, batch_size: int, ctx, seed: int, num_classes: int):
    n = int(data_cfg.synthetic_samples)
    batches = len(EpochSampler(n, rank, size, batch_size, seed))   # the count, not the order
    if batches == 0:
        raise UsageError(f"data.synthetic_samples ({n}) is less than one batch on every rank "
                         f"({size} ranks x {batch_size})")
    train = _Synthetic(batch_size, ctx, data_cfg.image_size, num_classes, seed, batches)
    shard = len(val_shard(n, rank, size))
    val_batches = -(-shard // batch_size)
    last = shard % batch_size
    val = _Synthetic(batch_size, ctx, data_cfg.image_size, num_classes, seed + 1, val_batches, last)
    return train, val


def check(data_cfg) -> None:
    if data_cfg.synthetic_samples <= 0:
        raise UsageError(f"data.synthetic_samples must be positive, got {data_cfg.synthetic_samples}")
