"""Checkpoints, single process, real MXNet checkpoints of a tiny net: the manifest
(every file covered, state.json and the manifest included), verification naming
each kind of damage, the resume plan and the fallback past a damaged or
unloadable checkpoint, config digest, and an exact save/load round trip of
parameters, optimizer state (momenta, fp32 master weights) and counters.

The 2-rank end-to-end checks (exact resume, kills, SIGTERM, MLPerf log) are in
tests/e2e/test_resume.py; the fallback through `yasgd train` in
tests/e2e/test_checkpoint_fallback.py.
"""
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from types import SimpleNamespace

import mxnet as mx
import numpy as np
import pytest

from yasgd import UsageError, checkpoint, config, faults, resume
from yasgd.dist import World


def _setup(run_dir, dtype="float32", seed=3, keep=2):
    """A Setup-like namespace: a 3-layer MLP with BN and yasgd's LARS; its log
    records what it is given (``said``, ``events``)."""
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
    cfg = config.load(None, [f"run.dir={run_dir}", f"train.keep_checkpoints={keep}"])
    said, events = [], []
    return SimpleNamespace(cfg=cfg, world=World(), ctx=mx.cpu(), net=net, trainer=trainer,
                           steps_per_epoch=4, run_dir=str(run_dir), said=said, events=events,
                           scaler=None,   # train.loss_scale none, as yasgd.train.Setup has it
                           log=SimpleNamespace(say=said.append,
                                               event=lambda kind, **f: events.append((kind, f))))


def _steps(s, start, n):
    """n optimizer steps with made-up gradients (MXNet has no fp16 Dense on CPU)."""
    rng = np.random.RandomState(start)
    for _ in range(n):
        for p in s.net.collect_params().values():
            if p.grad_req != "null":
                p.grad()[:] = mx.nd.array(rng.randn(*p.shape)).astype(p.dtype)
                p.data()._fresh_grad = True
        s.trainer.step(5)


def saved(run_dir, steps=(4, 8)):
    """Real checkpoints after each of ``steps`` (4 steps an epoch: ckpt-1, ckpt-2, ...)."""
    s = _setup(run_dir, keep=10)
    done, paths = 0, []
    for step in steps:
        _steps(s, done, step - done)
        done = step
        paths.append(checkpoint.save(s, step, elapsed=float(step)))
    return paths


def params_of(s):
    return {k: p.data().asnumpy() for k, p in s.net._collect_params_with_prefix().items()}


def snapshot(path):
    """{file: bytes} of a directory, to show it was left untouched."""
    return {n: open(os.path.join(path, n), "rb").read() for n in sorted(os.listdir(path))}


# -- damage, as it happens to files ----------------------------------------------------
def _rewrite_json(path, edit):
    with open(path) as f:
        doc = json.load(f)
    edit(doc)
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)


def truncate(ckpt):
    p = os.path.join(ckpt, "model.params")
    os.truncate(p, os.path.getsize(p) // 2)


def flip(ckpt):
    p = os.path.join(ckpt, "model.params")
    with open(p, "r+b") as f:
        f.seek(os.path.getsize(p) // 2)
        b = f.read(4)
        f.seek(-4, 1)
        f.write(bytes(x ^ 0xFF for x in b))


def delete(ckpt):
    os.remove(os.path.join(ckpt, "optimizer.states"))


def edit_state(ckpt):   # the step changed by one: valid JSON, same size, consistent fields
    _rewrite_json(os.path.join(ckpt, "state.json"), lambda d: d.update(step=d["step"] + 1))


def edit_manifest(ckpt):   # valid JSON, a digest of model.params replaced
    _rewrite_json(os.path.join(ckpt, "MANIFEST.json"),
                  lambda d: d["files"]["model.params"].update(sha256="0" * 64))


DAMAGE = {
    "truncated": (truncate, r"model\.params has \d+ bytes, \d+ expected \(truncated\)"),
    "flipped": (flip, r"model\.params does not match its SHA-256"),
    "deleted": (delete, r"optimizer\.states is missing"),
    "state-edited": (edit_state, r"state\.json does not match its SHA-256"),
    "manifest-edited": (edit_manifest, r"MANIFEST\.json does not match MANIFEST\.sha256"),
}


# -- the manifest and verification ------------------------------------------------------
def test_manifest_covers_every_file_and_is_covered_itself(tmp_path):
    path, = saved(tmp_path, steps=(4,))
    manifest = json.load(open(os.path.join(path, "MANIFEST.json")))
    assert manifest["format"] == checkpoint.FORMAT == 2
    assert set(manifest["files"]) == {"model.params", "optimizer.states", "state.json"}
    for name, meta in manifest["files"].items():
        data = open(os.path.join(path, name), "rb").read()
        assert meta == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}, name
    text = open(os.path.join(path, "MANIFEST.sha256")).read()
    digest = hashlib.sha256(open(os.path.join(path, "MANIFEST.json"), "rb").read()).hexdigest()
    assert text == f"{digest}  MANIFEST.json\n"
    assert "files" not in json.load(open(os.path.join(path, "state.json")))   # no self-digest
    if shutil.which("sha256sum"):   # the digest file is in sha256sum's own format
        assert subprocess.run(["sha256sum", "--quiet", "-c", "MANIFEST.sha256"], cwd=path).returncode == 0
    state, files = checkpoint.verify(path)
    assert state["step"] == 4 and files == manifest["files"]


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_verify_names_each_damage(tmp_path, kind):
    path, = saved(tmp_path, steps=(4,))
    damage, reason = DAMAGE[kind]
    damage(path)
    with pytest.raises(checkpoint.CheckpointError, match=reason) as e:
        checkpoint.verify(path, deep=True)
    assert e.value.path == path and str(e.value).startswith(f"{path}: ")
    if kind == "flipped":   # the quick check (pruning, listing) reads sizes, not data
        checkpoint.verify(path, deep=False)


def test_format_1_checkpoint_is_reported_as_older(tmp_path):
    path, = saved(tmp_path, steps=(4,))
    for name in ("MANIFEST.json", "MANIFEST.sha256"):
        os.remove(os.path.join(path, name))
    _rewrite_json(os.path.join(path, "state.json"), lambda d: d.update(format=1, files={}))
    with pytest.raises(checkpoint.CheckpointError, match=r"written by an older yasgd \(checkpoint "
                                                         r"format 1; this one reads format 2\)"):
        checkpoint.verify(path)
    os.remove(os.path.join(path, "state.json"))
    with pytest.raises(checkpoint.CheckpointError, match="MANIFEST.sha256 is missing"):
        checkpoint.verify(path)


def test_latest_valid_skips_half_written_and_damaged(tmp_path):
    rd = str(tmp_path)
    one, two = saved(rd, steps=(4, 8))
    shutil.copytree(two, os.path.join(rd, ".tmp-ckpt-3"))   # a writer killed before the rename
    shutil.copytree(two, os.path.join(rd, "ckpt-4"))
    truncate(os.path.join(rd, "ckpt-4"))                     # renamed, then a file cut short
    os.makedirs(os.path.join(rd, "ckpt-7"))                  # nothing in it
    assert checkpoint.latest_valid(rd) == two
    assert checkpoint.list_valid(rd) == [(4, one), (8, two)]
    assert checkpoint.checkpoints(rd) == [os.path.join(rd, n) for n in ("ckpt-7", "ckpt-4")] + [two, one]
    assert checkpoint.latest_valid(str(tmp_path / "nowhere")) is None


def test_checkpoint_names_sort_by_steps():
    names = ["ckpt-2", "ckpt-10", "ckpt-1-step6", "ckpt-1", "ckpt-0-step1"]
    assert sorted(names, key=checkpoint.name_key) == ["ckpt-0-step1", "ckpt-1", "ckpt-1-step6",
                                                       "ckpt-2", "ckpt-10"]
    assert checkpoint.name_key("abandoned-ckpt-2-17") is None


# -- the resume plan (rank 0, before the network exists) -----------------------------------
def test_find_resume(tmp_path):
    cfg = config.load(None, [f"run.dir={tmp_path}", "run.name=exp", "run.resume=auto"])
    assert resume.find_resume(cfg) is None                         # nothing yet: a fresh run
    one, two = saved(tmp_path / "src", steps=(4, 8))
    old = str(tmp_path / "exp-20250101-000000")
    new = str(tmp_path / "exp-20250102-000000")
    other = str(tmp_path / "exp2-20250103-000000")                 # another run name
    for d in (old, new, other):
        os.makedirs(d)
    shutil.copytree(one, os.path.join(old, "ckpt-1"))
    shutil.copytree(two, os.path.join(other, "ckpt-2"))
    plan = resume.find_resume(cfg)
    assert plan.candidates == [os.path.join(old, "ckpt-1")] and plan.run_dir == old   # newest has none
    assert not plan.skipped and not plan.explicit and plan.first[0]["step"] == 4
    shutil.copytree(one, os.path.join(new, "ckpt-1"))
    shutil.copytree(two, os.path.join(new, "ckpt-2"))
    shutil.copytree(two, os.path.join(new, ".tmp-ckpt-3"))
    want = [os.path.join(new, "ckpt-2"), os.path.join(new, "ckpt-1")]
    assert resume.find_resume(cfg).candidates == want              # newest first, one run dir
    cfg.run.resume = new
    assert resume.find_resume(cfg).candidates == want              # a run directory
    cfg.run.resume = os.path.join(old, "ckpt-1")
    plan = resume.find_resume(cfg)                                 # a checkpoint
    assert plan.candidates == [os.path.join(old, "ckpt-1")] and plan.explicit
    cfg.run.resume = str(tmp_path / "missing")
    with pytest.raises(UsageError, match="neither a checkpoint nor a run directory"):
        resume.find_resume(cfg)
    cfg.run.resume = other + "/nothing-here"
    os.makedirs(cfg.run.resume)
    with pytest.raises(UsageError, match="no checkpoint in"):
        resume.find_resume(cfg)
    cfg.run.resume = "none"
    assert resume.find_resume(cfg) is None


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_damaged_newest_falls_back_to_the_older_one(tmp_path, capsys, kind):
    rd = tmp_path / "exp-20250101-000000"
    one, two = saved(rd, steps=(4, 8))
    damage, reason = DAMAGE[kind]
    damage(two)
    before = snapshot(two)
    cfg = config.load(None, [f"run.dir={tmp_path}", "run.name=exp", "run.resume=auto"])
    plan = resume.find_resume(cfg)
    assert plan.candidates == [one] and [p for p, _ in plan.skipped] == [two]
    b = _setup(rd, seed=99)
    b.resume_from = plan
    assert resume.restore(b) == (1, 4, 4.0)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"yasgd: warning: skipping checkpoint {two}: "), err
    assert re.search(reason, err[0]) and "rank" not in err[0].replace(str(tmp_path), "")
    assert b.said == [f"resumed from {one}: 1 epochs, step 4"]
    assert ("resume", {"checkpoint": one, "epoch": 1, "step": 4, "skipped": [two]}) in b.events
    assert snapshot(two) == before                                 # untouched, not renamed
    assert sorted(os.listdir(rd)) == ["ckpt-1", "ckpt-2"]
    # the same run directory named explicitly: the same fallback
    cfg.run.resume = str(rd)
    assert resume.find_resume(cfg).candidates == [one]
    # the damaged checkpoint named explicitly: a usage error with the reason
    cfg.run.resume = two
    with pytest.raises(UsageError, match=f"cannot resume from {two}: .*{reason}") as e:
        resume.find_resume(cfg)
    assert "rank" not in str(e.value).replace(str(tmp_path), "")


def test_every_checkpoint_damaged_is_a_usage_error(tmp_path):
    rd = tmp_path / "exp-20250101-000000"
    one, two = saved(rd, steps=(4, 8))
    flip(one)
    delete(two)
    for how in ("auto", str(rd)):
        cfg = config.load(None, [f"run.dir={tmp_path}", "run.name=exp", f"run.resume={how}"])
        with pytest.raises(UsageError, match="every one is damaged") as e:
            resume.find_resume(cfg)
        msg = str(e.value)
        assert f"{two}: optimizer.states is missing" in msg and f"{one}: model.params does not " \
            "match its SHA-256" in msg and "\n" not in msg and "rank" not in msg.replace(str(tmp_path), "")
    assert sorted(os.listdir(rd)) == ["ckpt-1", "ckpt-2"]


# -- the fallback past a checkpoint that verifies but does not load (every rank) -------------
def _unloadable(ckpt):
    """Replace model.params by a valid MXNet file of other shapes and seal the manifest
    again: every digest matches, the network cannot load it."""
    mx.nd.save(os.path.join(ckpt, "model.params"), {"0.weight": mx.nd.zeros((3, 3))})
    checkpoint.write_manifest(ckpt, ["model.params", "optimizer.states", "state.json"])
    checkpoint.verify(ckpt)


def test_restore_falls_back_when_the_newest_does_not_load(tmp_path, capsys):
    rd = tmp_path / "exp-20250101-000000"
    one, two = saved(rd, steps=(4, 8))
    _unloadable(two)
    ref = _setup(rd, seed=99)                                      # one's parameters, to compare
    ref.resume_from = shutil.copytree(one, str(tmp_path / "ref" / "ckpt-1"))
    resume.restore(ref)
    cfg = config.load(None, [f"run.dir={tmp_path}", "run.name=exp", "run.resume=auto"])
    plan = resume.find_resume(cfg)
    assert plan.candidates == [two, one] and not plan.skipped      # files are fine: load decides
    b = _setup(rd, seed=7)
    b.resume_from = plan
    assert resume.restore(b) == (1, 4, 4.0)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"yasgd: warning: skipping checkpoint {two}: "), err
    assert "rank" not in err[0].replace(str(tmp_path), "")
    assert b.said == [f"resumed from {one}: 1 epochs, step 4"]
    for name, value in params_of(ref).items():
        np.testing.assert_array_equal(params_of(b)[name], value, err_msg=name)
    assert os.path.isdir(two) and not glob.glob(str(rd / "abandoned-*"))   # damaged: left alone
    c = _setup(rd)
    c.resume_from = two                                            # explicitly: a usage error
    with pytest.raises(UsageError, match=f"cannot resume from {two}: ") as e:
        resume.restore(c)
    assert "rank" not in str(e.value).replace(str(tmp_path), "") and "\n" not in str(e.value)
    _unloadable(one)
    c.resume_from = resume.find_resume(cfg)
    with pytest.raises(UsageError, match="every checkpoint is damaged") as e:
        resume.restore(c)
    assert f"{two}: " in str(e.value) and f"{one}: " in str(e.value)


def test_save_keeps_a_damaged_namesake_under_another_name(tmp_path):
    one, two = saved(tmp_path, steps=(4, 8))
    flip(two)
    damaged = snapshot(two)
    s = _setup(tmp_path, seed=5)
    s.resume_from = resume.find_resume(config.load(None, [f"run.resume={tmp_path}"]))
    resume.restore(s)
    _steps(s, 4, 4)
    assert checkpoint.save(s, 8, elapsed=8.0) == two               # a new ckpt-2 ...
    checkpoint.verify(two, deep=True)
    kept = glob.glob(str(tmp_path / "damaged-ckpt-2-*"))            # ... the damaged one kept
    assert len(kept) == 1 and snapshot(kept[0]) == damaged
    assert any("damaged-ckpt-2-" in line for line in s.said)


def test_resuming_an_older_checkpoint_abandons_only_valid_newer_ones(tmp_path):
    one, two, three = saved(tmp_path, steps=(4, 8, 12))
    flip(three)
    s = _setup(tmp_path)
    s.resume_from = one
    assert resume.restore(s) == (1, 4, 4.0)
    names = sorted(os.listdir(tmp_path))
    assert names[:2] == ["abandoned-ckpt-2-" + names[0].rsplit("-", 1)[1], "ckpt-1"], names
    assert names[2:] == ["ckpt-3"]                                  # damaged: untouched


# -- config, round trip, pruning -------------------------------------------------------------
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
    s = _setup(tmp_path)
    for step in (4, 8, 12):
        _steps(s, step, 4)
        checkpoint.save(s, step, elapsed=0.0)
    assert sorted(os.listdir(tmp_path)) == ["ckpt-2", "ckpt-3"]
    before = os.stat(os.path.join(tmp_path, "ckpt-3", "state.json")).st_mtime_ns
    time.sleep(0.01)
    checkpoint.save(s, 12, elapsed=0.0)                              # same step: kept as it is
    assert os.stat(os.path.join(tmp_path, "ckpt-3", "state.json")).st_mtime_ns == before


def test_config_mismatch_stops_resume(tmp_path):
    a = _setup(tmp_path)
    _steps(a, 0, 4)
    path = checkpoint.save(a, 4, elapsed=0.0)
    b = _setup(tmp_path)
    b.cfg.optim.lr = 2.0
    b.resume_from = path
    with pytest.raises(UsageError, match="optim.lr: 1.0 -> 2.0"):
        resume.restore(b)


def test_first_nonfinite_step_single_rank():
    w = World()
    assert faults.first_nonfinite_step(w, step=10, bad_steps=3) == 8
    assert faults.first_nonfinite_step(w, step=10, bad_steps=0) is None


def test_a_checkpoint_file_this_user_may_not_read_is_one_line(tmp_path):
    """A checkpoint the user points at, with a file this user may not read: the command
    names the file (exit 2), no traceback. Root reads anything, so as root the command
    runs without the capabilities that let it (setpriv)."""
    import sys
    ckpt = saved(tmp_path / "runs")[-1]
    os.chmod(os.path.join(ckpt, "MANIFEST.json"), 0)
    cmd = [os.path.join(os.path.dirname(sys.executable), "yasgd"), "check-config",
           os.path.join(os.path.dirname(__file__), "..", "..", "examples", "configs",
                        "tiny.yaml"), f"run.dir={tmp_path}/runs", f"run.resume={ckpt}",
           "--run-dir"]
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("root without setpriv: root reads any file")
        cmd = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", *cmd]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert (p.returncode, p.stdout) == (2, ""), p.stderr
    assert p.stderr == (f"yasgd: error: {os.path.join(ckpt, 'MANIFEST.json')}: Permission "
                        "denied\n"), p.stderr
