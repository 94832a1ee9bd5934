"""The dataset's classes against ``model.classes``, checked by the commands before any work:
``yasgd train`` before it loads anything, ``yasgd check-config --data`` (``yasgd launch``
through it, once). A label at or past ``model.classes`` has no output of the model to go
to, and MXNet's loss does not refuse it (its index is clipped): the run would train on
wrong targets without a word. Only the files that are there are read; the data check
(:func:`yasgd.data.check_data`) names a missing one."""
from __future__ import annotations

import os

from yasgd import UsageError


def check(cfg) -> None:
    """UsageError where the labels of ``cfg.data`` need more classes than ``cfg.model.classes``
    (a RecordIO folder: where its ``classes.txt`` lists another number of classes)."""
    if cfg.data.kind == "fashion_mnist":
        _check_idx_labels(cfg.data.root, cfg.model.classes)
    elif cfg.data.kind == "recordio":
        from yasgd.data import recordio
        classes_path = recordio.class_index_path(cfg.data.root)
        if os.path.isfile(classes_path):
            recordio.check_classes(classes_path, cfg.model.classes)


def _check_idx_labels(root: str, classes: int) -> None:
    """Fashion-MNIST's label files (both splits: ``data.eval_set=holdout`` evaluates on
    training labels), read with the loader's own reader; the line names the file with the
    largest label, so the number it asks for is enough for both."""
    from yasgd.data import fashion_mnist
    tops = []
    for _, stem in fashion_mnist.FILES.values():
        try:
            path = fashion_mnist._find(root, stem)
        except UsageError:
            continue
        found = fashion_mnist._read_idx(path)
        if found.size:
            tops.append((int(found.max()), path))
    top, path = max(tops, key=lambda t: t[0], default=(-1, None))
    if top >= classes:
        raise UsageError(f"config key model.classes={classes} is too few for the labels of "
                         f"{path}: they run to {top} ({top + 1} classes); set model.classes="
                         f"{top + 1} or more")
