"""Split parameters by structure, not by name (timm, nanoGPT).

A tensor with ndim <= 1 (BN gamma/beta, biases) gets neither LARS nor weight
decay; every tensor with ndim >= 2 (convolution and dense weights) gets both.
This is what every large-batch recipe does (You et al. 2017; Goyal et al. 2017;
Fujitsu MLPerf v0.6: "no WD on BN, no WD on bias"); selecting by shape instead
of by name suffix cannot silently miss a parameter, which is what happens to
MXNet's built-in LARS under gluon.Trainer (it sees no names).
"""
from __future__ import annotations

from typing import Iterable, List, Tuple


def is_lars_param(shape: Tuple[int, ...]) -> bool:
    """True for weights that get LARS and weight decay (ndim >= 2)."""
    return len(shape) >= 2


def split_by_structure(params: Iterable) -> Tuple[List, List]:
    """(lars_and_wd, plain) lists of trainable Gluon parameters, order kept."""
    lars, plain = [], []
    for p in params:
        if getattr(p, "grad_req", "write") == "null":
            continue
        (lars if is_lars_param(tuple(p.shape)) else plain).append(p)
    return lars, plain
