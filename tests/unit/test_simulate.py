"""Closed forms of the scaling model (yasgd/simulate.py).

Tolerances: closed forms are float arithmetic on the same expression, so relative 1e-12;
"never shorter than compute" allows 1e-15 s of rounding; "non-increasing-ish" efficiency
allows a rise of at most 1e-3 between consecutive GPU counts (a node-count change can shift
a group's start by a few microseconds); the MAC count is checked to 1 %.
"""
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from yasgd import UsageError
from yasgd import simulate as sim

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FREE_NET = sim.Topology(gpus_per_node=4, nvlink_bw=math.inf, nvlink_latency=0.0, hca_bw=math.inf,
                        hcas_per_node=2, ib_latency=0.0, ib_tree_latency=0.0, call_latency=0.0)


def test_resnet50_parameter_count_and_order():
    t = sim.backward_tensors()
    assert sum(n for _, n, _ in t) == 25_557_032
    assert len(t) == 161                        # 53 convs + 53 BN x (gamma, beta) + fc weight, bias
    assert t[0][0].startswith("fc") and t[0][1] == 1000          # fc bias first
    assert t[1][0].startswith("fc") and t[1][1] == 2048 * 1000
    assert t[-1][0].startswith("conv1") and t[-1][1] == 7 * 7 * 3 * 64   # conv1 weight last
    macs = sum(m for _, _, m in t)
    assert macs == pytest.approx(4.09e9, rel=0.01)               # ~4.1 GMAC per 224 px image


def test_grouping_examples():
    assert sim.group_sizes([1, 2, 3, 4], 5) == [3, 3, 4]
    assert sim.group_sizes([1, 10, 1], 5) == [1, 10, 1]          # over budget: a group of its own
    assert sim.group_sizes([2, 3], 5) == [5]                      # exactly the budget fits
    assert sim.group_sizes([], 5) == []


def test_grouping_covers_all_bytes_exactly_once():
    rng = np.random.default_rng(0)
    real = [n * 2 for _, n, _ in sim.backward_tensors()]
    cases = [(real, b) for b in (1, 64 << 10, 4 << 20, 1 << 40)]
    cases += [(list(rng.integers(1, 1000, size=50)), int(rng.integers(1, 3000))) for _ in range(50)]
    for sizes, budget in cases:
        groups = sim.group_sizes(sizes, budget)
        assert sum(groups) == sum(sizes)
        # replay: the groups are consecutive runs of tensors, every tensor in exactly one
        bounds, i = [], 0
        for g in groups:
            j, acc = i, 0
            while acc < g:
                acc += sizes[j]
                j += 1
            assert acc == g
            bounds.append((i, j))
            i = j
        assert i == len(sizes)
        for (a, b), g in zip(bounds, groups):
            assert g <= budget or b - a == 1              # only a lone oversized tensor exceeds it
        for (a, b), g in zip(bounds[:-1], groups):
            assert g + sizes[b] > budget                  # greedy: the next tensor did not fit


def test_grouping_is_greedy():
    sizes = [3, 3, 3, 9, 1, 1]
    groups = sim.group_sizes(sizes, 6)
    assert groups == [6, 3, 9, 2]
    for g in groups:
        assert g <= 6 or g in sizes                   # only a lone oversized tensor exceeds it


def test_ring_allreduce_closed_form():
    for n in (2, 3, 4, 8, 512, 2048):
        for nbytes, bw, lat in ((51e6, 12.5e9, 4e-6), (1.0, 1e9, 0.0), (4 << 20, 150e9, 1.9e-6)):
            want = 2 * (n - 1) / n * nbytes / bw + 2 * (n - 1) * lat
            assert sim.ring_allreduce_time(nbytes, n, bw, lat) == pytest.approx(want, rel=1e-12)
    assert sim.ring_allreduce_time(1e9, 1, 1e9, 1.0) == 0.0
    topo = sim.PRESETS["abci2019"].topo                # within one node: NVLink ring + call latency
    got = sim.allreduce_time(4e6, 4, topo, "ring")
    want = topo.call_latency + 2 * 3 / 4 * 4e6 / topo.nvlink_bw + 2 * 3 * topo.nvlink_latency
    assert got == pytest.approx(want, rel=1e-12)


def test_hierarchical_is_reduce_scatter_inter_allgather():
    topo = sim.PRESETS["abci2019"].topo
    s, nodes, g = 4e6, 512, 4
    rs = (g - 1) / g * s / topo.nvlink_bw + (g - 1) * topo.nvlink_latency
    node_bw = topo.hca_bw * topo.hcas_per_node
    ring = 2 * (nodes - 1) / nodes * s / node_bw + 2 * (nodes - 1) * topo.ib_latency
    tree = 2 * (nodes - 1) / nodes * s / node_bw + 2 * 9 * topo.ib_tree_latency
    assert sim.allreduce_time(s, 2048, topo, "hierarchical") == pytest.approx(
        topo.call_latency + 2 * rs + ring, rel=1e-12)
    assert sim.allreduce_time(s, 2048, topo, "hierarchical_tree") == pytest.approx(
        topo.call_latency + 2 * rs + tree, rel=1e-12)


def test_one_gpu_has_no_communication():
    for preset in sim.PRESETS:
        r = sim.predict(preset=preset, gpus=1, batch=40, epochs=1)
        assert r["comm_s"] == 0.0 and r["exposed_comm_s"] == 0.0
        assert r["efficiency"] == pytest.approx(1.0, rel=1e-12)
        assert r["iteration_s"] == pytest.approx(40 / r["images_per_gpu_s_compute"], rel=1e-12)
    for alg in sim.ALGORITHMS:
        assert sim.allreduce_time(51e6, 1, sim.PRESETS["abci2019"].topo, alg) == 0.0


def test_overlap_never_shorter_than_compute():
    kw = dict(per_gpu_batch=40, images_per_gpu_s=1300.0, grad_bytes=2, update_s=6e-4)
    for topo in (sim.PRESETS["abci2019"].topo, sim.PRESETS["abci3"].topo, FREE_NET):
        for alg in sim.ALGORITHMS:
            for budget in (64 << 10, 4 << 20, 256 << 20):
                for gpus in (1, 4, 64, 2048):
                    r = sim.iteration(gpus=gpus, topo=topo, algorithm=alg,
                                      budget_bytes=budget, **kw)
                    assert r["iteration_s"] >= r["compute_s"] + r["update_s"] - 1e-15
    # a free network overlaps perfectly: the iteration is exactly compute + update
    r = sim.iteration(gpus=2048, topo=FREE_NET, algorithm="hierarchical",
                      budget_bytes=4 << 20, **kw)
    assert r["iteration_s"] == pytest.approx(40 / 1300.0, rel=1e-12)


def test_efficiency_at_most_one_and_non_increasing():
    for preset in sim.PRESETS:
        for alg in sim.ALGORITHMS:
            eff = [sim.predict(preset=preset, gpus=n, batch=40 * n, algorithm=alg)["efficiency"]
                   for n in (2 ** k for k in range(13))]
            assert eff[0] == pytest.approx(1.0, rel=1e-12)
            assert all(e <= 1.0 + 1e-12 for e in eff)
            assert all(b <= a + 1e-3 for a, b in zip(eff, eff[1:])), (preset, alg, eff)


def test_time_to_train_is_steps_times_iteration_plus_fixed():
    r = sim.predict(preset="abci2019", gpus=2048, batch=81920, epochs=90)
    assert r["steps_per_epoch"] == 16                        # ceil(1,281,167 / 81,920)
    assert r["time_to_train_s"] == pytest.approx(
        90 * 16 * r["iteration_s"] + r["evals"] * r["eval_s"], rel=1e-12)
    assert r["images_per_s"] == pytest.approx(81920 / r["iteration_s"], rel=1e-12)


def test_default_budget_matches_config():
    from yasgd.config import CommCfg
    assert sim.DEFAULT_BUDGET == CommCfg().group_budget_bytes


def test_bad_input_raises_usage_error():
    with pytest.raises(UsageError):
        sim.predict(preset="nope")
    with pytest.raises(UsageError):
        sim.predict(gpus=3, batch=81920)
    with pytest.raises(UsageError):
        sim.predict(gpus=0, batch=80)
    with pytest.raises(UsageError):
        sim.predict(gpus=4, batch=80, budget_bytes=0)


@pytest.mark.parametrize("args", [["--gpus", "3", "--batch", "81920"],
                                  ["--preset", "nope"], ["--gpus", "0", "--batch", "8"]])
def test_cli_bad_input_exits_2(args):
    p = subprocess.run([sys.executable, "-m", "yasgd.cli", "simulate", *args], cwd=REPO,
                       capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith("yasgd: error:") and p.stdout == ""


def test_report_writes_table_json_and_png(tmp_path):
    out = sim.report(preset="abci2019", gpus=2048, batch=81920, epochs=90,
                     json_out=str(tmp_path / "sim.json"), plot=str(tmp_path / "sim.png"))
    assert "paper 1903.12650" in out and "hierarchical_tree *" in out
    d = json.loads((tmp_path / "sim.json").read_text())
    assert d["prediction"]["params"] == 25_557_032
    assert len(d["sweeps"]["gpus"]["ring"]) == 13 and d["sweeps"]["gpu_counts"][-1] == 4096
    assert d["sweeps"]["budgets"][0] == 64 << 10 and d["sweeps"]["budgets"][-1] == 256 << 20
    assert (tmp_path / "sim.png").read_bytes()[:4] == b"\x89PNG"
