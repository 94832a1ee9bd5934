"""yasgd.ops against NumPy (float64 references), for both backends.

'yasgd' is our operator library (yasgd/ops/yasgd_ops.cc via mx.library.load); 'mxnet' is
the fallback to MXNet's built-ins. Both must pass the same tests (issue 4, acceptance 2).
"""
import os
import subprocess
import sys

import mxnet as mx
import numpy as np
import pytest

from yasgd import ops
from yasgd.bench.optimizer import _guarded_arrays
from yasgd.ops import build as ops_build

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# ResNet-50-like parameter shapes: conv 4-D (one large enough to span many OpenMP chunks),
# dense 2-D, BN gamma/beta and bias 1-D, a single element; ZERO marks an all-zero tensor.
SHAPES = [(64, 3, 7, 7), (256, 64, 1, 1), (64, 64, 3, 3), (512, 512, 3, 3), (1000, 2048),
          (64,), (1000,), (1,), (128, 128, 3, 3), (7,)]
ZERO = 2


def _library_reason():
    try:
        if ops_build.build(quiet=True) is None:
            return "g++ is missing: the operator library cannot be built"
    except Exception as e:  # noqa: BLE001
        return "building the operator library failed: %s" % e
    return None if ops.load_library() else ops.library_error()


_SKIP = _library_reason()
_YASGD = pytest.param("yasgd", marks=pytest.mark.skipif(_SKIP is not None, reason=str(_SKIP)))
BACKENDS = [_YASGD, "mxnet"]
# MXNet 1.9.1's CPU built-in multi_sum_sq accumulates each array sequentially in float32
# (float16 inputs: squares rounded to float16): relative error ~1e-3 on ResNet-50's
# 2.4 M-element layers. The 'mxnet' backend does not use it on CPU; this bounds it.
BUILTIN_SUM_SQ_ERROR = 5e-3


def _arrays(shapes, dtype, seed, zero=None):
    rng = np.random.RandomState(seed)
    out = [rng.standard_normal(s).astype(dtype) for s in shapes]
    if zero is not None:
        out[zero][...] = 0
    return out


@pytest.mark.parametrize("be", BACKENDS)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_multi_sum_sq(be, dtype):
    xs = _arrays(SHAPES, dtype, 0, zero=ZERO)
    got = ops.multi_sum_sq([mx.nd.array(x, dtype=dtype) for x in xs], backend=be)
    assert got.shape == (len(xs),) and got.dtype == np.float32
    want = np.array([np.sum(x.astype(np.float64) ** 2) for x in xs])
    np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-6, atol=0)
    assert got.asnumpy()[ZERO] == 0


def _mixed(be):
    """fp32 master weights and fp16 gradients (scaled apart), in one call."""
    ws = _arrays(SHAPES[:4], "float32", 1)
    gs = [g * np.float16(0.01) for g in _arrays(SHAPES[:4], "float16", 2)]
    got = ops.multi_sum_sq([mx.nd.array(x, dtype=x.dtype) for x in ws + gs], backend=be)
    return got.asnumpy(), np.array([np.sum(x.astype(np.float64) ** 2) for x in ws + gs])


@pytest.mark.parametrize("be", BACKENDS)
def test_multi_sum_sq_weights_and_grads_mixed_dtypes(be):
    got, want = _mixed(be)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_builtin_multi_sum_sq_error(dtype):
    """Why the fallback does not use MXNet's built-in on CPU: float32 accumulation, bounded
    here, and visibly coarser than the 1e-6 above (the test fails if MXNet gets exact)."""
    xs = _arrays(SHAPES, dtype, 0, zero=ZERO)
    arrs = [mx.nd.array(x, dtype=dtype) for x in xs]
    got = ops.builtin_multi_sum_sq(arrs).asnumpy()
    want = np.array([np.sum(x.astype(np.float64) ** 2) for x in xs])
    np.testing.assert_allclose(got, want, rtol=BUILTIN_SUM_SQ_ERROR, atol=0)
    nz = want > 0
    assert np.max(np.abs(got[nz] / want[nz] - 1)) > 1e-6
    ws = _arrays(SHAPES[:4], "float32", 1)   # mixed dtypes: one call per dtype, reordered
    gs = [g * np.float16(0.01) for g in _arrays(SHAPES[:4], "float16", 2)]
    got = ops.builtin_multi_sum_sq([mx.nd.array(x, dtype=x.dtype) for x in ws + gs])
    want = np.array([np.sum(x.astype(np.float64) ** 2) for x in ws + gs])
    np.testing.assert_allclose(got.asnumpy(), want, rtol=BUILTIN_SUM_SQ_ERROR, atol=0)


def _trust_ratio_ref(lrs, w_sq, g_sq, wds, eta, eps, rescale):
    wn, gn = np.sqrt(w_sq.astype(np.float64)), np.sqrt(g_sq.astype(np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        r = lrs * eta * wn / (gn * rescale + wds * wn + eps)
    return np.where((wn > 0) & (gn > 0), r, lrs)


@pytest.mark.parametrize("be", BACKENDS)
@pytest.mark.parametrize("eps", [0.0, 1e-9])
def test_lars_trust_ratio(be, eps):
    rng = np.random.RandomState(3)
    n = 161
    lrs = rng.uniform(0.1, 13.0, n).astype(np.float32)
    wds = rng.choice([0.0, 5e-5, 1e-4], n).astype(np.float32)
    w_sq = rng.uniform(1e-3, 1e4, n).astype(np.float32)
    g_sq = rng.uniform(1e-6, 1e2, n).astype(np.float32)
    w_sq[[0, 5]] = 0   # ||w|| == 0 -> plain lr
    g_sq[[1, 5]] = 0   # ||g|| == 0 -> plain lr
    eta, rescale = 0.0025, 1.0 / 1024
    got = ops.lars_trust_ratio(mx.nd.array(lrs), mx.nd.array(w_sq), mx.nd.array(g_sq),
                               mx.nd.array(wds), eta, eps, rescale, backend=be).asnumpy()
    want = _trust_ratio_ref(lrs, w_sq, g_sq, wds, eta, eps, rescale)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
    assert got[0] == lrs[0] and got[1] == lrs[1] and got[5] == lrs[5]


def _sgd_ref(w, g, m, lr, wd, momentum, rescale, clip=None):
    """One SGD-momentum step in float64 (MXNet's preloaded_multi_sgd_mom_update)."""
    g = rescale * g if clip is None else np.clip(rescale * g, -clip, clip)
    m = momentum * m - lr * (wd * w + g)
    return w + m, m


def _check_sgd(be, shapes, mp, steps=3, clip=None, wdtype="float16"):
    """``mp``: ``wdtype`` weights (and gradients) with fp32 master copies."""
    rng = np.random.RandomState(4)
    n, momentum, rescale = len(shapes), 0.9, 1.0 / 256
    lrs = rng.uniform(0.01, 0.5, n).astype(np.float32)
    wds = rng.choice([0.0, 5e-5, 1e-2], n).astype(np.float32)
    w64 = [x.astype(np.float64) for x in _arrays(shapes, "float32", 5)]
    m64 = [np.zeros(s) for s in shapes]
    if mp:  # wdtype weights with fp32 master copies
        w32 = [mx.nd.array(w, dtype="float32") for w in w64]
        w = [mx.nd.array(w.astype(wdtype), dtype=wdtype) for w in w64]
    else:
        w32, w = None, [mx.nd.array(w, dtype="float32") for w in w64]
    if _WEIGHTS["mode"] == "guarded":
        holder, w = _guarded_arrays(w)   # the block stays alive (and guarded) until the end
    moms = [mx.nd.zeros(s, dtype="float32") for s in shapes]
    for step in range(steps):
        gs = _arrays(shapes, wdtype if mp else "float32", 10 + step)
        ops.multi_sgd_mom_update(w, [mx.nd.array(g, dtype=g.dtype) for g in gs], moms,
                                 mx.nd.array(lrs), mx.nd.array(wds), momentum, rescale,
                                 weights32=w32, backend=be, clip_gradient=clip)
        for i in range(n):
            w64[i], m64[i] = _sgd_ref(w64[i], gs[i].astype(np.float64), m64[i],
                                      float(lrs[i]), float(wds[i]), momentum, rescale, clip)
    master = w32 if mp else w
    for i in range(n):
        got = master[i].asnumpy()
        np.testing.assert_allclose(got, w64[i], rtol=1e-6, atol=1e-7, err_msg="weight %d" % i)
        np.testing.assert_allclose(moms[i].asnumpy(), m64[i], rtol=1e-5, atol=1e-7,
                                   err_msg="momentum %d" % i)
        if mp:  # the weight is exactly wdtype(master)
            np.testing.assert_array_equal(w[i].asnumpy(), got.astype(wdtype))


_WEIGHTS = {"mode": "plain"}


@pytest.fixture(params=["defer", "in-place", "guarded"])
def defer(request, monkeypatch):
    """'yasgd' update paths on float32 weights of ndim >= 2: deferred to MXNet's
    broadcast_add (an MKLDNN build, weights of no guarded block), written by the operator
    (a build without MKLDNN), or written by the operator because they belong to a guarded
    block (an MKLDNN build, ops.guard_layouts: what yasgd.model.build returns)."""
    monkeypatch.setattr(ops.layout, "_mkldnn_built", [request.param != "in-place"])
    monkeypatch.delenv("MXNET_MKLDNN_ENABLED", raising=False)
    monkeypatch.setitem(_WEIGHTS, "mode", "guarded" if request.param == "guarded" else "plain")
    return request.param


@pytest.mark.parametrize("be", BACKENDS)
@pytest.mark.parametrize("mp", [False, True], ids=["fp32", "fp16-master"])
def test_multi_sgd_mom_update(be, mp, defer):
    _check_sgd(be, SHAPES, mp)


def test_multi_sgd_mom_update_fp32_weights_with_masters(defer):
    """multi_precision with float32 weights (deferred: the weight becomes its master through
    MXNet's cast). 'yasgd' only: MXNet 1.9.1's preloaded_multi_mp_sgd_mom_update gives
    wrong float32 weights here (yasgd.optim.LARS keeps masters for float16 weights only)."""
    if _SKIP is not None:
        pytest.skip(_SKIP)
    _check_sgd("yasgd", SHAPES, mp=True, wdtype="float32")


@pytest.mark.parametrize("be", BACKENDS)
def test_multi_sgd_mom_update_clip_gradient(be, defer):
    _check_sgd(be, SHAPES[:3] + SHAPES[5:8], mp=False, steps=2, clip=0.002)


def test_multi_sgd_mom_update_defer_mask_is_checked():
    if _SKIP is not None:
        pytest.skip(_SKIP)
    w = [mx.nd.ones((2, 3)), mx.nd.ones((3,))]
    with pytest.raises(mx.base.MXNetError, match="defer_weights"):
        mx.nd.yasgd_multi_sgd_mom_update(w[0], w[0], w[0], w[1], w[1], w[1],
                                         mx.nd.ones((2,)), mx.nd.ones((2,)),
                                         num_weights=2, defer_weights="1")


@pytest.mark.parametrize("be", BACKENDS)
@pytest.mark.parametrize("when", ["before-backward", "after-backward"])
def test_multi_sgd_mom_update_after_inference_forward(be, when):
    """MKLDNN keeps conv/dense weights in its own layout after an inference forward (the
    conversion back is queued only when a training forward *executes*); a lib_api.h
    operator cannot write such an array ("We can't generate TBlob for MKLDNN data").
    'after-backward' is the case that failed: the update straight after an evaluation."""
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Conv2D(8, 3, in_channels=3), mx.gluon.nn.Dense(4, in_units=8 * 6 * 6))
    net.initialize(mx.init.Xavier())
    x = mx.nd.random.uniform(shape=(2, 3, 8, 8))
    if when == "before-backward":
        net(x).wait_to_read()  # inference: weights now in MKLDNN layout
    with mx.autograd.record():
        loss = net(x).sum()
    loss.backward()
    # the reference is read once the backward pass has run: asnumpy waits for an array's
    # pending writes only, then reorders MKLDNN-layout weights to the default layout on this
    # thread, beside the backward's engine ops that still read the same weights
    mx.nd.waitall()
    params = list(net.collect_params().values())
    ws, gs = [p.data() for p in params], [p.grad() for p in params]
    want = [w.asnumpy() - 0.5 * g.asnumpy() for w, g in zip(ws, gs)]
    if when == "after-backward":
        net(x).wait_to_read()
        mx.nd.waitall()    # the reorders to the MKLDNN layout have run
    n = len(ws)
    ops.multi_sgd_mom_update(ws, gs, [mx.nd.zeros(w.shape) for w in ws], mx.nd.full((n,), 0.5),
                             mx.nd.zeros((n,)), 0.9, 1.0, backend=be)
    for w, ref in zip(ws, want):
        np.testing.assert_allclose(w.asnumpy(), ref, rtol=1e-6, atol=1e-7)


class _Spy:
    """Counts calls of mx.nd.<name> (then calls it)."""

    def __init__(self, monkeypatch, name):
        self.calls, real = 0, getattr(mx.nd, name)

        def spy(*a, **k):
            self.calls += 1
            return real(*a, **k)
        monkeypatch.setattr(mx.nd, name, spy)


def _conv_net():
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Conv2D(8, 3, in_channels=3), mx.gluon.nn.BatchNorm(in_channels=8),
            mx.gluon.nn.Dense(4, in_units=8 * 6 * 6))
    net.initialize(mx.init.Xavier())
    return net


def _sgd_step(net, x, lr=0.5):
    """A training forward/backward; returns (weights, grads, the float64 plain-SGD result)."""
    with mx.autograd.record():
        loss = net(x).sum()
    loss.backward()
    mx.nd.waitall()     # as in test_multi_sgd_mom_update_after_inference_forward
    params = [p for p in net.collect_params().values() if p.grad_req != "null"]
    ws, gs = [p.data() for p in params], [p.grad() for p in params]
    want = [w.asnumpy().astype(np.float64) - lr * g.asnumpy() for w, g in zip(ws, gs)]
    return ws, gs, want


@pytest.mark.filterwarnings("ignore:.*is being hybridized while still having forward hook")
@pytest.mark.parametrize("hybridize", [False, True], ids=["imperative", "hybridized"])
def test_guarded_weights_are_written_in_place_after_inference(monkeypatch, hybridize):
    """ops.guard_layouts: after an inference forward (weights in MKLDNN's layout) the next
    update synchronises once, converts the weights back and writes them in place (no
    deferred broadcast_add); the following steps, with training forwards only, neither
    synchronise nor defer; the result is plain SGD's to 1e-6."""
    if _SKIP is not None:
        pytest.skip(_SKIP)
    if not ops._mkldnn_enabled():
        pytest.skip("MXNet without MKLDNN: nothing is ever deferred")
    net = ops.guard_layouts(_conv_net())
    if hybridize:
        net.hybridize(static_alloc=True, static_shape=True)
    x = mx.nd.random.uniform(shape=(2, 3, 8, 8))
    adds, waits = _Spy(monkeypatch, "broadcast_add"), _Spy(monkeypatch, "waitall")
    for step, infer in enumerate([True, False, False, True]):
        ws, gs, want = _sgd_step(net, x)
        if infer:
            net(x).wait_to_read()   # evaluation after the backward: the case that failed
            mx.nd.NDArray.wait_to_read(ws[0])
        adds.calls = waits.calls = 0
        n = len(ws)
        ops.multi_sgd_mom_update(ws, gs, [mx.nd.zeros(w.shape) for w in ws],
                                 mx.nd.full((n,), 0.5), mx.nd.zeros((n,)), 0.9, 1.0,
                                 backend="yasgd")
        assert adds.calls == 0, "step %d: %d weights deferred" % (step, adds.calls)
        assert waits.calls == (1 if infer or step == 0 else 0), (step, waits.calls)
        for w, ref in zip(ws, want):
            np.testing.assert_allclose(w.asnumpy(), ref, rtol=1e-6, atol=1e-7)


def test_unguarded_weights_are_deferred(monkeypatch):
    """Weights of no guarded block take the safe path on MKLDNN builds: the operator
    updates the momenta, MXNet's broadcast_add writes the conv/dense weights (2 here),
    with no host synchronisation."""
    if _SKIP is not None:
        pytest.skip(_SKIP)
    monkeypatch.setattr(ops.layout, "_mkldnn_built", [True])
    monkeypatch.delenv("MXNET_MKLDNN_ENABLED", raising=False)
    net = _conv_net()
    x = mx.nd.random.uniform(shape=(2, 3, 8, 8))
    ws, gs, want = _sgd_step(net, x)
    adds, waits = _Spy(monkeypatch, "broadcast_add"), _Spy(monkeypatch, "waitall")
    n = len(ws)
    ops.multi_sgd_mom_update(ws, gs, [mx.nd.zeros(w.shape) for w in ws], mx.nd.full((n,), 0.5),
                             mx.nd.zeros((n,)), 0.9, 1.0, backend="yasgd")
    assert (adds.calls, waits.calls) == (2, 0)
    for w, ref in zip(ws, want):
        np.testing.assert_allclose(w.asnumpy(), ref, rtol=1e-6, atol=1e-7)


def test_guard_falls_back_to_deferring_when_conversion_fails(monkeypatch):
    """Where the C API cannot convert a layout (an MXNet without MXNDArrayGetData's
    reorder), the guard warns, stays dirty and the weights are deferred: still correct."""
    if _SKIP is not None:
        pytest.skip(_SKIP)
    monkeypatch.setattr(ops.layout, "_mkldnn_built", [True])
    monkeypatch.delenv("MXNET_MKLDNN_ENABLED", raising=False)

    def fail(arr):
        raise mx.base.MXNetError("We can't generate TBlob for MKLDNN data (test)")
    monkeypatch.setattr(ops.layout, "_to_default_layout", fail)
    net = ops.guard_layouts(_conv_net())
    x = mx.nd.random.uniform(shape=(2, 3, 8, 8))
    ws, gs, want = _sgd_step(net, x)
    net(x).wait_to_read()
    adds = _Spy(monkeypatch, "broadcast_add")
    n = len(ws)
    with pytest.warns(UserWarning, match="stay deferred"):
        ops.multi_sgd_mom_update(ws, gs, [mx.nd.zeros(w.shape) for w in ws],
                                 mx.nd.full((n,), 0.5), mx.nd.zeros((n,)), 0.9, 1.0,
                                 backend="yasgd")
    assert adds.calls == 2
    for w, ref in zip(ws, want):
        np.testing.assert_allclose(w.asnumpy(), ref, rtol=1e-6, atol=1e-7)


def test_guard_does_not_keep_its_block_alive():
    import gc
    net = ops.guard_layouts(_conv_net())
    guard = ops._guards[-1]
    assert guard.block() is net
    del net
    gc.collect()
    assert guard.block() is None
    ops.guard_layouts(_conv_net())     # registering prunes the dead guards
    assert guard not in ops._guards and all(g.block() is not None for g in ops._guards)


def _train_lars(backend, steps=3, batch=32, seed=0, hybridize=False):
    """A Gluon ResNet-8 (conv + BN + dense) trained ``steps`` steps with yasgd.optim.LARS
    through ``mx.gluon.Trainer``, an inference forward (evaluation, synchronised like an
    accuracy read-out) after each backward and after each update; returns every
    parameter (BN running statistics included) as NumPy arrays."""
    import yasgd.model
    import yasgd.optim
    old = os.environ.get(ops.ENV_VAR)
    os.environ[ops.ENV_VAR] = backend
    try:
        mx.random.seed(seed)
        net = yasgd.model.build("resnet8", classes=10, in_channels=1)
        net.initialize(mx.init.Xavier(magnitude=2))
        if hybridize:
            net.hybridize(static_alloc=True, static_shape=True)
        opt = yasgd.optim.LARS(learning_rate=0.5, momentum=0.9, wd=5e-4, eta=0.001)
        trainer = mx.gluon.Trainer(net.collect_params(), opt)
        loss_fn = mx.gluon.loss.SoftmaxCrossEntropyLoss()
        rng = np.random.RandomState(seed)
        x_val = mx.nd.array(rng.uniform(size=(batch, 1, 28, 28)))
        for _ in range(steps):
            x = mx.nd.array(rng.uniform(size=(batch, 1, 28, 28)))
            y = mx.nd.array(rng.randint(0, 10, batch))
            with mx.autograd.record():
                loss = loss_fn(net(x), y)
            loss.backward()
            net(x_val).argmax(axis=1).asnumpy()     # evaluation between backward and update
            trainer.step(batch)
            net(x_val).argmax(axis=1).asnumpy()     # and between the update and next step
        return [p.data().asnumpy() for p in net.collect_params().values()]
    finally:
        if old is None:
            os.environ.pop(ops.ENV_VAR, None)
        else:
            os.environ[ops.ENV_VAR] = old


def _assert_params_close(got, want, rel=1e-5):
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want)):
        scale = max(float(np.abs(b).max()), 1e-30)
        err = float(np.abs(a.astype(np.float64) - b).max()) / scale
        assert err <= rel, "parameter %d %s: relative difference %.3g > %g" % (i, b.shape, err, rel)


@pytest.mark.parametrize("hybridize", [False, True], ids=["imperative", "hybridized"])
def test_lars_training_with_evaluation_matches_mxnet(hybridize):
    """Regression: training crashed (MKLDNN-layout weights as the update's out=) once an
    inference forward ran between steps. yasgd.model.build's network is guarded
    (ops.guard_layouts, reported by ResNet.__call__): the update converts the weights back
    once after each evaluation and writes them in place. Both backends must agree to 1e-5
    (they differ only in the accuracy of the norms)."""
    if _SKIP is not None:
        pytest.skip(_SKIP)
    _assert_params_close(_train_lars("yasgd", hybridize=hybridize),
                         _train_lars("mxnet", hybridize=hybridize))


def test_library_loads_and_trains_after_horovod_import():
    """Regression: Horovod loads libmxnet.so RTLD_GLOBAL, whose own (GCC 4.8, old std::string
    ABI) copies of lib_api's C++ classes then pre-empted the library's: a bus error in
    mx.library.load or 'free(): invalid pointer' in the first operator call. Runs in a fresh
    process that imports horovod.mxnet before the library is loaded."""
    if _SKIP is not None:
        pytest.skip(_SKIP)
    pytest.importorskip("horovod")
    code = ("import horovod.mxnet, os, sys\n"
            "sys.path.insert(0, %r)\n"
            "import test_ops\n"
            "assert test_ops._SKIP is None, test_ops._SKIP\n"
            "test_ops._assert_params_close(test_ops._train_lars('yasgd', steps=2),\n"
            "                              test_ops._train_lars('mxnet', steps=2))\n"
            "print('OK')\n" % os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and "OK" in r.stdout, (r.returncode, r.stdout[-2000:],
                                                    r.stderr[-4000:])


def test_library_exports_only_the_c_entry_points():
    """The fix for the above: no C++ symbol of the library is visible to the dynamic linker
    (version script + -Bsymbolic in yasgd.ops.build), only lib_api's C functions."""
    if _SKIP is not None:
        pytest.skip(_SKIP)
    import shutil
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is missing")
    out = subprocess.run([nm, "-D", "--defined-only", ops_build.LIBRARY], capture_output=True,
                         text=True, check=True).stdout
    names = {line.split()[-1] for line in out.splitlines() if line.strip()}
    assert not [n for n in names if n.startswith("_Z")]
    assert {"initialize", "_opRegSize", "_opCallFCompute", "_opCallMutateInputs"} <= names


@pytest.mark.parametrize("be", BACKENDS)
def test_multi_sgd_mom_update_more_layers_than_one_mxnet_call(be):
    """MXNet's preloaded ops take <= 60 weights per call: 70 layers need chunking."""
    _check_sgd(be, [(3, 2)] * 35 + [(5,)] * 35, mp=False, steps=2)


def test_float16_rounding_matches_numpy():
    """Our fp32 -> fp16 narrowing (round to nearest even) equals numpy's, edge cases included."""
    if _SKIP is not None:
        pytest.skip(_SKIP)
    # (inf cannot pass through the update: lr * wd * inf is nan even with lr = 0)
    special = np.array([0.0, -0.0, 65504, 65519.99, 65520, 70000, -1e9, 3e38,
                        6.1e-5, 5.96e-8, 2.98e-8, 2.99e-8, 1e-10, 1.0 + 2 ** -11,
                        1.0 + 3 * 2 ** -11], dtype=np.float32)
    x = np.concatenate([special, np.random.RandomState(6).standard_normal(10000)
                        .astype(np.float32) * np.float32(100)])
    w32 = mx.nd.array(x, dtype="float32")
    w16 = mx.nd.zeros(x.shape, dtype="float16")
    zeros = mx.nd.zeros(x.shape, dtype="float16")
    ops.multi_sgd_mom_update([w16], [zeros], [mx.nd.zeros(x.shape)], mx.nd.zeros((1,)),
                             mx.nd.zeros((1,)), 0.0, 1.0, weights32=[w32], backend="yasgd")
    master = w32.asnumpy()  # x, except -0.0 + 0.0 == +0.0
    np.testing.assert_array_equal(master[2:], x[2:])
    np.testing.assert_array_equal(w16.asnumpy().view(np.uint16),
                                  master.astype(np.float16).view(np.uint16))


def test_backend_selection(monkeypatch):
    monkeypatch.delenv(ops.ENV_VAR, raising=False)
    want = "yasgd" if ops.DEFAULT_BACKEND == "yasgd" and _SKIP is None else "mxnet"
    assert ops.backend() == want
    monkeypatch.setenv(ops.ENV_VAR, "mxnet")
    assert ops.backend() == "mxnet"
    monkeypatch.setenv(ops.ENV_VAR, "bogus")
    with pytest.raises(ValueError):
        ops.backend()
    monkeypatch.setenv(ops.ENV_VAR, "yasgd")
    monkeypatch.setitem(ops._state, "tried", True)
    monkeypatch.setitem(ops._state, "error", "simulated: not built")
    with pytest.raises(RuntimeError, match="simulated"):
        ops.backend()
    monkeypatch.delenv(ops.ENV_VAR)
    assert ops.backend() == "mxnet"  # the default falls back silently


def _run_build(*args, env=None):
    return subprocess.run([sys.executable, "-m", "yasgd.ops.build"] + list(args), cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)


def test_build_is_idempotent():
    first = _run_build()
    assert first.returncode == 0, first.stderr
    if not os.path.exists(ops_build.LIBRARY):
        pytest.skip("g++ is missing: " + first.stderr.strip())
    mtime = os.path.getmtime(ops_build.LIBRARY)
    second = _run_build()
    assert second.returncode == 0, second.stderr
    assert "up to date" in second.stdout
    assert os.path.getmtime(ops_build.LIBRARY) == mtime


def test_build_without_compiler_warns_and_exits_0():
    env = {k: v for k, v in os.environ.items() if k != "CXX"}
    env["PATH"] = ""
    mtime = os.path.getmtime(ops_build.LIBRARY) if os.path.exists(ops_build.LIBRARY) else None
    r = _run_build("--force", "--quiet", env=env)
    assert r.returncode == 0 and "g++ not found" in r.stderr
    if mtime is not None:
        assert os.path.getmtime(ops_build.LIBRARY) == mtime
