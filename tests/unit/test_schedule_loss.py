"""Schedules and the smoothed loss against closed forms."""
import math

import mxnet as mx
import numpy as np
import pytest

from yasgd.loss import LabelSmoothingCE
from yasgd.schedule import WarmupPolySchedule, WDSchedule


def test_warmup_poly_closed_form():
    s = WarmupPolySchedule(base_lr=13.0, warmup_steps=100, total_steps=250, power=2.2, end_lr=0.0325)
    assert s(0) == 0.0                                   # start of warm-up
    assert s(50) == pytest.approx(6.5, rel=1e-12)        # linear: half-way
    assert s(100) == pytest.approx(13.0, rel=1e-12)      # end of warm-up = peak
    for t in (100, 137.5, 200, 249.9):                   # the polynomial shape
        expect = 0.0325 + (13.0 - 0.0325) * (1 - (t - 100) / 150) ** 2.2
        assert s(t) == pytest.approx(expect, rel=1e-12)
    assert s(250) == pytest.approx(0.0325) and s(10_000) == pytest.approx(0.0325)  # end LR
    lrs = [s(t) for t in range(100, 251)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))      # monotone decay


def test_fractional_steps_and_warmup_begin():
    s = WarmupPolySchedule(base_lr=2.0, warmup_steps=10, total_steps=20, power=1.0, warmup_begin_lr=0.5)
    assert s(2.5) == pytest.approx(0.5 + 1.5 * 0.25)
    assert s(15) == pytest.approx(1.0)                   # power 1: linear decay to 0


def test_lars_paper_schedule_no_warmup():
    # You et al. 2017: lr_t = lr_0 (1 - t/T)^2
    s = WarmupPolySchedule(base_lr=10.0, warmup_steps=0, total_steps=1000, power=2.0)
    for t in (0, 1, 500, 999):
        assert s(t) == pytest.approx(10.0 * (1 - t / 1000) ** 2, rel=1e-12)


def test_wd_schedule():
    lr = WarmupPolySchedule(base_lr=4.0, warmup_steps=10, total_steps=100, power=2.0)
    assert WDSchedule(5e-5)(3) == 5e-5
    follow = WDSchedule(5e-5, "follow_lr", lr)
    assert follow(5) == pytest.approx(2.5e-5)            # warms up with the LR
    assert follow(10) == pytest.approx(5e-5)             # peak
    assert follow(55) == pytest.approx(5e-5 * 0.25)      # decays with the LR: (1 - 0.5)^2
    with pytest.raises(ValueError):
        WDSchedule(1e-4, "bogus")


def test_bad_schedule_arguments():
    with pytest.raises(ValueError):
        WarmupPolySchedule(1.0, warmup_steps=20, total_steps=10)


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_label_smoothing_matches_numpy(eps):
    rng = np.random.RandomState(0)
    z = rng.randn(16, 10).astype(np.float64) * 3
    y = rng.randint(0, 10, size=16)
    logp = z - z.max(1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(1, keepdims=True))
    q = np.full((16, 10), eps / 10)
    q[np.arange(16), y] += 1 - eps
    ref = -(q * logp).sum(1)
    got = LabelSmoothingCE(eps)(mx.nd.array(z), mx.nd.array(y)).asnumpy()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)   # fp32 op vs fp64 reference


def test_label_smoothing_uniform_logits():
    # uniform prediction: loss = log K whatever the smoothing
    got = LabelSmoothingCE(0.1)(mx.nd.zeros((4, 10)), mx.nd.array([0, 1, 2, 3])).asnumpy()
    np.testing.assert_allclose(got, math.log(10), rtol=5e-6)   # fp32 log_softmax
