"""yasgd.data.sampler: the one sharding rule of the loaders, against its closed forms."""
import itertools

import numpy as np
import pytest

from yasgd.data.sampler import EpochSampler, val_shard


@pytest.mark.parametrize("n,size,batch", [(20, 2, 4), (19, 2, 4), (1000, 3, 7), (5, 1, 5),
                                          (64, 4, 16), (101, 5, 3)])
def test_epoch_shards_are_disjoint_equal_and_reshuffled(n, size, batch):
    samplers = [EpochSampler(n, r, size, batch, seed=3) for r in range(size)]
    assert all(len(s) == n // (size * batch) for s in samplers)
    orders = []
    for epoch in range(3):
        parts = [s.indices(epoch) for s in samplers]
        assert all(len(p) == len(samplers[0]) * batch for p in parts)
        everyone = np.concatenate(parts)
        assert len(set(everyone.tolist())) == len(everyone) == samplers[0].samples_per_epoch
        assert n - len(everyone) < size * batch                      # the remainder rule
        # seed + epoch, the first size * B * batches positions cut into size parts
        perm = np.random.RandomState(3 + epoch).permutation(n)
        assert np.array_equal(everyone, perm[:len(everyone)])
        orders.append(everyone)
    if n > batch:
        assert not np.array_equal(orders[0], orders[1])


def test_epoch_seed_stride_and_offset():
    s = EpochSampler(50, 1, 2, 5, seed=11, seed_stride=1000003, seed_offset=1)
    assert s.epoch_seed(4) == 11 + 1000003 * 5
    want = np.random.RandomState(11 + 1000003 * 5).permutation(50)[25:50]
    assert np.array_equal(s.indices(4), want)
    with pytest.raises(ValueError):
        EpochSampler(50, 2, 2, 5, seed=0)


def test_val_shards_cover_once_with_both_splits():
    for n, size in itertools.product(range(0, 30), range(1, 7)):
        for larger_first in (False, True):
            shards = [val_shard(n, r, size, larger_first=larger_first) for r in range(size)]
            assert [i for s in shards for i in s] == list(range(n))
            assert max(map(len, shards)) - min(map(len, shards)) <= 1
        assert [val_shard(n, r, size) for r in range(size)] == [
            range(r * n // size, (r + 1) * n // size) for r in range(size)]
        split = np.array_split(np.arange(n), size)
        assert [list(val_shard(n, r, size, larger_first=True)) for r in range(size)] == [
            s.tolist() for s in split]
