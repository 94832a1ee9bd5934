"""One training step: the only place yasgd runs one (``yasgd train`` and every benchmark).

    k micro-batches: forward -> smoothed loss -> backward (queued), metrics on the device
      -> allreduce (static groups, started as backward writes them) + LARS update
      -> accumulated gradients cleared

``yasgd.train.train_epoch`` calls :func:`train_step` once per optimizer step; the
throughput, overlap and large-batch benchmarks time the same function on a run made by
``yasgd.train.build``, so the number a benchmark prints is the number of the code users
run. Nothing here waits for the device: MXNet's engine only queues the work, and the
allreduce of a group starts as soon as backward has written that group's gradients.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Tuple

if TYPE_CHECKING:
    import mxnet as mx
    from yasgd.meter import TrainMeter
    from yasgd.train import Setup

Batch = Tuple["mx.nd.NDArray", "mx.nd.NDArray"]


def train_step(s: "Setup", batches: Iterator[Batch], meter: "TrainMeter") -> None:
    """One optimizer step of ``s``: ``s.cfg.train.accumulate`` micro-batches from
    ``batches`` (each ``s.per_rank`` images on this rank), one ``s.trainer.step`` over
    their summed gradients (divided by the ``per_rank x accumulate`` images of this rank
    and, through the trainer, by the number of ranks), losses and correct predictions
    added to ``meter`` on the device. Counts itself in ``s.steps_run``."""
    from mxnet import autograd
    k = s.cfg.train.accumulate
    for _ in range(k):
        x, y = next(batches)
        if s.cfg.model.dtype == "float16":
            x = x.astype("float16")
        # forward + smoothed loss (times the loss scale, recorded too, so that backward
        # runs through it), then backward (queued, not waited for)
        with autograd.record():
            out = s.net(x)
            loss = s.loss_fn(out, y)      # in float32, also for float16 logits (yasgd.loss)
            scaled = loss * s.scaler.scale if s.scaler is not None else loss
        scaled.backward()
        meter.add_batch(loss, out, y)
    # allreduce (grouped, overlapping backward) + LARS update; with a loss scale, the
    # scaler divides it out of the gradients (and, dynamic, skips a step that overflowed)
    if s.scaler is None:
        s.trainer.step(s.per_rank * k)
    else:
        s.scaler.step(s.per_rank * k, [p.grad() for p in s.net.collect_params().values()
                                       if p.grad_req != "null"])
    if k > 1:   # accumulated gradients (grad_req "add") start again from zero
        for p in s.net.collect_params().values():
            if p.grad_req == "add":
                p.zero_grad()
    meter.end_step()
    s.steps_run += 1
