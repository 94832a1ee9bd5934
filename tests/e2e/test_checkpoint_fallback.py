"""Checkpoint verification and fallback through real `yasgd train` runs (1 rank).

One run writes ckpt-1 and ckpt-2 (starting fresh under run.resume=auto, since there
is no checkpoint yet); each test damages a copy of its run directory the way files
get damaged (cut short, flipped bytes, a file lost, state.json or the manifest
edited) and resumes: auto skips the damaged newest with one warning and resumes
from ckpt-1, leaving the damaged one as it was; every checkpoint damaged, or a
damaged checkpoint named explicitly, ends with exit status 2 and the reasons.

Tiny as in tests/e2e/test_resume.py: Fashion-MNIST cut to 1,024 training and 512
test images, ResNet-8 of width 8, global batch 256, so 4 steps an epoch.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
YASGD = os.path.join(os.path.dirname(sys.executable), "yasgd")
TINY = os.path.join(ROOT, "examples", "configs", "tiny.yaml")
LIMIT = 120          # seconds: a run that takes longer is killed (and the test fails)


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    """Fashion-MNIST's first 1,024 training and 512 test images as IDX files."""
    sys.path.insert(0, ROOT)
    from yasgd.data import fashion_mnist as fm
    out = tmp_path_factory.mktemp("fmnist")
    for split, n in (("train", 1024), ("test", 512)):
        x, y = fm.load("/usr/share/datasets/fashion-mnist", split)
        images, labels = fm.FILES[split]
        (out / images).write_bytes(struct.pack(">IIII", 0x803, n, 28, 28) + x[:n].tobytes())
        (out / labels).write_bytes(struct.pack(">II", 0x801, n) + y[:n].astype(np.uint8).tobytes())
    return str(out)


def _args(data_root, parent, *extra):
    """The training's arguments (checkpoint every epoch), ``extra`` last."""
    return [TINY, f"data.root={data_root}", "data.limit=0", "train.epochs=4",
            "train.eval_every=100", "optim.lr=0.5", "train.log_interval=2",
            "train.progress=false", "train.checkpoint_every=1", "train.keep_checkpoints=3",
            f"run.dir={parent}", "run.name=f", *extra]


def train(data_root, parent, *extra):
    """`yasgd train` on 1 rank; never a traceback."""
    proc = subprocess.run([YASGD, "train", *_args(data_root, parent, *extra)], cwd=ROOT,
                          capture_output=True, text=True, timeout=LIMIT,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    proc.text = f"{proc.stdout}\n--- stderr ---\n{proc.stderr}"
    assert "Traceback" not in proc.text, proc.text
    return proc


def launched(data_root, parent, *extra):
    """`yasgd train` on 2 ranks under `yasgd launch`; never a traceback."""
    launch = [sys.executable, "-m", "yasgd.launch", "-np", "2", "--timeout", str(LIMIT - 20),
              "--", YASGD, "train", *_args(data_root, parent, *extra)]
    proc = subprocess.run(["bash", "-c", 'source jobs/common.sh && exec "$@"', "_", *launch],
                          cwd=ROOT, capture_output=True, text=True, timeout=LIMIT,
                          env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1"))
    proc.text = f"{proc.stdout}\n--- stderr ---\n{proc.stderr}"
    assert "Traceback" not in proc.text, proc.text
    return proc


def events(rd):
    with open(os.path.join(rd, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def snapshot(path):
    return {n: open(os.path.join(path, n), "rb").read() for n in sorted(os.listdir(path))}


# -- damage ------------------------------------------------------------------------------
def _edit_json(path, edit):
    with open(path) as f:
        doc = json.load(f)
    edit(doc)
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)


def _flip(path):
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        b = f.read(4)
        f.seek(-4, 1)
        f.write(bytes(x ^ 0xFF for x in b))


DAMAGE = {   # kind: (what is done to a checkpoint, the reason the warning must give)
    "truncated": (lambda c: os.truncate(os.path.join(c, "model.params"), 1000),
                  r"model\.params has 1000 bytes, \d+ expected \(truncated\)"),
    "flipped": (lambda c: _flip(os.path.join(c, "model.params")),
                r"model\.params does not match its SHA-256"),
    "deleted": (lambda c: os.remove(os.path.join(c, "optimizer.states")),
                r"optimizer\.states is missing"),
    "state-edited": (lambda c: _edit_json(os.path.join(c, "state.json"),
                                          lambda d: d.update(step=d["step"] + 1)),
                     r"state\.json does not match its SHA-256"),
    "manifest-edited": (lambda c: _edit_json(os.path.join(c, "MANIFEST.json"),
                                             lambda d: d["files"]["model.params"].update(sha256="0" * 64)),
                        r"MANIFEST\.json does not match MANIFEST\.sha256"),
}


# -- the runs ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def base(data_root, tmp_path_factory):
    """2 epochs under run.resume=auto with no checkpoint anywhere: a fresh start."""
    parent = tmp_path_factory.mktemp("base")
    proc = train(data_root, parent, "run.resume=auto", "train.max_steps=8")
    assert proc.returncode == 0, proc.text
    (name,) = os.listdir(parent)
    return str(parent / name), proc


@pytest.fixture
def copy(base, tmp_path):
    """(parent, run dir, ckpt-1, ckpt-2) of a fresh copy of the base run."""
    parent = tmp_path / "runs"
    rd = shutil.copytree(base[0], str(parent / os.path.basename(base[0])))
    return str(parent), rd, os.path.join(rd, "ckpt-1"), os.path.join(rd, "ckpt-2")


def test_auto_without_any_checkpoint_starts_fresh(base):
    rd, proc = base
    assert "resumed from" not in proc.stdout and "yasgd: warning" not in proc.stderr, proc.text
    assert [e["event"] for e in events(rd)].count("start") == 1
    assert not [e for e in events(rd) if e["event"] in ("resume", "checkpoint_skipped")]
    assert {"ckpt-1", "ckpt-2"} <= set(os.listdir(rd)) and events(rd)[-1]["steps"] == 8


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_damaged_newest_is_skipped_with_one_warning(data_root, copy, kind):
    parent, rd, one, two = copy
    damage, reason = DAMAGE[kind]
    damage(two)
    before = snapshot(two)
    # stop at step 6, before ckpt-2's step: this run writes no checkpoint of that name
    proc = train(data_root, parent, "run.resume=auto", "train.max_steps=6")
    assert proc.returncode == 0, proc.text
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("yasgd: warning")]
    assert len(warnings) == 1 and warnings[0].startswith(
        f"yasgd: warning: skipping checkpoint {two}: "), proc.text
    assert re.search(reason, warnings[0]) and "rank" not in warnings[0].replace(parent, ""), warnings
    assert f"resumed from {one}: 1 epochs, step 4" in proc.stdout, proc.text
    evs = events(rd)
    (res,) = [e for e in evs if e["event"] == "resume"]
    assert (res["checkpoint"], res["epoch"], res["step"], res["skipped"]) == (one, 1, 4, [two])
    assert [e["checkpoint"] for e in evs if e["event"] == "checkpoint_skipped"] == [two]
    assert evs[-1]["event"] == "end" and evs[-1]["steps"] == 6
    assert snapshot(two) == before                                   # left as it was
    assert sorted(n for n in os.listdir(rd) if "ckpt" in n) == ["ckpt-1", "ckpt-1-step6", "ckpt-2"]


def test_every_checkpoint_damaged_exits_2_naming_each(data_root, copy):
    parent, rd, one, two = copy
    DAMAGE["flipped"][0](one)
    DAMAGE["deleted"][0](two)
    before = {c: snapshot(c) for c in (one, two)}
    for how in ("auto", rd):
        proc = train(data_root, parent, f"run.resume={how}")
        assert proc.returncode == 2, proc.text
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("yasgd: error: "), proc.text
        assert "every one is damaged" in lines[0] and "rank" not in lines[0].replace(parent, ""), lines
        assert f"{two}: optimizer.states is missing" in lines[0], lines
        assert f"{one}: model.params does not match its SHA-256" in lines[0], lines
    assert {c: snapshot(c) for c in (one, two)} == before
    assert [e["event"] for e in events(rd)].count("start") == 1      # no run started


def test_explicit_damaged_checkpoint_exits_2_with_the_reason(data_root, copy):
    parent, rd, one, two = copy
    DAMAGE["truncated"][0](two)
    proc = train(data_root, parent, f"run.resume={two}")
    assert proc.returncode == 2, proc.text
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and re.fullmatch(
        rf"yasgd: error: run\.resume: cannot resume from {re.escape(two)}: "
        r"model\.params has 1000 bytes, \d+ expected \(truncated\)", lines[0]), proc.text
    assert os.path.getsize(os.path.join(two, "model.params")) == 1000


def test_two_ranks_move_on_together_when_only_rank_1_fails(data_root, copy):
    """ckpt-2 claims 2 ranks and holds an aux-rank1.params of unknown parameters, the
    manifest sealed again: every file verifies on rank 0, only rank 1 cannot load
    it. Both ranks skip it and resume from ckpt-1 (the one 2-rank run of this file)."""
    import mxnet as mx
    from yasgd import checkpoint
    parent, rd, one, two = copy
    mx.nd.save(os.path.join(two, "aux-rank1.params"), {"no.such.param": mx.nd.zeros((2,))})
    _edit_json(os.path.join(two, "state.json"), lambda d: d.update(world_size=2))
    checkpoint.write_manifest(two, ["model.params", "optimizer.states", "state.json",
                                    "aux-rank1.params"])
    checkpoint.verify(two)
    proc = launched(data_root, parent, "run.resume=auto", "train.max_steps=6")
    text = proc.text
    assert proc.returncode == 0, text
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("yasgd: warning")]
    assert len(warnings) == 1 and warnings[0].startswith(
        f"yasgd: warning: skipping checkpoint {two}: loading failed on rank 1 of 2"), text
    assert proc.stdout.count(f"resumed from {one}: 1 epochs, step 4") == 1, text
    assert events(rd)[-1]["steps"] == 6 and os.path.isdir(two)


@pytest.mark.parametrize("case", ["damaged", "config"])
def test_launch_refuses_a_resume_once_before_any_rank(data_root, copy, case):
    """The checkpoint run.resume chooses, checked by yasgd launch before mpirun starts: one
    line, not one a rank and mpirun's report; the checkpoints and the run as they were."""
    parent, rd, one, two = copy
    if case == "damaged":
        DAMAGE["flipped"][0](one)
        DAMAGE["deleted"][0](two)
        extra, words = ["run.resume=auto"], "run.resume=auto: no checkpoint can be resumed"
    else:
        extra, words = [f"run.resume={rd}", "optim.lr=0.3"], (
            f"cannot resume from {two}: the config differs from the checkpoint's in optim.lr: "
            "0.5 -> 0.3")
    before = {c: snapshot(c) for c in (one, two)}
    proc = launched(data_root, parent, *extra)
    assert proc.returncode == 2 and proc.stdout == "", proc.text
    assert proc.stderr.count("\n") == 1, proc.text
    assert proc.stderr.startswith(f"yasgd: error: {words}"), proc.text
    assert {c: snapshot(c) for c in (one, two)} == before
    assert [e["event"] for e in events(rd)].count("start") == 1      # no run started


# -- the dynamic loss scale ------------------------------------------------------------------
def _loss_scale_of(parent, ckpt):
    (name,) = os.listdir(parent)
    with open(os.path.join(parent, name, ckpt, "state.json")) as f:
        return json.load(f)["loss_scale"]


def test_dynamic_loss_scale_resumes_where_it_stopped(data_root, tmp_path):
    """A checkpoint keeps the dynamic loss scale and its count of good steps: stopped after
    one epoch and resumed, a run ends with the scale of the run that was never stopped.
    Window 3, 4 steps an epoch, no overflow at these scales: doubled after steps 3 and 6."""
    ls = ("train.loss_scale=dynamic", "train.loss_scale_window=3")
    whole, part = tmp_path / "whole", tmp_path / "part"
    for parent, extra in ((whole, ["train.max_steps=8"]), (part, ["train.max_steps=4"]),
                          (part, ["run.resume=auto", "train.max_steps=8"])):
        proc = train(data_root, parent, *ls, *extra)
        assert proc.returncode == 0, proc.text
    assert _loss_scale_of(part, "ckpt-1") == {"scale": 2.0 ** 17, "good": 1}
    assert _loss_scale_of(whole, "ckpt-2") == _loss_scale_of(part, "ckpt-2") == \
        {"scale": 2.0 ** 18, "good": 2}


def test_no_loss_scale_is_kept_without_a_scaler(base):
    with open(os.path.join(base[0], "ckpt-1", "state.json")) as f:
        assert json.load(f)["loss_scale"] is None
