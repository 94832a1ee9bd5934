"""Gradient accumulation: k micro-batches of b == one batch of k*b (BN-free model).

The accumulated side is yasgd.step.train_step itself, the step train.train_epoch runs
(parameters with grad_req='add', one backward per micro-batch, one trainer.step(k*b),
then zero_grad). Compared after 4 LARS steps with one batch of k*b per step; tolerance
per tensor: L2 norm of the difference <= 1e-5 x the norm, every element within 1e-5 of
the tensor's largest magnitude.
"""
from types import SimpleNamespace

import mxnet as mx
import numpy as np
import pytest

import yasgd.optim
from yasgd import allreduce, init
from yasgd.loss import LabelSmoothingCE
from yasgd.meter import TrainMeter
from yasgd.step import train_step


def net_():
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Conv2D(6, 3, padding=1, in_channels=1, activation="relu"),
            mx.gluon.nn.GlobalAvgPool2D(), mx.gluon.nn.Dense(4, in_units=6))
    init.parallel_initialize(net, 3, check=False)
    return net


@pytest.mark.parametrize("k", [2, 4])
def test_accumulation_equals_large_batch(k):
    b, steps = 6, 4
    rng = np.random.RandomState(0)
    data = [(rng.randn(k * b, 1, 8, 8).astype(np.float32),
             rng.randint(0, 4, k * b).astype(np.float32)) for _ in range(steps)]
    loss_fn = LabelSmoothingCE(0.1)
    opt = dict(learning_rate=0.8, momentum=0.9, wd=1e-4, eta=0.01, epsilon=1e-9)

    big = net_()
    tb = allreduce.DistributedTrainer(big.collect_params(), yasgd.optim.LARS(**opt))
    for x, y in data:
        with mx.autograd.record():
            loss = loss_fn(big(mx.nd.array(x)), mx.nd.array(y))
        loss.backward()
        tb.step(k * b)

    acc = net_()
    for p in acc.collect_params().values():
        if p.grad_req != "null":
            p.grad_req = "add"
    ta = allreduce.DistributedTrainer(acc.collect_params(), yasgd.optim.LARS(**opt))
    # the fields of yasgd.train.Setup that train_step reads
    run = SimpleNamespace(cfg=SimpleNamespace(train=SimpleNamespace(accumulate=k),
                                              model=SimpleNamespace(dtype="float32")),
                          net=acc, loss_fn=loss_fn, trainer=ta, per_rank=b, steps_run=0,
                          scaler=None)
    micro = iter([(mx.nd.array(x[j * b:(j + 1) * b]), mx.nd.array(y[j * b:(j + 1) * b]))
                  for x, y in data for j in range(k)])
    meter = TrainMeter(mx.cpu())
    for _ in data:
        train_step(run, micro, meter)
    assert run.steps_run == steps and meter.seen == steps * k * b and meter.window_steps == steps
    assert next(micro, None) is None      # k micro-batches per step, no more

    for pa, pb in zip(acc.collect_params().values(), big.collect_params().values()):
        a, ref = pa.data().asnumpy(), pb.data().asnumpy()
        assert np.linalg.norm(a - ref) <= 1e-5 * np.linalg.norm(ref), pa.name
        np.testing.assert_allclose(a, ref, rtol=0, atol=1e-5 * np.abs(ref).max())
