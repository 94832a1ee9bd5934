"""Run by EVERY rank (valid at any world size, also 1):

    python -m yasgd.launch -np 2 -- .venv/bin/python -m pytest -q -p no:cacheprovider \\
        tests/multiproc/test_data_sharding.py

Each rank makes the same small ImageNet folder of real JPEGs (same seed) in its own
temporary folder and converts it with im2rec; a Horovod allgather checks the
files are identical on all ranks. Then, with Horovod collectives on the record
ids each rank actually received from its loader:
- one epoch: the ranks' samples are disjoint and together are the whole set;
- the next epoch has a different order (and again covers the set);
- with a remainder, every rank still yields the same number of batches;
- the validation shards cover the val set exactly once.
"""
import os
import shutil
import tempfile
import zlib

import mxnet as mx
import numpy as np
import pytest

from yasgd.config import DataCfg
from yasgd.data import im2rec, recordio
from yasgd.data.testdata import make_imagenet_folder
from yasgd.dist import world

BATCH = 4


@pytest.fixture(scope="module")
def w():
    return world(force_horovod=True)


def gather(array, name):
    """Concatenation of every rank's 1-d int64 array, in rank order."""
    w = world(force_horovod=True)
    if not w.horovod:  # another test module made a plain 1-rank world first
        return np.asarray(array, np.int64)
    import horovod.mxnet as hvd
    out = hvd.allgather(mx.nd.array(np.asarray(array, np.int64), dtype=np.int64), name=name)
    return out.asnumpy().astype(np.int64)


@pytest.fixture(scope="module")
def rec(w):
    tmp = tempfile.mkdtemp(prefix=f"yasgd-sharding-r{w.rank}-")
    try:
        # 10 classes x 2*size images: N = 20 * size, a multiple of size * BATCH (5 batches/rank)
        src = make_imagenet_folder(os.path.join(tmp, "src"), per_class_train=2 * w.size,
                                   per_class_val=3, sizes=(40, 72), seed=1)
        out = os.path.join(tmp, "rec")
        im2rec.convert(src, out, resize=32, quality=85, workers=1, progress=False)
        digest = 0
        for name in ("train.rec", "train.idx", "val.rec", "val.idx", "classes.txt"):
            with open(os.path.join(out, name), "rb") as f:
                digest = zlib.crc32(f.read(), digest)
        digests = gather([digest], "sharding.digest")
        assert (digests == digests[0]).all(), "ranks made different data"
        yield out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def loaders(rec, w, **kw):
    cfg = DataCfg(kind="recordio", root=rec, image_size=16, val_resize=20, threads=1, **kw)
    return recordio.build(cfg, rank=w.rank, size=w.size, batch_size=BATCH, ctx=mx.cpu(), seed=3,
                          num_classes=10, with_ids=True)


def epoch_ids(loader, epoch):
    loader.set_epoch(epoch)
    ids, labels = [], []
    for data, label, batch_ids in loader:
        assert data.shape == (BATCH, 3, 16, 16)
        ids += batch_ids.tolist()
        labels += label.asnumpy().astype(int).tolist()
    return np.array(ids, np.int64), np.array(labels, np.int64)


def test_epoch_disjoint_and_complete_then_reshuffled(rec, w):
    train, _ = loaders(rec, w)
    n = 20 * w.size
    assert len(recordio.RecordFile(os.path.join(rec, "train"))) == n
    lens = gather([len(train)], "sharding.len")
    assert (lens == n // (w.size * BATCH)).all()
    rf = recordio.RecordFile(os.path.join(rec, "train"))
    orders = []
    for epoch in (0, 1):
        ids, labels = epoch_ids(train, epoch)
        assert len(ids) == len(train) * BATCH
        # the labels that came with the images are the records' labels
        assert labels.tolist() == [int(rf.read(int(i))[0]) for i in ids]
        everyone = gather(ids, f"sharding.ids.{epoch}")
        assert len(set(everyone.tolist())) == len(everyone), "ranks saw overlapping samples"
        assert sorted(everyone.tolist()) == list(range(n)), "the ranks missed samples"
        orders.append(everyone)
    assert not np.array_equal(orders[0], orders[1]), "epoch 1 repeated epoch 0's order"


def test_remainder_keeps_ranks_in_step(rec, w):
    n = 20 * w.size - 1  # one sample short of full batches: size*BATCH - 1 left over
    train, _ = loaders(rec, w, limit=n)
    lens = gather([len(train)], "sharding.rlen")
    assert (lens == lens[0]).all() and lens[0] == n // (w.size * BATCH)
    ids, _ = epoch_ids(train, 0)
    everyone = gather(ids, "sharding.rids")
    assert len(set(everyone.tolist())) == len(everyone) == lens[0] * BATCH * w.size
    assert n - len(everyone) < w.size * BATCH


def test_val_shards_cover_exactly_once(rec, w):
    _, val = loaders(rec, w)
    ids = [int(i) for _, _, batch_ids in val for i in batch_ids]
    everyone = gather(ids, "sharding.val")
    assert sorted(everyone.tolist()) == list(range(30))
