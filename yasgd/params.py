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

#: what ndim <= 1 tensors may be left out of (``optim.exclude_1d``): LARS and weight decay
#: (the default, as above), weight decay only, or nothing
EXCLUDE_1D = ("lars_and_wd", "wd", "none")


def is_lars_param(shape: Tuple[int, ...]) -> bool:
    """True for weights that get LARS and weight decay (ndim >= 2)."""
    return len(shape) >= 2


def gets_lars(shape: Tuple[int, ...], exclude_1d: str = "lars_and_wd") -> bool:
    """Whether a tensor of this shape gets the LARS trust ratio under ``exclude_1d``."""
    return is_lars_param(shape) or exclude_1d != "lars_and_wd"


def gets_wd(shape: Tuple[int, ...], exclude_1d: str = "lars_and_wd") -> bool:
    """Whether a tensor of this shape gets weight decay under ``exclude_1d``."""
    return is_lars_param(shape) or exclude_1d == "none"


def split_by_structure(params: Iterable) -> Tuple[List, List]:
    """(lars_and_wd, plain) lists of trainable Gluon parameters, order kept."""
    lars, plain = [], []
    for p in params:
        if getattr(p, "grad_req", "write") == "null":
            continue
        (lars if is_lars_param(tuple(p.shape)) else plain).append(p)
    return lars, plain
