"""Batch-norm statistics re-estimation before evaluation.

YASGD: at batch 81,920 an epoch has only 16 iterations, so BN's exponential
moving averages are taken over few updates of a fast-changing network and do
not match the final weights. Besides tuning the momentum (yasgd.model.
bn_momentum_for) and "final polishing" (little augmentation in the last
epochs, so the statistics match validation images), the statistics can be
re-estimated: reset the moving mean/variance and run ``batches`` un-augmented
training batches through the network in training mode with momentum
(i-1)/i for the i-th batch, which makes the moving averages the exact
arithmetic mean of the batch statistics; then average them over ranks, so
every rank evaluates with the same statistics.
"""
from __future__ import annotations

from typing import List

import mxnet as mx
from mxnet.gluon import nn


def bn_layers(net) -> List[nn.HybridBlock]:
    found = []

    def visit(block):
        if isinstance(block, (nn.BatchNorm, nn.BatchNormReLU)):
            found.append(block)
        for child in block._children.values():
            visit(child)
    visit(net)
    return found


def recalibrate(net, loader, batches: int, world=None, dtype: str = "float32") -> int:
    """Re-estimate every BN layer's moving statistics; returns the batches used.

    ``loader``: a training loader (yasgd.data protocol); it is switched to the
    polish (un-augmented) mode for one pass. Needs an imperative (not
    hybridized) network, since the per-batch momentum is a layer attribute.
    """
    layers = bn_layers(net)
    if not layers or batches <= 0:
        return 0
    saved = [layer._kwargs["momentum"] for layer in layers]
    for layer in layers:
        layer.running_mean.set_data(mx.nd.zeros_like(layer.running_mean.data()))
        layer.running_var.set_data(mx.nd.ones_like(layer.running_var.data()))
    epoch = getattr(loader, "epoch", 0)
    loader.set_epoch(epoch, polish=True)
    # MXNet's CPU BatchNorm updates its moving statistics in backward: run a backward
    # to the input only, with every parameter's gradient switched off meanwhile.
    params = list(net.collect_params().values())
    grad_reqs = [p.grad_req for p in params]
    for p in params:
        p.grad_req = "null"
    used = 0
    try:
        for i, (x, _) in enumerate(loader):
            if i >= batches:
                break
            for layer in layers:
                layer._kwargs["momentum"] = i / (i + 1.0)   # running = mean of batch stats
            x = x.astype(dtype) if dtype != "float32" else x.copy()
            x.attach_grad()
            with mx.autograd.record():
                out = net(x)
            out.backward()
            used += 1
    finally:
        for layer, m in zip(layers, saved):
            layer._kwargs["momentum"] = m
        for p, req in zip(params, grad_reqs):
            p.grad_req = req
        loader.set_epoch(epoch)
    if world is not None and world.size > 1:
        import horovod.mxnet as hvd
        for j, layer in enumerate(layers):
            for k, p in enumerate((layer.running_mean, layer.running_var)):
                p.set_data(hvd.allreduce(p.data(), average=True, name=f"yasgd.bn.{j}.{k}"))
    return used
