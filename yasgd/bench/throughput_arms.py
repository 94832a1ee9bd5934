"""The arms of ``yasgd bench throughput``: yasgd's step, the Horovod example's loop, and
the machine's matrix-multiply peak.

* :func:`yasgd_arm` -- a run made by ``yasgd.train.build`` from :func:`yasgd_overrides`
  (ResNet-50 v1.5 on synthetic data, LARS, label smoothing, 4 MB static allreduce groups),
  timed through ``yasgd.step.train_step``: the step ``yasgd train`` runs.
* :func:`baseline_arm` -- the one loop written out here on purpose, because it is the
  comparison: Horovod's ``examples/mxnet/mxnet_imagenet_resnet50.py`` ``train_gluon()``
  (GluonCV model, Xavier init + ``hvd.broadcast_parameters``, SGD, ``hvd.DistributedTrainer``,
  forward / backward / ``trainer.step`` / ``metric.update`` every batch).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Sequence

from yasgd.bench import runs
from yasgd.bench.timing import median_time

if TYPE_CHECKING:
    from yasgd.dist import World

IMAGE = 224
GFLOP_PER_IMAGE = 3 * 4.09 * 2          # training: fwd + 2 x bwd; 4.09 GMAC forward
Y_HYB = "yasgd (hybridized, its default for ResNet-50)"
Y_IMP = "yasgd (imperative)"
Y_FBR = "yasgd (hybridized, fused BN+ReLU)"
B_HYB = "baseline Horovod/GluonCV loop (hybridized, as the examples)"
B_IMP = "baseline Horovod/GluonCV loop (imperative)"
FP32 = "yasgd fp32 (imperative)"
BF16 = "yasgd bf16 AMP (imperative)"


def yasgd_overrides(ranks: int, batch: int, image: int = IMAGE, hybridize: bool = False,
                    fused_bn_relu: bool = False) -> List[str]:
    """The config of the yasgd arm: ``batch`` images per rank, 1,000 classes, fp32."""
    return [
        "run.dir=", "run.seed=0", "mlperf.enabled=false",
        "model.name=resnet50_v1.5", "model.classes=1000", "model.bn_momentum_rule=fixed",
        "model.bn_momentum=0.9", "model.zero_init_last_gamma=true",
        f"model.fused_bn_relu={str(fused_bn_relu).lower()}", "model.dtype=float32",
        "data.kind=synthetic", f"data.image_size={image}",
        f"data.synthetic_samples={ranks * batch * 10000}",   # an epoch longer than any bench
        f"train.global_batch={ranks * batch}", "train.accumulate=1", "train.epochs=1",
        f"train.hybridize={str(hybridize).lower()}", "train.label_smoothing=0.1",
        "train.progress=false",
        "optim.name=lars", "optim.lr=0.1", "optim.momentum=0.9", "optim.wd=5e-5",
        "optim.eta=0.001", "optim.epsilon=1e-9", "optim.fused=true",
        # end LR = peak LR: a constant LR, however many steps the benchmark takes
        "schedule.warmup_epochs=0", "schedule.power=1", "schedule.end_lr=0.1",
        f"comm.check_init={str(ranks > 1).lower()}", f"comm.group_budget_bytes={4 << 20}",
    ]


def yasgd_arm(world: "World", batch: int, image: int = IMAGE, hybridize: bool = False,
              fused_bn_relu: bool = False) -> runs.Arm:
    """yasgd's step as ``yasgd train`` runs it, on a run made by ``yasgd.train.build``."""
    s = runs.build_run(yasgd_overrides(world.size, batch, image, hybridize, fused_bn_relu), world)
    return runs.train_arm(s)


def _data(batch, rank, ctx, image=IMAGE):
    import mxnet as mx
    import numpy as np
    rng = np.random.default_rng(rank)
    x = mx.nd.array(rng.uniform(-1, 1, (batch, 3, image, image)), ctx=ctx)
    y = mx.nd.array(rng.integers(0, 1000, batch), ctx=ctx)
    return x, y


def baseline_arm(world: "World", batch: int, hybridize: bool = True,
                 image: int = IMAGE) -> runs.Arm:
    """Horovod's mxnet_imagenet_resnet50.py ``train_gluon()`` loop (GluonCV model)."""
    import mxnet as mx
    from mxnet import autograd, gluon
    import horovod.mxnet as hvd
    ctx = world.context()
    try:
        from gluoncv.model_zoo import get_model
        net = get_model("resnet50_v1b", classes=1000)
    except ImportError:       # GluonCV missing: Gluon's own (v1) ResNet-50
        net = gluon.model_zoo.vision.resnet50_v1(classes=1000)
    if hybridize:
        net.hybridize(static_alloc=True, static_shape=True)
    mx.random.seed(world.rank)
    net.initialize(mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2), ctx=ctx)
    params = net.collect_params()
    hvd.broadcast_parameters(params, root_rank=0, prefix=f"b{int(hybridize)}.")
    opt = mx.optimizer.create("sgd", learning_rate=0.1 * world.size, momentum=0.9, wd=1e-4)
    trainer = hvd.DistributedTrainer(params, opt, prefix=f"b{int(hybridize)}.")
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    metric = mx.metric.Accuracy()
    data, label = _data(batch, world.rank, ctx, image)

    def step():
        with autograd.record():
            output = net(data)
            loss = loss_fn(output, label)
        loss.backward()
        trainer.step(batch)
        metric.update([label], [output])

    def facts() -> Dict[str, object]:
        return {"ranks": world.size, "per_rank_batch": data.shape[0],
                "input_shape": list(data.shape), "dtype": runs.param_dtype(net),
                "bn_momentum": runs.bn_momentum(net), "groups": None, "hybridized": hybridize,
                "optimizer": type(opt).__name__, "trainer": type(trainer).__name__}
    return runs.Arm(step, facts)


def arms(mode: str, world: "World", batch: int, image: int = IMAGE) -> Dict[str, callable]:
    """The arms one launch times, as makers (each builds its run when called)."""
    if mode == "single":
        return {Y_HYB: lambda: yasgd_arm(world, batch, image, hybridize=True),
                Y_IMP: lambda: yasgd_arm(world, batch, image),
                Y_FBR: lambda: yasgd_arm(world, batch, image, hybridize=True, fused_bn_relu=True),
                B_HYB: lambda: baseline_arm(world, batch, True, image),
                B_IMP: lambda: baseline_arm(world, batch, False, image)}
    if mode == "ranks":
        return {Y_HYB: lambda: yasgd_arm(world, batch, image, hybridize=True),
                B_HYB: lambda: baseline_arm(world, batch, True, image),
                B_IMP: lambda: baseline_arm(world, batch, False, image)}
    if mode == "ranks-default":   # the baseline as a user runs the example
        return {B_HYB: lambda: baseline_arm(world, batch, True, image)}
    raise ValueError(f"unknown mode {mode!r}")


def matmul_peak(sizes: Sequence[int], repeats: int = 3, dtype: str = "float32") -> Dict[str, float]:
    """{label: GFLOP/s} of the fastest N x N x N multiply through MXNet."""
    import mxnet as mx
    out = {}
    for n in sizes:
        a = mx.nd.random.uniform(shape=(n, n))
        b = mx.nd.random.uniform(shape=(n, n))
        if dtype == "bfloat16":
            from mxnet.contrib.amp import amp as amp_mod
            a = mx.nd.amp_cast(a, dtype=amp_mod.bfloat16)
            b = mx.nd.amp_cast(b, dtype=amp_mod.bfloat16)
        fns = {f"FullyConnected (oneDNN) {dtype} N={n}":
               lambda: mx.nd.FullyConnected(a, b, no_bias=True, num_hidden=n)}
        if dtype == "float32":
            fns[f"dot {dtype} N={n}"] = lambda: mx.nd.dot(a, b)
        for k, fn in fns.items():
            t = median_time(fn, repeats=repeats, warmup=1)
            out[k] = round(2 * n ** 3 / t.median / 1e9, 1)
    return out
