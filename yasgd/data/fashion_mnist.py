"""Fashion-MNIST (Xiao et al. 2017) from its original IDX files, for the embedded demo.

Debian's ``dataset-fashion-mnist`` installs them in /usr/share/datasets/fashion-mnist/
(60,000 training and 10,000 test images, 28x28 grey, 10 classes). Nothing is
downloaded. The whole set lives in memory as uint8; a batch is cut with one
vectorised fancy index (random crop from a zero-padded image + horizontal
flip), normalised, and copied to the context.
"""
from __future__ import annotations

import gzip
import os
import struct
from typing import Iterator, Tuple

import numpy as np

from yasgd import UsageError
from yasgd.data.sampler import EpochSampler, val_shard
from yasgd.hostcopy import device_array

FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
         "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
MEAN, STD = 0.2860, 0.3530   # pixel statistics of the training set (in [0, 1])


def _find(root: str, stem: str) -> str:
    for name in (stem + ".gz", stem):
        path = os.path.join(root, name)
        if os.path.isfile(path):
            return path
    raise UsageError(f"Fashion-MNIST file {stem}[.gz] not found in {root} "
                     f"(apt-get install dataset-fashion-mnist, or set data.root)")


def _read_idx(path: str) -> np.ndarray:
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError) as e:
        raise UsageError(f"cannot read {path}: {e}")
    if len(raw) < 8:
        raise UsageError(f"{path} is truncated")
    magic, = struct.unpack(">I", raw[:4])
    ndim = magic & 0xFF
    if (magic >> 8) != 0x08 or ndim not in (1, 3):
        raise UsageError(f"{path} is not an IDX file of unsigned bytes (magic {magic:#x})")
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    body = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(dims)):
        raise UsageError(f"{path} is truncated: {body.size} of {int(np.prod(dims))} bytes")
    return body.reshape(dims)


def check(data_cfg) -> None:
    if not os.path.isdir(data_cfg.root):
        raise UsageError(f"dataset directory not found: {data_cfg.root} "
                         f"(apt-get install dataset-fashion-mnist, or set data.root)")
    for images, labels in FILES.values():
        _find(data_cfg.root, images)
        _find(data_cfg.root, labels)


def load(root: str, split: str) -> Tuple[np.ndarray, np.ndarray]:
    images, labels = (_read_idx(_find(root, stem)) for stem in FILES[split])
    if len(images) != len(labels):
        raise UsageError(f"{root}: {split} has {len(images)} images but {len(labels)} labels")
    return images, labels.astype(np.float32)


#: The epoch streams of this loader, kept from before the shared sampler so that the
#: demo's sample order stays what it was: the permutation of epoch e is seeded by
#: ``seed + EPOCH_SEED_STRIDE * (e + 1)`` (a large prime stride keeps nearby seeds'
#: epochs apart).
EPOCH_SEED_STRIDE = 1000003


def _slice(r: range) -> slice:
    return slice(r.start, r.stop)


class ArrayLoader:
    """Batches from in-memory uint8 images (N, H, W); see yasgd.data.Loader.

    Sharding is :mod:`yasgd.data.sampler`'s. Training: every epoch one permutation (the
    same on every rank, seeded by seed and epoch, :data:`EPOCH_SEED_STRIDE`); rank r takes
    the r-th of ``size`` equal contiguous slices of it, so the ranks' samples are
    disjoint; the remainder (fewer than size x batch samples) is left out of that epoch
    only and differs from epoch to epoch. Evaluation: rank r takes the r-th of ``size``
    nearly equal slices of the samples in order (the larger ones first); their union is
    the whole set exactly once.
    """

    def __init__(self, images: np.ndarray, labels: np.ndarray, batch_size: int, ctx, rank: int,
                 size: int, seed: int, train: bool, pad: int = 2, flip: bool = True,
                 num_classes: int = 10):
        self.images, self.labels = images, labels
        self.batch_size, self.ctx, self.rank, self.size = batch_size, ctx, rank, size
        self.seed, self.train, self.pad, self.flip = seed, train, pad, flip
        self.num_classes = num_classes
        self.channels = 1
        self.hw = images.shape[1:]
        self.padded = np.pad(images, ((0, 0), (pad, pad), (pad, pad))) if train and pad else images
        self.epoch, self.polish = 0, False
        n = len(images)
        if train:
            self.sampler = EpochSampler(n, rank, size, batch_size, seed,
                                        seed_stride=EPOCH_SEED_STRIDE, seed_offset=1)
            self.per_rank = self.sampler.per_rank
            if self.per_rank == 0:
                raise UsageError(f"{n} training samples cannot give {size} ranks a batch of {batch_size}")
        else:
            self.shard = np.arange(n)[_slice(val_shard(n, rank, size, larger_first=True))]

    def __len__(self) -> int:
        if self.train:
            return self.per_rank // self.batch_size
        return -(-len(self.shard) // self.batch_size)

    def set_epoch(self, epoch: int, polish: bool = False) -> None:
        self.epoch, self.polish = epoch, polish

    def sample_ids(self) -> np.ndarray:
        """The sample indices this rank reads this epoch, in order."""
        if not self.train:
            return self.shard
        return self.sampler.indices(self.epoch)

    def _augment(self, idx: np.ndarray, rng: np.random.RandomState) -> np.ndarray:
        h, w = self.hw
        b = len(idx)
        if not self.train or not self.pad or self.polish:
            oy = ox = np.full(b, self.pad if self.train else 0)
        else:
            oy = rng.randint(0, 2 * self.pad + 1, size=b)
            ox = rng.randint(0, 2 * self.pad + 1, size=b)
        rows = oy[:, None] + np.arange(h)
        cols = ox[:, None] + np.arange(w)
        if self.train and self.flip and not self.polish:
            flip = rng.rand(b) < 0.5
            cols = np.where(flip[:, None], cols[:, ::-1], cols)
        src = self.padded if self.train else self.images
        return src[idx[:, None, None], rows[:, :, None], cols[:, None, :]]

    def __iter__(self) -> Iterator:
        ids = self.sample_ids()
        rng = np.random.RandomState((self.seed * 7919 + self.epoch * 104729 + self.rank) % (2 ** 31))
        for start in range(0, len(ids), self.batch_size):
            idx = ids[start:start + self.batch_size]
            x = self._augment(idx, rng).astype(np.float32)
            x = (x * (1.0 / 255.0) - MEAN) * (1.0 / STD)
            yield (device_array(x[:, None], self.ctx), device_array(self.labels[idx], self.ctx))


def build(data_cfg, rank: int, size: int, batch_size: int, ctx, seed: int, num_classes: int):
    check(data_cfg)
    xtr, ytr = load(data_cfg.root, "train")
    if data_cfg.eval_set == "holdout":
        # the validation split: the training images the run does not train on
        if data_cfg.limit >= len(xtr):
            raise UsageError(f"config key data.eval_set=holdout: data.limit={data_cfg.limit} "
                             f"leaves none of the {len(xtr):,} training images out")
        xte, yte = xtr[data_cfg.limit:], ytr[data_cfg.limit:]
    else:
        xte, yte = load(data_cfg.root, "test")
    if data_cfg.limit:
        xtr, ytr = xtr[:data_cfg.limit], ytr[:data_cfg.limit]
    if data_cfg.eval_limit:
        xte, yte = xte[:data_cfg.eval_limit], yte[:data_cfg.eval_limit]
    train = ArrayLoader(xtr, ytr, batch_size, ctx, rank, size, seed, train=True,
                        pad=data_cfg.pad_crop, flip=data_cfg.flip, num_classes=num_classes)
    val = ArrayLoader(xte, yte, max(batch_size, 1000), ctx, rank, size, seed, train=False,
                      num_classes=num_classes)
    return train, val
