"""Data loaders. Every loader follows one protocol (see :class:`Loader`) so that
``yasgd.train`` does not care where images come from.

    loader.batch_size   per-rank micro-batch
    len(loader)         batches per epoch on this rank (the same on every rank)
    loader.set_epoch(epoch, polish=False)
                        reshuffle for this epoch (same permutation on every rank,
                        seeded by seed + epoch); polish=True switches to the
                        "final polishing" augmentation (almost none)
    iter(loader)        yields (data, label): data NCHW float32 normalised,
                        label float32 of shape (B,), both on the loader's context
    loader.num_classes

Training loaders give every rank the same number of full batches. Validation
loaders give each rank a disjoint shard whose union is the whole set exactly
once (the last batch may be short). Both rules, and the per-epoch permutation, are
:mod:`yasgd.data.sampler`'s, shared by every loader.
"""
from __future__ import annotations

from typing import Iterator, Protocol, Tuple


class Loader(Protocol):
    batch_size: int
    num_classes: int

    def __len__(self) -> int: ...

    def set_epoch(self, epoch: int, polish: bool = False) -> None: ...

    def __iter__(self) -> Iterator[Tuple["object", "object"]]: ...


def build_loaders(cfg, rank: int, size: int, batch_size: int, ctx):
    """(train_loader, val_loader) for ``cfg.data.kind``; raises UsageError on missing data."""
    kind = cfg.data.kind
    if kind == "fashion_mnist":
        from yasgd.data.fashion_mnist import build
    elif kind == "recordio":
        from yasgd.data.recordio import build
    elif kind == "synthetic":
        from yasgd.data.synthetic import build
    else:  # config validation rejects this earlier
        raise AssertionError(kind)
    return build(cfg.data, rank=rank, size=size, batch_size=batch_size, ctx=ctx,
                 seed=cfg.run.seed, num_classes=cfg.model.classes)


def check_data(cfg) -> None:
    """Fail early (UsageError) if the data the config names is not there."""
    kind = cfg.data.kind
    if kind == "fashion_mnist":
        from yasgd.data.fashion_mnist import check
    elif kind == "recordio":
        from yasgd.data.recordio import check
    else:
        return
    check(cfg.data)
