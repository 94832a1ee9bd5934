"""The per-GPU step line of ``yasgd simulate`` and where its constants come from.

* the shape h: the relative least-squares line of the published per-batch inference table times
  the training-to-inference ratio of h of MXNet's published V100 training/scoring pair (closed
  form on exact lines to 1e-9; the published tables' h and the ratio recomputed with NumPy to
  1e-9);
* the per-GPU constant c: each preset's single-node MLPerf log (examples/results/mlperf_logs.json)
  is reproduced by the model run on that one node within 5 % - an in-sample check (the log set c);
* continuity: t(b) is one line, so from b to b + 1 the per-GPU rate moves by exactly
  1 / (h + b) relative (1e-9), for b = 1 .. 512; the whole iteration (communication timeline and
  lock-step included) by at most 2 / (h + b) plus half a Horovod cycle (a group that finds the
  channel idle waits for the next poll), so no batch makes the prediction jump;
* the greedy and equal-bytes grouping rules of yasgd/grouping.py equal yasgd/allreduce.py's.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from yasgd import grouping
from yasgd import simulate as sim
from yasgd.simulate import presets

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOGS = os.path.join(REPO, "examples", "results", "mlperf_logs.json")


def _logs():
    with open(LOGS) as f:
        return json.load(f)


def test_fixed_cost_images_of_exact_lines():
    for t0, c in ((2e-3, 2.5e-4), (1e-3, 1e-4), (0.0, 1e-4)):
        curve = tuple((b, b / (t0 + c * b)) for b in (1, 2, 4, 8, 16, 32, 64, 128, 192))
        assert sim.fixed_cost_images(curve) == pytest.approx(t0 / c, rel=1e-9, abs=1e-9)
    assert sim.fixed_cost_images(((8, 100.0),)) == 0.0


def _lstsq_h(table):
    b = np.array([x for x, _ in table], float)
    t = b / np.array([y for _, y in table], float)
    a = np.vstack([np.ones_like(b), b]).T / t[:, None]          # relative least squares
    t0, c = np.linalg.lstsq(a, np.ones_like(b), rcond=None)[0]
    return t0 / c


def test_shape_h_from_the_published_tables():
    # training h / inference h of the MXNet FAQ's V100 pair, over the batches both publish
    train = presets.MXNET_FAQ_V100_TRAIN
    common = {b for b, _ in train}
    score = tuple((b, x) for b, x in presets.MXNET_FAQ_V100_SCORE if b in common)
    ratio = _lstsq_h(train) / _lstsq_h(score)
    assert presets.TRAIN_TO_INFER_H == pytest.approx(ratio, rel=1e-9)
    assert 1.46 < ratio < 1.48 and [b for b, _ in score] == [1, 2, 4, 8, 16, 32, 64, 128]
    assert presets.SHAPE_H_INFER == pytest.approx(_lstsq_h(presets.V100_INFER), rel=1e-9)
    assert presets.SHAPE_H_INFER_A100 == pytest.approx(_lstsq_h(presets.A100_INFER), rel=1e-9)
    assert 8.5 < presets.SHAPE_H_INFER < 9.5 and 11.0 < presets.SHAPE_H_INFER_A100 < 12.0
    assert presets.SHAPE_H == pytest.approx(presets.SHAPE_H_INFER * ratio, rel=1e-9)
    assert presets.SHAPE_H_A100 == pytest.approx(presets.SHAPE_H_INFER_A100 * ratio, rel=1e-9)
    # V100 presets: the V100 mxnet-19.07 table; A100, H100 and H200: the A100 mxnet-20.12 table
    for name, p in sim.PRESETS.items():
        a100 = ("dgxa100", "dgxa100_40gb", "dgxh100", "abci3")
        want = presets.SHAPE_H_A100 if name in a100 else presets.SHAPE_H
        assert p.shape_h == want, name


def test_train_to_infer_h_of_exact_lines():
    # training line t0 = 3 ms + 1 ms/img (h = 3), inference 1 ms + 0.5 ms/img (h = 2): ratio 1.5;
    # only the batches both tables publish count
    train = tuple((b, b / (3e-3 + 1e-3 * b)) for b in (1, 2, 4, 8, 16, 32))
    infer = tuple((b, b / (1e-3 + 5e-4 * b)) for b in (1, 2, 4, 8, 16, 32)) + ((64, 1.0),)
    assert sim.train_to_infer_h(train, infer) == pytest.approx(1.5, rel=1e-9)


def test_single_node_overheads_are_the_recorded_logs():
    import statistics
    logs = {e["repository"] + " " + e["results"].rstrip("/").rsplit("/", 1)[0]: e
            for e in _logs()["single_node"]}
    for p in sim.PRESETS.values():
        for s in p.single_node:
            e = logs[s.source]
            used = [r for r in e["runs"] if r["file"] in e["runs_used"]]
            if s.mlperf_round == "v0.5":        # run_start before initialization: none taken
                assert s.startup_s is None and s.first_epoch_excess is None and s.eval_s is None
                continue
            assert s.startup_s == pytest.approx(
                statistics.median(r["run_start_to_first_epoch_s"] for r in used), abs=1e-3)
            assert s.first_epoch_excess == pytest.approx(statistics.median(
                r["first_epoch_s"] / r["median_epoch_s"] - 1 for r in used), abs=1e-4)
            assert s.eval_s == pytest.approx(
                statistics.median(r["eval_s_median"] for r in used), abs=1e-3)


def test_presets_single_node_constants_are_the_recorded_logs():
    rec = {e["repository"] + " " + e["results"].rstrip("/").rsplit("/resnet", 1)[0]: e
           for e in _logs()["single_node"]}
    seen = set()
    for name, p in sim.PRESETS.items():
        for s in p.single_node:
            e = rec[s.source]
            seen.add(s.source)
            assert s.iteration_s == pytest.approx(e["iteration_s"], rel=1e-12), name
            assert (s.gpus, s.per_gpu_batch) == (e["gpus"], e["per_gpu_batch"])
            assert e["global_batch"] == s.gpus * s.per_gpu_batch
            assert e["iteration_s"] == pytest.approx(e["median_epoch_s"] / e["steps_per_epoch"],
                                                     abs=1e-6)
    assert seen == set(rec)                         # every recorded single-node log is used


@pytest.mark.parametrize("name", list(sim.PRESETS))
def test_single_node_logs_reproduced_in_sample(name):
    p = sim.PRESETS[name]
    for s in p.single_node:
        r = sim.predict(preset=name, gpus=s.gpus, batch=s.gpus * s.per_gpu_batch,
                        mlperf_round=s.mlperf_round)
        assert r["nodes"] * p.topo.gpus_per_node >= s.gpus
        assert abs(r["iteration_s"] / s.iteration_s - 1) <= 0.05, (name, s.mlperf_round)


def test_step_line_closed_form():
    p = sim.PRESETS["dgx1"]
    c = sim.per_image_s(p)
    s = p.single_node[0]
    lock = sim.lockstep(p, s.gpus, s.per_gpu_batch)
    assert c == pytest.approx(s.iteration_s / (lock * (p.shape_h + s.per_gpu_batch)), rel=1e-12)
    for b in (1, 40, 208, 512):
        assert sim.per_gpu_throughput(p, b) == pytest.approx(b / (c * (p.shape_h + b)), rel=1e-12)


@pytest.mark.parametrize("name,gpus", [("abci2019", 2048), ("dgx1", 1040), ("dgx2h", 1536),
                                       ("dgxh100", 3584), ("abci3", 2048), ("dgx1", 8)])
def test_continuity_in_per_gpu_batch(name, gpus):
    p = sim.PRESETS[name]
    prev = None
    # up to 512 images per GPU, or the global batch of the whole training set
    for b in range(1, min(512, sim.IMAGENET_TRAIN // gpus) + 1):
        r = sim.predict(preset=name, gpus=gpus, batch=b * gpus, epochs=90)
        t = b / sim.per_gpu_throughput(p, b)
        if prev is not None:
            assert t / prev[1] - 1 == pytest.approx(1 / (p.shape_h + b - 1), rel=1e-9)
            bound = 2 / (p.shape_h + b - 1) + p.horovod_cycle_s / 2 / prev[0]
            assert abs(r["iteration_s"] / prev[0] - 1) <= bound, (name, gpus, b)
        prev = (r["iteration_s"], t)


def test_preset_list_names_every_preset_and_source():
    out = sim.report(preset="list")
    for name, p in sim.PRESETS.items():
        assert f"{name}: {p.title}" in out
        for s in p.single_node:
            assert s.source in out or s is not p.single_node[0]
    r = subprocess.run([sys.executable, "-m", "yasgd.cli", "simulate", "--preset", "list"],
                       cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == out


def test_grouping_module_matches_allreduce():
    mx = pytest.importorskip("mxnet")
    from yasgd import allreduce

    class P:
        def __init__(self, shape, dtype, name):
            self.shape, self.dtype, self.grad_req, self.name = shape, dtype, "write", name

    rng = np.random.default_rng(1)
    assert allreduce.DEFAULT_BUDGET_BYTES == grouping.DEFAULT_BUDGET_BYTES == 4 << 20
    for _ in range(30):
        params = [P((int(rng.integers(1, 3000)),), rng.choice(["float16", "float32"]),
                    f"layer{i // 2}_{'weight' if i % 2 else 'bias'}")
                  for i in range(int(rng.integers(1, 60)))]
        sizes = [int(np.prod(p.shape)) * np.dtype(p.dtype).itemsize for p in reversed(params)]
        back = list(reversed(params))
        layers = [p.name.split("_")[0] for p in back]
        for budget, ng in ((int(rng.integers(1, 20000)), 0), (4 << 20, int(rng.integers(1, 9)))):
            want = [[back.index(q) for q in g]
                    for g in allreduce.group_params(params, budget_bytes=budget, num_groups=ng)]
            assert grouping.group_indices(sizes, budget, ng, layers) == want
    del mx


def test_grouping_rules():
    assert grouping.budget_bounds([1, 2, 3, 4], 5) == [(0, 2), (2, 3), (3, 4)]
    assert grouping.group_bytes([1, 10, 1], 5) == [1, 10, 1]
    assert grouping.group_bytes([5, 5, 5, 5], num_groups=2) == [10, 10]
    assert grouping.group_bytes([], 5) == []
    # a layer's tensors are never split: the rules apply to whole layers
    assert grouping.group_bytes([1, 10, 1], 5, layers=["fc", "fc", "conv"]) == [11, 1]
    assert grouping.group_indices([2, 2, 2, 2], 5, layers="aabb") == [[0, 1], [2, 3]]
    assert grouping.group_indices([4, 4, 1, 1], num_groups=2, layers="abcc") == [[0], [1, 2, 3]]
    with pytest.raises(ValueError, match="layer keys"):
        grouping.group_indices([1, 2], 5, layers=["a"])
    with pytest.raises(ValueError):
        grouping.budget_bounds([1], 0)
    sizes = [n * 2 for _, n, _ in sim.backward_tensors()]
    g = sim.grouped(sizes, num_groups=16)
    assert len(g) <= 16 and sum(b for _, b in g) == sum(sizes)
    assert [i for i, _ in g] == sorted(i for i, _ in g) and g[-1][0] == len(sizes) - 1
