"""yasgd's LARS against an independent NumPy implementation of the paper's rule.

Reference (You et al. 2017, with the options made explicit), float64:
    g        = rescale * grad
    local_lr = eta * ||w|| / (||g|| + wd_den * ||w|| + eps)   (1 if ||w|| == 0 or ||g|| == 0)
    v        = m_t * v + lr_t * local_lr * (g + wd * w);   w = w - v
ndim <= 1 tensors: local_lr = 1 and wd = 0 (exclude_1d "lars_and_wd", the default), the
LARS local_lr and wd = 0 ("wd"), or the rule as for every other tensor ("none"). Tolerance: 1e-6 relative on the
weights after 20 steps (fp32 arithmetic against float64), and for fp16
multi_precision on the fp32 master weights. Every test runs on both operator backends
(yasgd's library and the fallback to MXNet's operators, YASGD_OPS=yasgd|mxnet).
"""
import functools

import mxnet as mx
import numpy as np
import pytest

import yasgd.optim
from yasgd import ops
from yasgd.schedule import WarmupPolySchedule, WDSchedule

# ResNet-50-like tensors: conv (4-D), dense (2-D), BN gamma/beta and bias (1-D).
SHAPES = [(64, 3, 7, 7), (64,), (64,), (64, 64, 1, 1), (64, 64, 3, 3), (256, 64, 1, 1),
          (256,), (256,), (128, 256, 1, 1), (1000, 2048), (1000,), (512, 128, 3, 3)]
STEPS = 20


@pytest.fixture(autouse=True, params=["yasgd", "mxnet"])
def ops_backend(request, monkeypatch):
    """Run each test on both yasgd.ops backends."""
    if request.param == "yasgd" and not ops.load_library():
        pytest.skip("operator library unavailable: %s" % ops.library_error())
    monkeypatch.setenv("YASGD_OPS", request.param)
    return request.param


def reference(ws, gs_per_step, lr_fn, wd_fn, m, eta, eps, rescale, wd_den, corr,
              exclude_1d="lars_and_wd"):
    ws = [w.astype(np.float64).copy() for w in ws]
    vs = [np.zeros_like(w) for w in ws]
    last = None
    for t, gs in enumerate(gs_per_step, start=1):
        lr, wd = lr_fn(t), wd_fn(t)
        mt = m * lr / last if (corr and last) else m
        last = lr
        for i, (w, g) in enumerate(zip(ws, gs)):
            g = rescale * g.astype(np.float64)
            d = wd if w.ndim >= 2 or exclude_1d == "none" else 0.0
            if w.ndim >= 2 or exclude_1d != "lars_and_wd":
                wn, gn = np.linalg.norm(w), np.linalg.norm(g)
                local = eta * wn / (gn + (d if wd_den else 0.0) * wn + eps) if wn > 0 and gn > 0 else 1.0
            else:
                local = 1.0
            vs[i] = mt * vs[i] + lr * local * (g + d * w)
            ws[i] = w - vs[i]
    return ws


def run_yasgd(ws, gs_per_step, opt, dtype="float32"):
    weights = [mx.nd.array(w, dtype=dtype) for w in ws]
    states = [opt.create_state_multi_precision(i, w) for i, w in enumerate(weights)]
    for gs in gs_per_step:
        grads = [mx.nd.array(g, dtype=dtype) for g in gs]
        opt.update_multi_precision(list(range(len(ws))), weights, grads, states)
    if dtype == "float16":
        return [s[0].asnumpy() for s in states], [w.asnumpy() for w in weights]
    return [w.asnumpy() for w in weights], None


@functools.lru_cache(maxsize=None)
def _drawn(seed, zero_grad_layer):
    rng = np.random.RandomState(seed)
    ws = [(rng.randn(*s) * 0.05).astype(np.float32) for s in SHAPES]
    ws[3][:] = 0.0     # a zero weight tensor: LARS falls back to local_lr = 1
    gs = [[(rng.randn(*s) * 0.5).astype(np.float32) for s in SHAPES] for _ in range(STEPS)]
    if zero_grad_layer is not None:
        for step in gs:
            step[zero_grad_layer][:] = 0.0
    for a in ws + [g for step in gs for g in step]:
        a.flags.writeable = False
    return ws, gs


def make_data(seed, zero_grad_layer=None):
    """The same draw for every test that asks for it (drawn once, read-only); the weights
    come as copies, since a test may zero one of them."""
    ws, gs = _drawn(seed, zero_grad_layer)
    return [w.copy() for w in ws], gs


_REFERENCES = {}


def cached_reference(key, compute):
    """compute() once per key: the cases that differ only in the backend or in fused versus
    per-layer share one float64 reference (the key names everything it reads)."""
    if key not in _REFERENCES:
        _REFERENCES[key] = compute()
    return _REFERENCES[key]


SETTINGS = [  # eta, eps, wd, momentum, wd_in_denominator, momentum_correction, rescale
    (0.001, 0.0, 5e-4, 0.9, True, False, 1.0),
    (0.0025, 1e-9, 5e-5, 0.96, True, False, 1.0 / 256),
    (0.02, 1e-3, 1e-4, 0.9, False, False, 0.5),
    (0.001, 0.0, 0.0, 0.0, True, False, 1.0),
    (0.001, 1e-9, 5e-5, 0.9, True, True, 1.0 / 64),
]


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "per-layer"])
@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: "eta%g-eps%g-wd%g-m%g-den%d-corr%d" % s[:6])
def test_lars_matches_numpy(setting, fused):
    eta, eps, wd, m, den, corr, rescale = setting
    ws, gs = make_data(1, zero_grad_layer=5)
    lr = WarmupPolySchedule(base_lr=3.0, warmup_steps=5, total_steps=STEPS, power=2.0, end_lr=0.01)
    wdf = WDSchedule(wd, "follow_lr", lr)
    opt = yasgd.optim.LARS(learning_rate=3.0, momentum=m, wd=wd, eta=eta, epsilon=eps,
                           momentum_correction=corr, wd_in_denominator=den, fused=fused,
                           lr_scheduler=lr, wd_scheduler=wdf, rescale_grad=rescale)
    got, _ = run_yasgd(ws, gs, opt)
    ref = cached_reference(("matches", setting),
                           lambda: reference(ws, gs, lr, wdf, m, eta, eps, rescale, den, corr))
    for i, (a, b) in enumerate(zip(got, ref)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6 * np.abs(b).max(),
                                   err_msg=f"tensor {i} shape {SHAPES[i]}")


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "per-layer"])
@pytest.mark.parametrize("exclude_1d", ["lars_and_wd", "wd", "none"])
def test_lars_exclude_1d_matches_numpy(exclude_1d, fused):
    """What ndim <= 1 tensors are left out of, each choice against the reference; a zero 1-D
    tensor (a BN beta at init) takes local_lr = 1 as any zero tensor does."""
    ws, gs = make_data(4)
    ws[2][:] = 0.0
    lr = WarmupPolySchedule(base_lr=2.0, warmup_steps=5, total_steps=STEPS, power=2.0)
    wdf = WDSchedule(5e-4, "follow_lr", lr)
    opt = yasgd.optim.LARS(learning_rate=2.0, momentum=0.9, wd=5e-4, eta=0.005, epsilon=1e-9,
                           exclude_1d=exclude_1d, fused=fused, lr_scheduler=lr, wd_scheduler=wdf)
    got, _ = run_yasgd(ws, gs, opt)
    ref = cached_reference(("exclude_1d", exclude_1d), lambda: reference(
        ws, gs, lr, wdf, 0.9, 0.005, 1e-9, 1.0, True, False, exclude_1d))
    for i, (a, b) in enumerate(zip(got, ref)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6 * np.abs(b).max(),
                                   err_msg=f"tensor {i} shape {SHAPES[i]}")
    # the choices differ on the 1-D tensors only (the 2-D ones see the same rule)
    if exclude_1d != "lars_and_wd":
        base = cached_reference(("exclude_1d", "lars_and_wd"), lambda: reference(
            ws, gs, lr, wdf, 0.9, 0.005, 1e-9, 1.0, True, False, "lars_and_wd"))
        for i, s in enumerate(SHAPES):
            same = np.allclose(base[i], ref[i], rtol=1e-9, atol=0)
            assert same == (len(s) >= 2), (i, s)


def test_lars_exclude_1d_refuses_an_unknown_choice():
    with pytest.raises(ValueError, match="exclude_1d must be one of lars_and_wd, wd, none"):
        yasgd.optim.LARS(learning_rate=1.0, exclude_1d="bn")


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "per-layer"])
def test_lars_fp16_multi_precision(fused):
    ws, gs = make_data(2)
    ws16 = [w.astype(np.float16) for w in ws]
    gs16 = [[g.astype(np.float16) for g in step] for step in gs]
    lr = WarmupPolySchedule(base_lr=2.0, warmup_steps=4, total_steps=STEPS, power=2.0)
    opt = yasgd.optim.LARS(learning_rate=2.0, momentum=0.9, wd=5e-5, eta=0.001, epsilon=1e-9,
                           fused=fused, multi_precision=True, lr_scheduler=lr, rescale_grad=0.25)
    masters, weights16 = run_yasgd(ws16, gs16, opt, dtype="float16")
    ref = cached_reference(("fp16",), lambda: reference(
        [w.astype(np.float32) for w in ws16],
        [[g.astype(np.float32) for g in step] for step in gs16],
        lr, lambda t: 5e-5, 0.9, 0.001, 1e-9, 0.25, True, False))
    for i, (a, b) in enumerate(zip(masters, ref)):
        assert a.dtype == np.float32
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6 * np.abs(b).max(), err_msg=f"master {i}")
        np.testing.assert_array_equal(weights16[i], a.astype(np.float16))


def test_fused_equals_per_layer_bitwise_close():
    ws, gs = make_data(3)
    outs = []
    for fused in (True, False):
        opt = yasgd.optim.LARS(learning_rate=1.0, momentum=0.9, wd=1e-4, eta=0.001, fused=fused)
        outs.append(run_yasgd(ws, gs[:5], opt)[0])
    for a, b in zip(*outs):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_through_gluon_trainer_structure_rule():
    """Usable as gluon.Trainer(params, LARS(...)); ndim<=1 tensors get no LARS, no WD."""
    net = mx.gluon.nn.Dense(4, in_units=3)
    net.initialize(mx.init.Constant(0.5))
    tr = mx.gluon.Trainer(net.collect_params(), yasgd.optim.LARS(learning_rate=1.0, momentum=0.0,
                                                                 wd=0.1, eta=0.01))
    x = mx.nd.ones((2, 3))
    with mx.autograd.record():
        loss = net(x).sum()
    loss.backward()
    tr.step(2)
    bias = net.bias.data().asnumpy()
    # bias (initialised to 0 by Dense): plain SGD, no WD: 0 - 1.0 * (grad 2 / batch 2) = -1
    np.testing.assert_allclose(bias, -1.0, rtol=1e-6)
    w = net.weight.data().asnumpy()
    g = np.ones((4, 3))
    w0 = np.full((4, 3), 0.5)
    local = 0.01 * np.linalg.norm(w0) / (np.linalg.norm(g) + 0.1 * np.linalg.norm(w0))
    np.testing.assert_allclose(w, w0 - local * (g + 0.1 * w0), rtol=1e-6)


def test_registered_with_mxnet():
    opt = mx.optimizer.create("yasgdlars", learning_rate=0.5, eta=0.002)
    assert isinstance(opt, yasgd.optim.LARS) and opt.eta == 0.002
