"""Checkpoints, single process: validation skips half-written checkpoints, resume
selection, config digest, and an exact save/load round trip of parameters,
optimizer state (momenta, fp32 master weights) and counters.

The 2-rank end-to-end checks (exact resume, kills, SIGTERM, MLPerf log) are in
tests/e2e/test_resume.py.
"""
import json
import os
import time
from types import SimpleNamespace

import mxnet as mx
import numpy as np
import pytest

from yasgd import UsageError, checkpoint, config, faults, resume
from yasgd.dist import World


def fake_checkpoint(run_dir, name, step, files=None, state_override=None):
    """A checkpoint directory with made-up files and a matching state.json."""
    path = os.path.join(run_dir, name)
    os.makedirs(path)
    files = files or {"model.params": b"p" * 100, "optimizer.states": b"s" * 50}
    meta = {}
    for fname, data in files.items():
        with open(os.path.join(path, fname), "wb") as f:
            f.write(data)
        meta[fname] = {"size": len(data), "sha256": "x"}
    state = {"format": checkpoint.FORMAT, "step": step, "epoch": step // 4, "files": meta}
    state.update(state_override or {})
    with open(os.path.join(path, "state.json"), "w") as f:
        json.dump(state, f)
    return path


def test_latest_valid_skips_half_written_and_damaged(tmp_path):
    rd = str(tmp_path)
    good = fake_checkpoint(rd, "ckpt-2", 8)
    fake_checkpoint(rd, "ckpt-1", 4)
    # a writer killed before the rename: only a temporary directory
    fake_checkpoint(rd, ".tmp-ckpt-3", 12)
    # renamed but a file truncated (e.g. no fsync before a crash)
    bad = fake_checkpoint(rd, "ckpt-4", 16)
    with open(os.path.join(bad, "model.params"), "wb") as f:
        f.write(b"p" * 10)
    # state.json cut short
    cut = fake_checkpoint(rd, "ckpt-5", 20)
    with open(os.path.join(cut, "state.json"), "w") as f:
        f.write('{"format": 1, "st')
    # a file missing
    gone = fake_checkpoint(rd, "ckpt-6", 24)
    os.remove(os.path.join(gone, "optimizer.states"))
    # no state.json at all
    os.makedirs(os.path.join(rd, "ckpt-7"))
    assert checkpoint.latest_valid(rd) == good
    assert [s for s, _ in checkpoint.list_valid(rd)] == [4, 8]
    with pytest.raises(checkpoint.CheckpointError, match="truncated"):
        checkpoint.validate(bad)
    with pytest.raises(checkpoint.CheckpointError, match="missing"):
        checkpoint.validate(gone)
    assert checkpoint.latest_valid(str(tmp_path / "nowhere")) is None


def test_find_resume(tmp_path):
    cfg = config.load(None, [f"run.dir={tmp_path}", "run.name=exp", "run.resume=auto"])
    assert checkpoint.find_resume(cfg) is None                     # nothing yet: a fresh run
    old = str(tmp_path / "exp-20250101-000000")
    new = str(tmp_path / "exp-20250102-000000")
    other = str(tmp_path / "exp2-20250103-000000")                 # another run name
    for d in (old, new, other):
        os.makedirs(d)
    fake_checkpoint(old, "ckpt-1", 4)
    fake_checkpoint(other, "ckpt-9", 36)
    assert checkpoint.find_resume(cfg) == os.path.join(old, "ckpt-1")   # newest dir has none
    want = fake_checkpoint(new, "ckpt-2", 8)
    fake_checkpoint(new, ".tmp-ckpt-3", 12)
    assert checkpoint.find_resume(cfg) == want
    cfg.run.resume = new
    assert checkpoint.find_resume(cfg) == want                     # a run directory
    cfg.run.resume = os.path.join(old, "ckpt-1")
    assert checkpoint.find_resume(cfg) == os.path.join(old, "ckpt-1")   # a checkpoint
    cfg.run.resume = str(tmp_path / "missing")
    with pytest.raises(UsageError, match="neither a checkpoint nor a run directory"):
        checkpoint.find_resume(cfg)
    cfg.run.resume = other + "/nothing-here"
    os.makedirs(cfg.run.resume)
    with pytest.raises(UsageError, match="no valid checkpoint"):
        checkpoint.find_resume(cfg)
    cfg.run.resume = "none"
    assert checkpoint.find_resume(cfg) is None


def test_config_digest_ignores_bookkeeping_and_names_differences():
    a = config.load(None, ["train.epochs=8"])
    b = config.load(None, ["train.epochs=8", "train.max_steps=3", "run.name=x", "train.log_interval=7",
                           "train.checkpoint_every=2", "mlperf.division=closed", "run.resume=auto"])
    assert checkpoint.config_digest(a) == checkpoint.config_digest(b)
    c = config.load(None, ["train.epochs=9", "optim.lr=3"])
    state = {"config_digest": checkpoint.config_digest(a), "config": checkpoint.trajectory_config(a)}
    with pytest.raises(UsageError, match=r"optim.lr: 1.0 -> 3.0; train.epochs: 8 -> 9"):
        resume.check_config(state, c, "ckpt-1")
    resume.check_config(state, b, "ckpt-1")


def test_resume_needs_a_run_directory():
    with pytest.raises(UsageError, match="run.resume needs a run directory"):
        config.load(None, ["run.dir=", "run.resume=auto"])


def _setup(run_dir, dtype, seed=3):
    """A Setup-like namespace: a 3-layer MLP with BN and yasgd's LARS."""
    from yasgd import optim
    from yasgd.schedule import WarmupPolySchedule, WDSchedule
    mx.random.seed(seed)
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Dense(16, in_units=8), mx.gluon.nn.BatchNorm(in_channels=16),
            mx.gluon.nn.Dense(4, in_units=16))
    net.initialize(mx.init.Xavier())
    if dtype == "float16":
        net.cast("float16")
    lr = WarmupPolySchedule(base_lr=0.5, warmup_steps=2, total_steps=20, power=2.0)
    opt = optim.LARS(learning_rate=0.5, momentum=0.9, wd=1e-4, momentum_correction=True,
                     multi_precision=dtype == "float16", lr_scheduler=lr,
                     wd_scheduler=WDSchedule(1e-4, "follow_lr", lr))
    trainer = mx.gluon.Trainer(net.collect_params(), opt, kvstore=None)
    cfg = config.load(None, [f"run.dir={run_dir}", "train.keep_checkpoints=2"])
    return SimpleNamespace(cfg=cfg, world=World(), ctx=mx.cpu(), net=net, trainer=trainer,
                           steps_per_epoch=4, run_dir=str(run_dir),
                           log=SimpleNamespace(say=lambda *a: None, event=lambda *a, **k: None))


def _steps(s, start, n):
    """n optimizer steps with made-up gradients (MXNet has no fp16 Dense on CPU)."""
    rng = np.random.RandomState(start)
    for _ in range(n):
        for p in s.net.collect_params().values():
            if p.grad_req != "null":
                p.grad()[:] = mx.nd.array(rng.randn(*p.shape)).astype(p.dtype)
                p.data()._fresh_grad = True
        s.trainer.step(5)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_save_load_round_trip_is_exact(tmp_path, dtype):
    a = _setup(tmp_path, dtype)
    _steps(a, 0, 6)
    path = checkpoint.save(a, 6, elapsed=1.5)
    assert os.path.basename(path) == "ckpt-1-step6"
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")]
    state = checkpoint.validate(path, deep=True)
    assert state["step"] == 6 and state["optimizer"]["num_update"] == 6
    assert state["optimizer"]["last_lr"] == pytest.approx(a.trainer._optimizer._last_lr)
    kinds = set(map(str, state["optimizer"]["states"].values()))
    # fp16 weights: (fp32 master, momentum); BN parameters stay fp32 (Gluon): momentum only
    assert kinds == ({"2", "array"} if dtype == "float16" else {"array"})
    b = _setup(tmp_path, dtype, seed=99)                            # different initial weights
    b.resume_from = path
    assert resume.restore(b) == (1, 6, 1.5)
    _steps(a, 100, 3)
    _steps(b, 100, 3)
    pa, pb = a.net._collect_params_with_prefix(), b.net._collect_params_with_prefix()
    assert list(pa) == list(pb)
    for name in pa:
        np.testing.assert_array_equal(pa[name].data().asnumpy(), pb[name].data().asnumpy(), err_msg=name)
    assert b.trainer._optimizer.num_update == 9


def test_keep_last_k_and_rewrite_of_same_step(tmp_path):
    s = _setup(tmp_path, "float32")
    for step in (4, 8, 12):
        _steps(s, step, 4)
        checkpoint.save(s, step, elapsed=0.0)
    assert sorted(os.listdir(tmp_path)) == ["ckpt-2", "ckpt-3"]
    before = os.stat(os.path.join(tmp_path, "ckpt-3", "state.json")).st_mtime_ns
    time.sleep(0.01)
    checkpoint.save(s, 12, elapsed=0.0)                              # same step: kept as it is
    assert os.stat(os.path.join(tmp_path, "ckpt-3", "state.json")).st_mtime_ns == before


def test_config_mismatch_stops_resume(tmp_path):
    a = _setup(tmp_path, "float32")
    _steps(a, 0, 4)
    path = checkpoint.save(a, 4, elapsed=0.0)
    b = _setup(tmp_path, "float32")
    b.cfg.optim.lr = 2.0
    b.resume_from = path
    with pytest.raises(UsageError, match="optim.lr: 1.0 -> 2.0"):
        resume.restore(b)


def test_first_nonfinite_step_single_rank():
    w = World()
    assert faults.first_nonfinite_step(w, step=10, bad_steps=3) == 8
    assert faults.first_nonfinite_step(w, step=10, bad_steps=0) is None
