"""One step, timed where it runs: every step the throughput, overlap and large-batch
benchmarks time is one ``yasgd.step.train_step`` on a run made by ``yasgd.train.build``,
and what they report about a run is what its objects held.

How the steps are counted: ``train_step`` adds one to ``Setup.steps_run`` of the run it
stepped, and nothing else touches that counter; each benchmark worker writes, per timed
arm, the counter of its run after the timing (``runs[arm]["steps"]``). A timed arm that
stepped some other way, or more than once per timed call, would not read
``warmup + repeats``. The workers run as the benchmarks run them (the throughput and
overlap workers as their own process, one rank, Horovod started; the training benches'
worker in this process), at the smallest sizes.
"""
from __future__ import annotations

import os

import pytest

from yasgd.bench import common

WARMUP, REPEATS = 1, 1


def _env():
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    for k in [k for k in env if k.startswith(("OMPI_", "PMI_", "PMIX_", "HOROVOD_"))]:
        del env[k]
    return env


def _bn_momenta_in(net):
    """The test's own reading of the BatchNorm layers (gluon.nn.BatchNorm and BatchNormReLU)."""
    import mxnet as mx
    seen = []
    net.apply(lambda b: seen.append(b._kwargs["momentum"])
              if isinstance(b, (mx.gluon.nn.BatchNorm, mx.gluon.nn.BatchNormReLU)) else None)
    return seen


def _assert_train_steps(res, arms, label):
    for arm in arms:
        ran = res["runs"][arm]
        timed = len(res["times"][arm]["samples_ms"])
        assert timed == REPEATS, (label, arm)
        assert ran["steps"] == WARMUP + timed, (label, arm, ran)


def test_throughput_worker_times_train_step(tmp_path):
    """Quick mode's 1-rank launch (five loops) and its mixed-precision process, at 32 px and
    batch 1: each of yasgd's timed steps is one train_step of its built run; the baseline
    (the intentional second loop) is not; batch, BN momentum, groups and dtype are the runs'."""
    from yasgd.bench import throughput as tp
    args = ["--batch", "1", "--repeats", str(REPEATS), "--warmup", str(WARMUP), "--image", "32",
            "--quick"]
    single, bf16 = tmp_path / "single.json", tmp_path / "bf16.json"
    common.run_process("yasgd.bench.throughput", ["--mode", "single", "--result", str(single)]
                       + args, env=_env(), timeout=600, log=str(tmp_path / "single.log"))
    res = common.read_json(str(single))
    _assert_train_steps(res, (tp.Y_HYB, tp.Y_IMP, tp.Y_FBR), "single")
    for arm in (tp.B_HYB, tp.B_IMP):
        assert "steps" not in res["runs"][arm]
    for arm, ran in res["runs"].items():
        assert ran["per_rank_batch"] == 1 and ran["input_shape"] == [1, 3, 32, 32], arm
        assert ran["dtype"] == "float32" and ran["bn_momentum"] == pytest.approx(0.9), arm
    assert res["runs"][tp.Y_HYB]["hybridized"] and not res["runs"][tp.Y_IMP]["hybridized"]
    assert res["runs"][tp.Y_HYB]["groups"] > 1 and "LARS" in res["runs"][tp.Y_HYB]["optimizer"]

    common.run_process("yasgd.bench.throughput", ["--mode", "bf16", "--result", str(bf16)]
                       + args, env=_env(), timeout=600, log=str(tmp_path / "bf16.log"))
    res = common.read_json(str(bf16))
    _assert_train_steps(res, [tp.FP32] + ([tp.BF16] if res.get("bf16_ok") else []), "bf16")


def test_overlap_worker_times_train_step(tmp_path):
    """Every way of the overlap benchmark that is a training step is one train_step (the
    allreduce-only way is the trainer's allreduce alone); its groups are the run's."""
    from yasgd.bench import overlap as ov
    path = tmp_path / "overlap.json"
    common.run_process("yasgd.bench.overlap", ["--repeats", str(REPEATS), "--warmup",
                                               str(WARMUP), "--result", str(path), "--image",
                                               "32", "--batch", "1"],
                       env=_env(), timeout=600, log=str(tmp_path / "overlap.log"))
    res = common.read_json(str(path))
    ways = (ov.OVER, ov.WAIT_G, ov.WAIT_1, ov.COMPUTE)
    _assert_train_steps(res, ways, "overlap")
    assert set(res["runs"]) == set(ways) and ov.COMM in res["times"]
    assert res["groups"] == res["runs"][ov.OVER]["groups"] > 1
    assert res["runs"][ov.WAIT_1]["groups"] == 1
    assert (res["batch"], res["image"]) == (1, 32)


@pytest.fixture
def captured_builds(monkeypatch):
    """Every Setup yasgd.train.build makes in this test (build itself runs unchanged); the
    stop flag fit() raises is put back afterwards."""
    from yasgd import faults, train
    monkeypatch.setitem(faults._state, "armed", faults._state["armed"])
    built, real = [], train.build

    def build(cfg, world):
        built.append(real(cfg, world))
        return built[-1]
    monkeypatch.setattr(train, "build", build)
    return built


def test_study_run_reports_what_the_network_held(tmp_path, captured_builds):
    """A run of the recipe with accumulation (2 micro-batches of 512 per step), as the
    training benches run it (yasgd.bench.study_worker): the reported BN momentum is the one
    every BatchNorm layer of the trained network held -- from the BN updates per epoch
    (micro-batches), not from the optimizer steps -- every step was a train_step, the
    validation figure is the one fit evaluated on the held-out images and the test figure a
    second evaluation of the same network on the test set."""
    from yasgd import model
    from yasgd.bench import study, study_plan, study_worker
    arm = next(a for a in study_plan.ablation_arms(study_plan.QUICK) if a.name == "lars-1k")
    run = study.Run(arm, arm.factors[0], 0)
    res = study_worker.train_run(study_plan.overrides(study_plan.QUICK, run, str(tmp_path)))
    (s,) = captured_builds
    assert s.cfg.train.accumulate == 2
    held = _bn_momenta_in(s.net)
    assert held and len(set(held)) == 1
    assert res["bn_momentum"] == held[0]
    assert held[0] == model.bn_momentum_for(len(s.train_loader))      # micro-batches per epoch
    assert held[0] != model.bn_momentum_for(s.steps_per_epoch)        # not optimizer steps
    assert res["steps"] == res["train_steps"] == s.steps_run == 2 * s.steps_per_epoch
    assert res["curve"][-1]["val_top1"] == res["val_top1"]
    from yasgd.data import fashion_mnist             # the last evaluation read the test set
    test_x = fashion_mnist.load(s.cfg.data.root, "test")[0][:s.cfg.data.eval_limit]
    assert len(test_x) == 2000 and (s.val_loader.images == test_x).all()
    assert res["code"]["yasgd.bench.study_worker"] and res["code"]["yasgd.train"]

