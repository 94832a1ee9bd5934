"""Benchmark runs made the way ``yasgd train`` makes them, and what they say about themselves.

A benchmark builds its run with :func:`build_run` (``yasgd.config.load`` of its overrides,
then ``yasgd.train.build``) and times :func:`train_arm`: one call is one
``yasgd.step.train_step``, the function ``yasgd train`` runs every step. What a benchmark
then states about a run -- BN momentum, allreduce groups, per-rank batch, dtype, input
shape, steps taken -- comes from :func:`run_facts`, which reads the objects that ran
(the network's BatchNorm layers, the trainer's groups, the parameters, the last batch),
never a value recomputed from the config.
"""
from __future__ import annotations

from typing import (TYPE_CHECKING, Callable, Dict, Iterator, List, NamedTuple, Optional,
                    Sequence, Union)

from yasgd import step as step_mod

if TYPE_CHECKING:
    import mxnet as mx
    from yasgd.data import Loader
    from yasgd.dist import World
    from yasgd.train import Setup


class Arm(NamedTuple):
    """One timed arm of a benchmark: ``step`` (one call = one training step) and
    ``facts`` (what the arm states about itself, read after the timing)."""
    step: Callable[[], None]
    facts: Callable[[], Dict[str, object]]

    def __call__(self) -> None:
        self.step()


def build_run(overrides: Sequence[str], world: "World") -> "Setup":
    """``yasgd.train.build`` of the config ``overrides`` give (validated as for a run)."""
    from yasgd import config as config_mod, train
    return train.build(config_mod.load(None, list(overrides)), world)


class Batches(Iterator):
    """A loader's batches epoch after epoch (a benchmark may take more steps than one
    epoch holds); ``shape`` is the shape of the last input batch handed out."""

    def __init__(self, loader: "Loader"):
        self.loader, self.epoch, self.shape = loader, 0, None
        self._it = iter(loader)

    def __next__(self):
        try:
            x, y = next(self._it)
        except StopIteration:
            self.epoch += 1
            self.loader.set_epoch(self.epoch)
            self._it = iter(self.loader)
            x, y = next(self._it)
        self.shape = tuple(x.shape)
        return x, y


def train_arm(s: "Setup") -> Arm:
    """The arm that times ``s``: each call is one ``yasgd.step.train_step`` (looked up at
    call time, so that a wrapper around it sees every call), metrics kept on the device."""
    from yasgd.meter import TrainMeter
    batches, meter = Batches(s.train_loader), TrainMeter(s.ctx)

    def step() -> None:
        step_mod.train_step(s, batches, meter)
    return Arm(step, lambda: run_facts(s, batches))


# -- facts read from the objects -------------------------------------------------------
def bn_momenta(net: "mx.gluon.Block") -> List[float]:
    """The momentum of every BatchNorm layer of ``net``, as the layer holds it: MXNet
    1.9.1's ``gluon.nn.BatchNorm`` and ``BatchNormReLU`` (both ``_BatchNorm``) keep the
    arguments of their operator in ``_kwargs`` and pass them to it on every forward."""
    from mxnet.gluon.nn.basic_layers import _BatchNorm
    found: List[float] = []

    def visit(block) -> None:
        if isinstance(block, _BatchNorm):
            found.append(float(block._kwargs["momentum"]))
    net.apply(visit)
    return found


def bn_momentum(net: "mx.gluon.Block") -> Union[float, List[float], None]:
    """The BN momentum of ``net``: one number when every BatchNorm layer has the same,
    the sorted distinct values when they differ, None without BatchNorm."""
    values = sorted(set(bn_momenta(net)))
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def param_dtype(net: "mx.gluon.Block") -> str:
    """The dtype(s) of the network's parameters, e.g. ``float32``."""
    import numpy as np
    return "/".join(sorted({np.dtype(p.dtype).name for p in net.collect_params().values()}))


def run_facts(s: "Setup", batches: Optional[Batches] = None) -> Dict[str, object]:
    """What a benchmark states about the run ``s``, read from its objects."""
    trainer = s.trainer
    groups = getattr(trainer, "groups", None)
    return {"steps": s.steps_run, "ranks": s.world.size, "per_rank_batch": s.per_rank,
            "accumulate": s.cfg.train.accumulate,
            "input_shape": list(batches.shape) if batches is not None and batches.shape else None,
            "dtype": param_dtype(s.net), "bn_momentum": bn_momentum(s.net),
            "groups": None if groups is None else len(groups),
            "hybridized": bool(getattr(s.net, "_active", False)),
            "optimizer": type(trainer._optimizer).__name__,
            "trainer": type(trainer).__name__}
