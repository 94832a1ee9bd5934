"""The large-batch benchmark's plan: geometry, the arms' configs, the side-by-side schedule.

Everything here is exact integer or float arithmetic on small numbers (equality, or 1e-9
relative for the estimate); every run's overrides are loaded and validated by the real
``yasgd.config.load``, so a key the config does not know fails here, not 40 minutes into
``make bench-largebatch``.
"""
import dataclasses
import math

import pytest

from yasgd import config as config_mod
from yasgd.bench import largebatch as lb


@pytest.mark.parametrize("batch,limit,expected", [
    (256, 49152, (256, 1, 192, 49152)),
    (8192, 49152, (512, 16, 6, 49152)),
    (16384, 60000, (512, 32, 3, 49152)),      # 117 micro-batches: 3 full steps of 32
    (1024, 60000, (512, 2, 58, 59392)),
])
def test_geometry(batch, limit, expected):
    assert lb._geometry(batch, limit) == expected


def test_plan_arms_and_configs_load():
    specs = lb.plan(lb.FULL, "runs")
    n_large = len(lb.FULL.batches) * (len(lb.FULL.sgd_base_lrs) + len(lb.FULL.lars_cs))
    assert len(specs) == len(lb.FULL.baseline_lrs) + n_large
    assert len({s.key for s in specs}) == len(specs)
    for s in specs:
        cfg = config_mod.load(None, s.overrides)
        assert cfg.train.global_batch == s.batch == s.micro * s.accumulate
        assert cfg.train.epochs == lb.FULL.epochs
        assert cfg.schedule.power == lb.FULL.power
        # the same pixels for every arm: augmentation is a property of the scale, not the arm
        assert (cfg.data.pad_crop > 0) == lb.FULL.augment
        assert cfg.data.flip == lb.FULL.augment
        if s.arm == "lars":
            assert cfg.optim.name == "lars"
            assert math.isclose(s.lr, round(s.lr_factor * math.sqrt(s.batch / 4096), 3))
            assert cfg.model.bn_momentum_rule == "iterations"
            assert cfg.model.zero_init_last_gamma and cfg.train.label_smoothing == 0.1
        else:
            assert cfg.optim.name == "sgd" and cfg.train.label_smoothing == 0.0
            if s.arm == "sgd":    # linear scaling rule
                assert math.isclose(s.lr, round(s.lr_factor * s.batch / 256, 3))


def test_estimate_schedules_runs_side_by_side():
    scale = dataclasses.replace(lb.FULL, batches=(8192,), baseline_lrs=(0.1,),
                                sgd_base_lrs=(0.05,), lars_cs=(4.0, 8.0), epochs=3,
                                limit=49152)
    specs = lb.plan(scale, "runs")                 # 4 runs of 49,152 images x 3 epochs
    cal = {"train_img_s": {"512": 4096.0}, "startup_s": 2.0, "eval_s": 1.0}
    one = 2.0 + 3 * (49152 / 4096.0 + 1.0)         # 41 s each
    assert math.isclose(lb.run_s(specs[0], scale, cal), one, rel_tol=1e-9)
    assert math.isclose(lb.estimate_s(specs, scale, cal, jobs=1), 4 * one + 10, rel_tol=1e-9)
    assert math.isclose(lb.estimate_s(specs, scale, cal, jobs=2), 2 * one + 10, rel_tol=1e-9)
    assert math.isclose(lb.estimate_s(specs, scale, cal, jobs=3), 2 * one + 10, rel_tol=1e-9)


def test_threads_per_job(monkeypatch):
    monkeypatch.setattr(lb.os, "cpu_count", lambda: 2)
    assert [lb.threads_per_job(j) for j in (1, 2, 3)] == [2, 1, 1]


def test_bn_momentum_note_states_what_the_runs_held():
    """The report states the BN momentum the runs' BatchNorm layers held (from their results),
    by batch size where it differs, never a value recomputed from the config."""
    from yasgd.bench.largebatch_report import _bn_held
    results = [{"arm": "lars", "batch": 8192, "bn_momentum": 0.9375},
               {"arm": "lars", "batch": 1024, "bn_momentum": 0.99},
               {"arm": "lars", "batch": 1024, "bn_momentum": 0.99},
               {"arm": "sgd", "batch": 1024, "bn_momentum": 0.9},
               {"arm": "baseline", "batch": 256, "bn_momentum": 0.9},
               {"arm": "sgd", "batch": 8192, "bn_momentum": None}]      # a failed run
    assert _bn_held(results, ("lars",)) == "0.99 at 1K, 0.9375 at 8K"
    assert _bn_held(results, ("baseline", "sgd")) == "0.9"
    assert _bn_held([], ("lars",)) == "n/a"
