"""Which samples each rank reads: the one sharding rule of every loader (pure NumPy).

Training (:class:`EpochSampler`): every epoch one permutation of the N samples, the same
on every rank because it is seeded by the run's seed and the epoch only (no
communication); its first ``size * B * (N // (size * B))`` positions are cut into
``size`` consecutive parts and rank r reads part r, so the ranks' samples are disjoint
and every rank yields the same number of full batches, ``N // (size * B)`` (a rank with
one batch fewer would leave the others waiting in the allreduce). The remainder - the
last ``N mod (size * B)`` positions of the permutation - is skipped for that epoch only:
a different random handful each epoch, never the same samples. When ``size * B`` divides
N the ranks together read the whole set exactly once per epoch.

Evaluation (:func:`val_shard`): rank r reads a contiguous slice of the samples in order;
the slices are disjoint and cover the set exactly once, so metrics summed on each rank
and reduced once are the whole set's. The last batch of a rank may be short.
"""
from __future__ import annotations

import numpy as np

__all__ = ["EpochSampler", "val_shard"]


class EpochSampler:
    """Rank ``rank``'s samples of each epoch, in the order it reads them.

    ``num_samples`` N, ``size`` ranks, per-rank ``batch_size`` B. The permutation of
    epoch e is ``RandomState(seed + seed_stride * (e + seed_offset)).permutation(N)``:
    ``seed + e`` by default. The stride and offset exist for a loader whose epoch
    streams were defined with other constants before this class (Fashion-MNIST's),
    so that its sample order stays what it was.
    """

    def __init__(self, num_samples: int, rank: int, size: int, batch_size: int, seed: int,
                 seed_stride: int = 1, seed_offset: int = 0):
        if not 0 <= rank < size:
            raise ValueError(f"rank {rank} outside world size {size}")
        self.num_samples, self.rank, self.size = int(num_samples), int(rank), int(size)
        self.batch_size, self.seed = int(batch_size), int(seed)
        self.seed_stride, self.seed_offset = int(seed_stride), int(seed_offset)
        #: full batches per rank and epoch, the same on every rank (0: too few samples)
        self.batches = self.num_samples // (self.size * self.batch_size)

    def __len__(self) -> int:
        return self.batches

    @property
    def per_rank(self) -> int:
        """Samples each rank reads per epoch."""
        return self.batches * self.batch_size

    @property
    def samples_per_epoch(self) -> int:
        """Samples all ranks read together per epoch (the remainder is skipped)."""
        return self.per_rank * self.size

    def epoch_seed(self, epoch: int) -> int:
        return self.seed + self.seed_stride * (int(epoch) + self.seed_offset)

    def permutation(self, epoch: int) -> np.ndarray:
        """Epoch ``epoch``'s permutation of the sample positions (identical on every rank)."""
        return np.random.RandomState(self.epoch_seed(epoch)).permutation(self.num_samples)

    def indices(self, epoch: int) -> np.ndarray:
        """The sample positions this rank reads in epoch ``epoch``, in order."""
        per_rank = self.per_rank
        return self.permutation(epoch)[self.rank * per_rank:(self.rank + 1) * per_rank]


def val_shard(num_samples: int, rank: int, size: int, larger_first: bool = False) -> range:
    """The positions rank ``rank`` evaluates: a contiguous slice, disjoint from the other
    ranks' and together covering ``range(num_samples)`` once.

    ``[r * N // size, (r + 1) * N // size)``; with ``larger_first`` the first
    ``N mod size`` ranks take one sample more instead (``numpy.array_split``'s split,
    which Fashion-MNIST's loader has always used).
    """
    n, rank, size = int(num_samples), int(rank), int(size)
    if larger_first:
        base, extra = divmod(n, size)
        lo = rank * base + min(rank, extra)
        return range(lo, lo + base + (rank < extra))
    return range(rank * n // size, (rank + 1) * n // size)
