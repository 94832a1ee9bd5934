"""float16 numerics as the paper ran them: the loss in float32, loss scaling (static and
dynamic, with injected infinities), the device rules of model.fused_bn_relu and of
model.dtype, and no blocking host-to-device copy inside a training step.

Tolerances: the float32 loss against a float64 NumPy reference, relative 1e-6; updates
against closed forms, relative 1e-6 (float32 arithmetic on small vectors).
"""
import os
import subprocess
import sys

import mxnet as mx
import numpy as np
import pytest

from yasgd import UsageError, allreduce, config, config_device, hostcopy, loss_scale
from yasgd.loss import LabelSmoothingCE


def _smoothed_ce_f64(z, y, eps):
    z = z.astype(np.float64)
    logp = z - z.max(axis=1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(axis=1, keepdims=True))
    return -(1 - eps) * logp[np.arange(len(y)), y] - eps * logp.mean(axis=1)


def test_loss_is_float32_for_float16_logits():
    rng = np.random.default_rng(0)
    # logits of a trained classifier: large and close together, where float16 loses digits
    z = (rng.normal(size=(64, 1000)) * 4 + 20).astype(np.float16)
    y = rng.integers(0, 1000, size=64)
    want = _smoothed_ce_f64(z, y, 0.1)
    fn = LabelSmoothingCE(0.1)
    got = fn(mx.nd.array(z, dtype="float16"), mx.nd.array(y))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-6)
    # the same formula evaluated in float16 misses by far more: the cast is what holds it
    in_f16 = fn.hybrid_forward(mx.nd, mx.nd.array(z, dtype="float16"), mx.nd.array(y))
    assert in_f16.dtype == np.float16
    assert np.max(np.abs(in_f16.asnumpy().astype(np.float64) - want) / want) > 1e-4


def _trainer(weights, lr=0.5, **kw):
    """A real Gluon parameter set and yasgd's trainer (one process), plain SGD."""
    params = []
    for i, w in enumerate(weights):
        p = mx.gluon.Parameter(f"layer{i}_weight", shape=np.shape(w))
        p.initialize(mx.init.Constant(0), ctx=mx.cpu())
        p.set_data(mx.nd.array(w))
        params.append(p)
    tr = allreduce.DistributedTrainer(params, "sgd", {"learning_rate": lr, "wd": 0.0}, **kw)
    return params, tr


def _set_grads(params, grads):
    """Backward of sum_i <w_i, g_i>: each parameter's gradient is g_i (inf and NaN included)."""
    with mx.autograd.record():
        total = mx.nd.add_n(*[(p.data() * mx.nd.array(g)).sum() for p, g in zip(params, grads)])
    total.backward()


def test_static_scale_divides_out_of_the_update():
    w, g = np.array([1.0, -2.0, 3.0]), np.array([0.25, 0.5, -1.0])
    params, tr = _trainer([w])
    sc = loss_scale.LossScaler(tr, 128.0, dynamic=False)
    _set_grads(params, [g * 128.0])            # what backward of (loss x 128) writes
    assert sc.step(2, [p.grad() for p in params])
    np.testing.assert_allclose(params[0].data().asnumpy(), w - 0.5 * g / 2, rtol=1e-6)


def test_dynamic_scale_skips_overflow_and_grows_after_a_window():
    w, g = np.array([1.0, 2.0]), np.array([0.5, -0.5])
    params, tr = _trainer([w, w])
    sc = loss_scale.LossScaler(tr, 1024.0, dynamic=True, window=3)
    grads = [p.grad() for p in params]
    # an injected infinity in one layer: no update anywhere, scale halved
    _set_grads(params, [g * 1024, np.array([np.inf, 1.0])])
    assert not sc.step(1, grads)
    for p in params:
        np.testing.assert_array_equal(p.data().asnumpy(), w)
    assert (sc.scale, sc.skipped, sc.good) == (512.0, 1, 0)
    # a NaN too
    _set_grads(params, [np.array([np.nan, 0.0]), g * 512])
    assert not sc.step(1, grads) and sc.scale == 256.0
    # finite steps update with the true gradient; the third in a row doubles the scale
    expect = w.copy()
    for k in range(3):
        _set_grads(params, [g * sc.scale, g * sc.scale])
        assert sc.step(1, grads)
        expect = expect - 0.5 * g
        np.testing.assert_allclose(params[0].data().asnumpy(), expect, rtol=1e-6)
    assert (sc.scale, sc.good) == (512.0, 0)
    # the scale never falls below 1
    sc.scale = 1.0
    sc.after_step(False)
    assert sc.scale == 1.0


def test_loss_scale_config_values():
    assert loss_scale.from_config(config.load(None, []).train, None) is None
    _, tr = _trainer([np.ones(2)])
    dyn = loss_scale.from_config(config.load(None, ["train.loss_scale=dynamic"]).train, tr)
    assert dyn.dynamic and dyn.scale == 2.0 ** 16 and tr._scale == 1.0 / 2 ** 16
    static = loss_scale.from_config(config.load(None, ["train.loss_scale=256"]).train, tr)
    assert not static.dynamic and static.scale == 256.0
    for bad in ("0.5", "inf", "auto", "-4"):
        with pytest.raises(UsageError, match="train.loss_scale must be none, dynamic"):
            config.load(None, [f"train.loss_scale={bad}"])
    with pytest.raises(UsageError, match="gradient_predivide_factor"):
        config.load(None, ["comm.gradient_predivide_factor=0"])


def test_fused_bn_relu_where_mxnet_has_the_kernel():
    auto = config.load(None, ["model.fused_bn_relu=auto"])
    assert config.fused_bn_relu(auto, "cpu") and not config.fused_bn_relu(auto, "gpu")
    half = config.load(None, ["model.fused_bn_relu=auto", "model.dtype=float16"])
    assert not config.fused_bn_relu(half, "cpu")
    on = config.load(None, ["model.fused_bn_relu=true"])
    config.check_device(on, "cpu")
    with pytest.raises(UsageError, match="model.fused_bn_relu=true .* GPUs"):
        config.check_device(on, "gpu")
    with pytest.raises(UsageError, match="model.fused_bn_relu=true .* float16"):
        config.load(None, ["model.fused_bn_relu=true", "model.dtype=float16"])
    assert not config.fused_bn_relu(config.load(None, []), "cpu")   # default: never fused


@pytest.mark.parametrize("preset,world", [("paper", 2048), ("mlperf_v06", 2048),
                                          ("lars_32k", 512), ("demo", 2), ("tiny", 2)])
def test_presets_pass_the_gpu_checks(preset, world):
    cfg = config.load(f"examples/configs/{preset}.yaml")
    config.per_rank_batch(cfg, world)
    config.check_device(cfg, "gpu")


def test_device_array_copies_from_the_host(monkeypatch):
    """For a GPU context the array is made on the host (pinned) and handed to the engine's
    asynchronous copy; nothing is created with a device context directly."""
    made = []

    class HostArray:
        def as_in_context(self, ctx):
            made.append(("copy", ctx.device_type))
            return "on-device"

    monkeypatch.setattr(mx.nd, "array",
                        lambda values, ctx=None, dtype=None: made.append(
                            ("array", ctx.device_type)) or HostArray())
    assert hostcopy.device_array([1.0, 2.0], mx.gpu(0)) == "on-device"
    assert made == [("array", "cpu_pinned"), ("copy", "gpu")]


def test_the_step_creates_arrays_only_through_device_array(monkeypatch):
    """Inside yasgd.step.train_step (a real run of tiny.yaml: loader, LARS, meter), every
    mx.nd.array call comes from yasgd.hostcopy.device_array."""
    from yasgd import step, train
    from yasgd.dist import World
    from yasgd.meter import TrainMeter
    s = train.build(config.load("examples/configs/tiny.yaml",
                                ["run.dir=", "data.limit=512", "train.global_batch=64"]), World())
    batches = iter(s.train_loader)
    meter = TrainMeter(s.ctx)
    step.train_step(s, batches, meter)          # warm-up: graph and optimizer state
    callers, real = [], mx.nd.array

    def recording(*a, **kw):
        callers.append(sys._getframe(1).f_globals.get("__name__"))
        return real(*a, **kw)
    monkeypatch.setattr(mx.nd, "array", recording)
    step.train_step(s, batches, meter)
    assert callers, "the step made no array at all: the check would be empty"
    assert set(callers) == {"yasgd.hostcopy"}, callers


def test_check_config_device_option():
    """`yasgd check-config --device gpu`: the presets pass; fused BN + ReLU forced on is one
    error line and exit 2."""
    import subprocess
    cmd = [sys.executable, "-m", "yasgd.cli", "check-config", "examples/configs/paper.yaml"]
    gpu = ["--world-size", "2048", "--device", "gpu"]
    ok = subprocess.run(cmd + gpu, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert "# device: gpu; BN + ReLU fused: false" in ok.stdout
    bad = subprocess.run(cmd + ["model.fused_bn_relu=true"] + gpu, capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.count("\n") == 1 and bad.stderr.startswith("yasgd: error: config key "
                                                                 "model.fused_bn_relu=true")


def test_float16_is_refused_on_the_cpu_where_mxnet_cannot_train_it(tmp_path):
    """The rule's premise, on this MXNet: its CPU build multiplies no float16 matrices (a
    Dense layer's forward fails), so no model trains in float16 on a CPU. yasgd train, whose
    ranks compute on this host's CPU, refuses model.dtype=float16 before any work: one line,
    exit 2, no run directory; check-config refuses it for CPU ranks and passes it for GPUs."""
    x, w = mx.nd.ones((2, 3), dtype="float16"), mx.nd.ones((4, 3), dtype="float16")
    with pytest.raises(mx.base.MXNetError, match="float16 fully connected layer is currently ?only supported by CuDNN"):
        mx.nd.FullyConnected(x, w, no_bias=True, num_hidden=4).asnumpy()
    assert mx.context.num_gpus() == 0
    cli = [sys.executable, "-m", "yasgd.cli"]
    train = subprocess.run(cli + ["train", "examples/configs/tiny.yaml", "model.dtype=float16",
                                  f"run.dir={tmp_path}/runs"], capture_output=True, text=True,
                           timeout=120)
    assert (train.returncode, train.stdout) == (2, ""), train.stderr
    assert train.stderr == f"yasgd: error: {config_device.FLOAT16_NEEDS_GPU}\n"
    assert not os.path.exists(tmp_path / "runs")
    cfg = config.load("examples/configs/tiny.yaml", ["model.dtype=float16"])
    with pytest.raises(UsageError, match="model.dtype=float16 needs GPUs"):
        config_device.check(cfg, "cpu")
    config_device.check(cfg, "gpu")
    config_device.check(config.load("examples/configs/tiny.yaml"), "cpu")


@pytest.mark.parametrize("scale, dynamic", [(1024.0, False), (2.0 ** 16, True)])
def test_train_step_with_a_loss_scale_equals_the_step_without(scale, dynamic):
    """yasgd.step.train_step, the step yasgd train runs, with a loss scale: backward runs
    through loss x scale and the scaler divides it out, so 4 SGD steps end where 4 steps
    without a scale end. Tolerance per tensor: every element within 1e-5 of the tensor's
    largest magnitude (powers of two scale exactly; the sums' order may differ)."""
    from types import SimpleNamespace
    from yasgd import init
    from yasgd.meter import TrainMeter
    from yasgd.step import train_step
    rng = np.random.RandomState(0)
    data = [(mx.nd.array(rng.randn(6, 1, 8, 8)), mx.nd.array(rng.randint(0, 4, 6)))
            for _ in range(4)]
    ends = []
    for scaled in (False, True):
        net = mx.gluon.nn.HybridSequential()
        net.add(mx.gluon.nn.Conv2D(6, 3, padding=1, in_channels=1, activation="relu"),
                mx.gluon.nn.GlobalAvgPool2D(), mx.gluon.nn.Dense(4, in_units=6))
        init.parallel_initialize(net, 3, check=False)
        tr = allreduce.DistributedTrainer(net.collect_params(), "sgd",
                                          {"learning_rate": 0.5, "momentum": 0.9, "wd": 0.0})
        run = SimpleNamespace(cfg=SimpleNamespace(train=SimpleNamespace(accumulate=1),
                                                  model=SimpleNamespace(dtype="float32")),
                              net=net, loss_fn=LabelSmoothingCE(0.1), trainer=tr, per_rank=6,
                              steps_run=0,
                              scaler=loss_scale.LossScaler(tr, scale, dynamic) if scaled else None)
        batches, meter = iter(data), TrainMeter(mx.cpu())
        for _ in data:
            train_step(run, batches, meter)
        ends.append([p.data().asnumpy() for p in net.collect_params().values()])
    for a, ref in zip(*reversed(ends)):
        np.testing.assert_allclose(a, ref, rtol=0, atol=1e-5 * np.abs(ref).max())
