"""What a config asks of the dataset on this host, checked by the commands before any work
(``yasgd train`` before it makes its run directory or loads an image; ``yasgd check-config
--data``, and ``yasgd launch`` through it, once):

* its labels fit ``model.classes``. A label at or past it has no output of the model to go
  to, and MXNet's loss does not refuse it (it clips the index): the run would train on
  wrong targets without a word. A RecordIO ``classes.txt`` must list ``model.classes``;
* Fashion-MNIST's training images train at their own size: ``data.image_size`` must be
  their side (its loader crops them from a copy zero-padded by ``data.pad_crop`` on each
  side and never resizes), and ``data.pad_crop`` must be below the side: a pad of the side
  or more lets a random crop hold no pixel of the image (the loader keeps the padded copy
  of the whole set in memory, n x (side + 2 pad)^2 bytes);
* its training images give an epoch a step. An epoch of n images (``data.limit`` of them,
  or the whole set) holds n // ``train.global_batch`` optimizer steps: each rank reads
  n // (ranks x per-rank batch) full micro-batches (:class:`yasgd.data.sampler.EpochSampler`)
  and takes a step every ``train.accumulate`` of them.

Only the files that are there are read; the data check (:func:`yasgd.data.check_data`)
names a missing one. Synthetic data follow the config and are not checked."""
from __future__ import annotations

import os
from typing import Dict, Optional, Tuple

from yasgd import UsageError


def check(cfg) -> None:
    """UsageError where the dataset ``cfg.data`` names does not fit ``cfg`` (above)."""
    if cfg.data.kind == "fashion_mnist":
        read: Dict[str, object] = {}        # each file read once by the checks below
        count = _check_idx_labels(cfg.data.root, cfg.model.classes, read)
        _check_idx_side(cfg.data, read)
        _check_idx_counts(cfg.data.root, read)
    elif cfg.data.kind == "recordio":
        count = _check_recordio(cfg.data.root, cfg.model.classes)
    else:
        return
    if count is not None:
        _check_one_step(cfg, *count)


def _read_idx(path: str, read: Dict[str, object]):
    """The loader's reader of an IDX file (kept in ``read``); a header that ends before the
    dimensions its magic announces is named as the loader names a file cut short."""
    import struct

    from yasgd.data import fashion_mnist
    if path not in read:
        try:
            read[path] = fashion_mnist._read_idx(path)
        except struct.error:
            raise UsageError(f"{path} is truncated: its header ends before its "
                             "dimensions") from None
    return read[path]


def _check_idx_counts(root: str, read: Dict[str, object]) -> None:
    """Each split's images and labels, one label an image, as the loader requires (it
    would refuse them only once the run's folder is made)."""
    from yasgd.data import fashion_mnist
    for split, stems in fashion_mnist.FILES.items():
        try:
            images, labels = (fashion_mnist._find(root, stem) for stem in stems)
        except UsageError:
            continue                    # not there: fashion_mnist.check names it
        n, m = len(_read_idx(images, read)), len(_read_idx(labels, read))
        if n != m:
            raise UsageError(f"{root}: {split} has {n} images but {m} labels")


def _check_idx_labels(root: str, classes: int,
                      read: Dict[str, object]) -> Optional[Tuple[int, str]]:
    """Fashion-MNIST's label files (both splits: ``data.eval_set=holdout`` evaluates on
    training labels), read with the loader's own reader; the line names the file with the
    largest label, so the number it asks for is enough for both. Returns the training
    images' count (one label each) and where they are, None where that file is not there."""
    from yasgd.data import fashion_mnist
    tops, count = [], None
    for split, (_, stem) in fashion_mnist.FILES.items():
        try:
            path = fashion_mnist._find(root, stem)
        except UsageError:
            continue
        found = _read_idx(path, read)
        if found.size:
            tops.append((int(found.max()), path))
        if split == "train":
            count = (int(found.size), f"the training set in {root}")
    top, path = max(tops, key=lambda t: t[0], default=(-1, None))
    if top >= classes:
        raise UsageError(f"config key model.classes={classes} is too few for the labels of "
                         f"{path}: they run to {top} ({top + 1} classes); set model.classes="
                         f"{top + 1} or more")
    return count


def _check_idx_side(data, read: Dict[str, object]) -> None:
    """The training images' side against ``data.image_size`` and ``data.pad_crop``, read
    with the loader's own reader (nothing where the file is not there)."""
    from yasgd.data import fashion_mnist
    try:
        path = fashion_mnist._find(data.root, fashion_mnist.FILES["train"][0])
    except UsageError:
        return
    images = _read_idx(path, read)
    if images.ndim != 3:                     # not images: the loader's line names it
        return
    h, w = images.shape[1:]
    if h == w and data.image_size != h:      # one number cannot name another shape
        raise UsageError(f"config key data.image_size={data.image_size}: the images of {path} "
                         f"are {h} x {w} and train at that size (the Fashion-MNIST loader crops "
                         f"from a padded copy, it does not resize); set data.image_size={h}")
    if data.pad_crop >= min(h, w):
        raise UsageError(f"config key data.pad_crop={data.pad_crop}: the images of {path} are "
                         f"{h} x {w}, and a pad of their side or more lets a random crop hold "
                         f"no pixel of the image; use 0 to {min(h, w) - 1}")


def _check_recordio(root: str, classes: int) -> Optional[Tuple[int, str]]:
    from yasgd.data import recordio
    prefix, _, classes_path = recordio.prefixes(root)
    if os.path.isfile(classes_path):
        recordio.check_classes(classes_path, classes)
    if not all(os.path.isfile(prefix + ext) for ext in (".rec", ".idx")):
        return None
    return len(recordio.RecordFile(prefix)), prefix + ".rec"   # one image a record


def _check_one_step(cfg, total: int, where: str) -> None:
    limit, batch = cfg.data.limit, cfg.train.global_batch
    n = min(limit, total) if limit else total
    if n >= batch:
        return
    if limit and limit < total:
        raise UsageError(f"config key data.limit={limit} keeps {n} training images, fewer than "
                         f"one step of train.global_batch={batch}: an epoch would have no step "
                         f"(raise data.limit, or lower train.global_batch)")
    raise UsageError(f"{where} holds {n} images, fewer than one step of "
                     f"train.global_batch={batch}: an epoch would have no step (lower "
                     f"train.global_batch)")
