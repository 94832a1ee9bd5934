"""Gradient averaging through yasgd's trainer equals one process with the whole batch.

N ranks x batch b for 5 LARS steps == 1 process x batch N*b on the same samples,
and == Horovod's stock DistributedTrainer. Tolerance, per tensor: relative
1e-5 in the L2 norm of the difference, and every element within 1e-5 of the
tensor's largest magnitude (an element near zero has no meaningful relative
error). The model has no batch norm, so the only difference is the order of
floating-point sums.
"""
import hashlib

import horovod.mxnet as hvd
import mxnet as mx
import numpy as np
import pytest

import yasgd.optim
from yasgd import allreduce, init
from yasgd.loss import LabelSmoothingCE

B, STEPS, SEED = 8, 5, 7


def bn_free_net():
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Conv2D(8, 3, padding=1, in_channels=3, activation="relu"),
            mx.gluon.nn.Conv2D(16, 3, strides=2, padding=1, in_channels=8, activation="relu"),
            mx.gluon.nn.GlobalAvgPool2D(),
            mx.gluon.nn.Dense(32, in_units=16, activation="relu"),
            mx.gluon.nn.Dense(5, in_units=32))
    init.parallel_initialize(net, SEED, check=False)
    return net


def global_batches(size):
    rng = np.random.RandomState(123)
    return [(rng.randn(size * B, 3, 8, 8).astype(np.float32),
             rng.randint(0, 5, size=size * B).astype(np.float32)) for _ in range(STEPS)]


def assert_close(got, ref, rtol=1e-5):
    assert len(got) == len(ref)
    for i, (a, b) in enumerate(zip(got, ref)):
        scale = np.abs(b).max()
        assert np.linalg.norm(a - b) <= rtol * np.linalg.norm(b), (i, np.linalg.norm(a - b))
        np.testing.assert_allclose(a, b, rtol=0, atol=rtol * scale, err_msg=f"tensor {i}")


def lars():
    return yasgd.optim.LARS(learning_rate=0.5, momentum=0.9, wd=1e-4, eta=0.01, epsilon=1e-9)


def train(net, trainer, batches, lo, hi, batch):
    loss_fn = LabelSmoothingCE(0.1)
    for x, y in batches:
        with mx.autograd.record():
            loss = loss_fn(net(mx.nd.array(x[lo:hi])), mx.nd.array(y[lo:hi]))
        loss.backward()
        trainer.step(batch)
    return [p.data().asnumpy() for p in net.collect_params().values()]


def test_ranks_times_b_equals_one_process_times_nb(world):
    batches = global_batches(world.size)
    lo, hi = world.rank * B, (world.rank + 1) * B
    net = bn_free_net()
    tr = allreduce.DistributedTrainer(net.collect_params(), lars(), group_budget_bytes=2048)
    assert len(tr.groups) > 1                      # several groups really exercised
    got = train(net, tr, batches, lo, hi, B)
    ref_net = bn_free_net()                        # one process, the whole global batch
    ref = train(ref_net, mx.gluon.Trainer(ref_net.collect_params(), lars(), kvstore=None),
                batches, 0, world.size * B, world.size * B)
    assert_close(got, ref)


def test_grouped_equals_horovod_stock_trainer(world):
    batches = global_batches(world.size)
    lo, hi = world.rank * B, (world.rank + 1) * B
    net = bn_free_net()
    got = train(net, allreduce.DistributedTrainer(net.collect_params(), lars(), num_groups=3),
                batches, lo, hi, B)
    stock_net = bn_free_net()
    stock = train(stock_net, hvd.DistributedTrainer(stock_net.collect_params(), lars()),
                  batches, lo, hi, B)
    assert_close(got, stock)


def test_ranks_end_with_identical_parameters(world):
    batches = global_batches(world.size)
    net = bn_free_net()
    tr = allreduce.DistributedTrainer(net.collect_params(), lars())
    params = train(net, tr, batches, world.rank * B, (world.rank + 1) * B, B)
    flat = mx.nd.array(np.concatenate([p.ravel() for p in params])).reshape((1, -1))
    every = hvd.allgather(flat, name="t.final").asnumpy()
    for r in range(world.size):
        np.testing.assert_array_equal(every[r], every[0])


def test_group_boundaries_identical_and_cover_everything(world):
    from yasgd import model
    net = model.build("resnet50_v1.5")
    net.initialize(mx.init.Zero())
    tr = allreduce.DistributedTrainer(net.collect_params(), lars(), group_budget_bytes=4 << 20)
    sig = tr.group_signature()
    flat = sorted(i for g in sig for i in g)
    n_trainable = sum(1 for p in net.collect_params().values() if p.grad_req != "null")
    assert flat == list(range(n_trainable))        # every parameter exactly once
    digest = int(hashlib.sha256(repr(sig).encode()).hexdigest()[:12], 16)
    every = hvd.allgather(mx.nd.array([[digest % 2 ** 24, digest // 2 ** 24]], dtype="float64"),
                          name="t.groups").asnumpy()
    assert (every == every[0]).all(), "ranks built different groups"


def test_parallel_init_is_bit_identical(world):
    from yasgd import model
    net = model.build("resnet20", classes=10, in_channels=1)
    init.parallel_initialize(net, 1234, world=world)   # includes the checksum agreement check
    flat = mx.nd.concat(*[p.data().reshape((-1,)) for p in net.collect_params().values()], dim=0)
    every = hvd.allgather(flat.reshape((1, -1)), name="t.init").asnumpy()
    for r in range(world.size):
        np.testing.assert_array_equal(every[r], every[0])


def test_different_seeds_are_detected(world):
    from yasgd import model
    net = model.build("resnet8", classes=10, in_channels=1)
    if world.size == 1:
        init.parallel_initialize(net, 0, world=world)  # nothing to disagree with
        return
    with pytest.raises(init.InitMismatchError, match=r"parameter \S+ .*differs on rank\(s\) \[1"):
        init.parallel_initialize(net, 100 + world.rank, world=world)


def test_broadcast_option_agrees(world):
    from yasgd import model
    net = model.build("resnet8", classes=10, in_channels=1)
    init.parallel_initialize(net, 100 + world.rank, broadcast=True, world=world)  # check passes


def _grads_from(params, values):
    """Backward of sum_i <w_i, v_i>: the gradient of parameter i is v_i on this rank."""
    with mx.autograd.record():
        total = mx.nd.add_n(*[(p.data() * mx.nd.array(v)).sum() for p, v in zip(params, values)])
    total.backward()


@pytest.mark.parametrize("compression", ["none", "fp16"])
def test_predivide_factor_keeps_the_average_and_the_fp16_range(world, compression):
    """Rank r contributes w_r x G (w_r = r + 1 in fp32; w_r = 1 with fp16 on the wire, each
    rank's value then fits float16 and only the sum can overflow). After the allreduce the
    buffers hold sum / f, and the update divides by batch x ranks / f: the same SGD step for
    every f (closed form). With fp16 on the wire and G near float16's largest value, f = 1
    overflows the sum on more than one rank, f = ranks does not. Valid at any world size."""
    n, r = world.size, world.rank
    fp16 = compression == "fp16"
    G = np.array([40000.0, -20000.0, 1.0] if fp16 else [1.5, -0.75, 1.0], dtype=np.float32)
    w = np.ones(n) if fp16 else np.arange(1, n + 1, dtype=np.float64)
    total, mean = G * w.sum(), G * w.mean()
    for f in ((1.0, float(n)) if fp16 else (1.0, 4.0, float(n))):
        tag = f"pd{int(f)}{compression}"
        net = mx.gluon.nn.Dense(3, in_units=1, use_bias=False, prefix=f"{tag}_")
        net.initialize(mx.init.Constant(1.0))
        params = list(net.collect_params().values())
        tr = allreduce.DistributedTrainer(net.collect_params(), "sgd",
                                          {"learning_rate": 1e-5, "wd": 0.0},
                                          compression=compression, gradient_predivide_factor=f,
                                          prefix=f"{tag}.")
        _grads_from(params, [w[r] * G.reshape(3, 1)])
        tr.allreduce_grads()
        buf = params[0].grad().asnumpy().ravel()
        if fp16 and f == 1.0 and n > 1:
            assert not np.isfinite(buf).all(), "the float16 sum should overflow without predivide"
            continue
        np.testing.assert_allclose(buf, total / (f if n > 1 else 1.0), rtol=1e-3)
        tr.update(1)
        np.testing.assert_allclose(params[0].data().asnumpy().ravel(), 1.0 - 1e-5 * mean,
                                   rtol=1e-3)
