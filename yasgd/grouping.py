"""The static gradient grouping rule, in one place (pure Python + NumPy, no MXNet).

YASGD packs the gradients of consecutive layers into messages of a few MB, split into groups
statically, in backward order (the last layer's gradients first), so that every rank agrees on
the groups without a run-time negotiation. Two rules, both pure functions of tensor byte sizes:

* budget (the default): consecutive tensors are packed while the group stays within the budget;
  a tensor larger than the budget forms a group of its own;
* num_groups > 0: the tensors are split into that many groups of nearly equal bytes, by where
  each tensor's cumulative byte count falls (MXNet's ``MXNET_HOROVOD_NUM_GROUPS`` rule).

Given the layer of each tensor, both rules work on whole layers: a layer's weight and bias
always travel in one message (a group holds whole layers, so the first group holds the
classifier, not its bias alone).

The Horovod layer (:mod:`yasgd.allreduce`) applies them to Gluon parameters and the scaling
model (:mod:`yasgd.simulate`) to ResNet-50's gradient tensors, so that both group alike.
"""
from __future__ import annotations

from typing import Hashable, List, Optional, Sequence, Tuple

import numpy as np

# "a few MB" (YASGD): large enough to amortise a call's latency, small enough to overlap backward
DEFAULT_BUDGET_BYTES = 4 << 20


def tensor_bytes(tensor) -> int:
    """Bytes of a tensor (a Gluon parameter or an NDArray: shape and dtype), or a byte count."""
    if isinstance(tensor, int):
        return tensor
    return int(np.prod(tensor.shape)) * np.dtype(tensor.dtype).itemsize


def budget_bounds(sizes: Sequence[int], budget_bytes: int = DEFAULT_BUDGET_BYTES
                  ) -> List[Tuple[int, int]]:
    """[begin, end) index ranges of the greedy budget split of ``sizes`` (bytes, in backward
    order): a new group starts when adding the next tensor would exceed the budget, so only a
    group of one tensor can exceed it. ValueError for a budget <= 0."""
    if budget_bytes <= 0:
        raise ValueError(f"group budget must be positive, got {budget_bytes}")
    bounds, start, acc = [], 0, 0
    for i, n in enumerate(sizes):
        if i > start and acc + n > budget_bytes:
            bounds.append((start, i))
            start, acc = i, 0
        acc += n
    if len(sizes):
        bounds.append((start, len(sizes)))
    return bounds


def equal_bytes_groups(sizes: Sequence[int], num_groups: int) -> List[List[int]]:
    """Indices of ``sizes`` (backward order) in ``num_groups`` groups of nearly equal bytes:
    tensor i goes to group ceil(cumulative bytes through i / total x num_groups) - 1, clipped to
    the last group; empty groups are dropped."""
    if num_groups <= 0:
        raise ValueError(f"num_groups must be positive, got {num_groups}")
    if not len(sizes):
        return []
    arr = np.asarray(sizes, dtype=np.float64)
    bounds = np.cumsum(arr) / arr.sum() * num_groups
    groups: List[List[int]] = [[] for _ in range(num_groups)]
    for i, b in enumerate(bounds):
        groups[min(num_groups - 1, int(np.ceil(b - 1e-9)) - 1)].append(i)
    return [g for g in groups if g]


def layer_runs(layers: Optional[Sequence[Hashable]], n: int) -> List[Tuple[int, int]]:
    """[begin, end) index ranges of the runs of equal consecutive keys in ``layers`` (one key per
    tensor: the layer it belongs to); every tensor a run of its own when ``layers`` is None."""
    if layers is None:
        return [(i, i + 1) for i in range(n)]
    if len(layers) != n:
        raise ValueError(f"{len(layers)} layer keys for {n} tensors")
    runs, start = [], 0
    for i in range(1, n + 1):
        if i == n or layers[i] != layers[start]:
            runs.append((start, i))
            start = i
    return runs


def group_indices(sizes: Sequence[int], budget_bytes: int = DEFAULT_BUDGET_BYTES,
                  num_groups: int = 0, layers: Optional[Sequence[Hashable]] = None
                  ) -> List[List[int]]:
    """The groups as lists of indices into ``sizes``: ``num_groups`` > 0 selects the equal-bytes
    split, otherwise the greedy budget split. With ``layers`` (a key per tensor), the tensors of
    one layer (a run of equal keys) are never split between groups: the rules apply to layers."""
    runs = layer_runs(layers, len(sizes))
    unit = [int(sum(sizes[a:b])) for a, b in runs]
    if num_groups > 0:
        unit_groups = equal_bytes_groups(unit, num_groups)
    else:
        unit_groups = [list(range(a, b)) for a, b in budget_bounds(unit, budget_bytes)]
    return [[i for u in g for i in range(*runs[u])] for g in unit_groups]


def group_bytes(sizes: Sequence[int], budget_bytes: int = DEFAULT_BUDGET_BYTES,
                num_groups: int = 0, layers: Optional[Sequence[Hashable]] = None) -> List[int]:
    """Bytes of each group of :func:`group_indices`."""
    return [int(sum(sizes[i] for i in g))
            for g in group_indices(sizes, budget_bytes, num_groups, layers)]
