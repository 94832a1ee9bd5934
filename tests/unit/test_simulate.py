"""Closed forms of the scaling model (yasgd/simulate/).

Tolerances: closed forms are float arithmetic on the same expression, so relative 1e-12;
the lock-step factor is a numerical integral (Simpson, 4,000 steps), checked against its closed
forms to 1e-9 (normal jitter) and 1e-6 (one term vanishing in the convolution), z(2048) to 1e-3;
"never shorter than compute" allows 1e-15 s of rounding; "non-increasing-ish" efficiency
allows a rise of at most 1e-3 between consecutive GPU counts (a node-count change can shift
a group's start by a few microseconds); the MAC count is checked to 1 %; the small-batch
compute model against exact step-time lines to 1e-9; the single-node logs (in-sample: they set
the per-GPU line) to 5 %; neighbouring per-GPU batches to 2 % (continuity of t(b)).
"""
import json
import math
import os
import re
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

from yasgd import UsageError
from yasgd import grouping
from yasgd import simulate as sim
from yasgd.simulate import model

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
    # tree: NCCL's tree bandwidth factor (.9) and its size correction for the per-GPU shard:
    # 1 MB per GPU -> log2i(1e6 >> 6) = 13 -> the Simple row's .5
    tree_bw = node_bw * topo.tree_bw_factor * topo.tree_correction[13]
    assert topo.tree_bw_factor == 0.9 and topo.tree_correction[13] == 0.5
    tree = 2 * (nodes - 1) / nodes * s / tree_bw + 2 * 9 * topo.ib_tree_latency
    assert sim.allreduce_time(s, 2048, topo, "hierarchical") == pytest.approx(
        topo.call_latency + 2 * rs + ring, rel=1e-12)
    assert sim.allreduce_time(s, 2048, topo, "hierarchical_tree") == pytest.approx(
        topo.call_latency + 2 * rs + tree, rel=1e-12)
    # without the NCCL refinements the tree is the plain halving-doubling form
    plain = sim.Topology(**{**topo.__dict__, "tree_bw_factor": 1.0, "tree_correction": ()})
    assert sim.allreduce_time(s, 2048, plain, "hierarchical_tree") == pytest.approx(
        topo.call_latency + 2 * rs + 2 * (nodes - 1) / nodes * s / node_bw
        + 2 * 9 * topo.ib_tree_latency, rel=1e-12)


def test_tree_correction_lookup():
    table = sim.PRESETS["abci2019"].topo.tree_correction
    assert len(table) == 22                                       # 64 B .. 128 MB
    assert sim.tree_correction(table, 0) == table[0] == 0.9
    assert sim.tree_correction(table, 64) == table[0]             # 64 >> 6 = 1 -> index 0
    assert sim.tree_correction(table, 127) == table[0]
    assert sim.tree_correction(table, 128) == table[1]
    assert sim.tree_correction(table, 1 << 20) == table[14] == 0.5   # 1 MiB >> 6 = 2^14
    assert sim.tree_correction(table, (1 << 27) + 1) == table[21] == 0.9
    assert sim.tree_correction(table, 1 << 28) == 1.0             # past the table
    assert sim.tree_correction((), 1 << 20) == 1.0


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
    # non-increasing up to half a Horovod cycle: a group that finds the channel idle waits for
    # the next poll (cycle / 2), one queued behind a longer collective does not, so more GPUs
    # (longer collectives) can save at most that wait per iteration
    for preset, p in sim.PRESETS.items():
        for alg in sim.ALGORITHMS:
            rs = [sim.predict(preset=preset, gpus=n, batch=40 * n, algorithm=alg)
                  for n in (2 ** k for k in range(13))]
            eff = [r["efficiency"] for r in rs]
            assert eff[0] == pytest.approx(1.0, rel=1e-12)
            assert all(e <= 1.0 + 1e-12 for e in eff)
            assert all(b <= a * (1 + p.horovod_cycle_s / 2 / r["iteration_s"]) + 1e-3
                       for a, b, r in zip(eff, eff[1:], rs[1:])), (preset, alg, eff)


def test_time_to_train_is_steps_times_iteration_plus_fixed():
    r = sim.predict(preset="abci2019", gpus=2048, batch=81920, epochs=90)
    assert r["steps_per_epoch"] == 16                        # ceil(1,281,167 / 81,920)
    assert r["time_to_train_s"] == pytest.approx(
        90 * 16 * r["iteration_s"] + r["evals"] * r["eval_s"], rel=1e-12)
    assert r["startup_s"] == 0 and r["warmup_s"] == 0        # the v0.5 log gives neither
    assert r["evals"] == 22                                   # every 4 epochs
    assert sim.predict(evals=5)["fixed_s"] == pytest.approx(5 * r["eval_s"], rel=1e-12)
    assert r["images_per_s"] == pytest.approx(81920 / r["iteration_s"], rel=1e-12)


def test_time_to_train_counts_the_single_node_logs_start_up_and_first_epoch():
    from yasgd.simulate.presets import single_node
    s = single_node(sim.PRESETS["dgxh100"], "v3.0")             # v3.0 DGX H100 log
    r = sim.predict(preset="dgxh100", gpus=64, batch=3200, epochs=35, evals=9,
                    mlperf_round="v3.0")
    assert r["startup_s"] == s.startup_s
    assert r["warmup_s"] == pytest.approx(s.first_epoch_excess * 401 * r["iteration_s"], rel=1e-12)
    assert r["time_to_train_s"] == pytest.approx(
        35 * 401 * r["iteration_s"] + 9 * r["eval_s"] + r["startup_s"] + r["warmup_s"], rel=1e-12)
    # evaluation: the log's own, per validation image of one GPU (ceil(50,000 / N))
    one = sim.predict(preset="dgxh100", gpus=8, batch=3200, epochs=35, mlperf_round="v3.0")
    assert one["eval_s"] - sim.allreduce_time(8, 8, sim.PRESETS["dgxh100"].topo,
                                              "hierarchical_tree") == pytest.approx(s.eval_s)


def test_software_round_sets_only_the_per_gpu_line():
    a = sim.predict(preset="abci2019", gpus=2048, batch=86016, epochs=90, mlperf_round="v0.6")
    b = sim.predict(preset="abci2019", gpus=2048, batch=86016, epochs=90, mlperf_round="v0.6",
                    software_round="v0.5")
    assert b["per_image_s"] == sim.predict(mlperf_round="v0.5")["per_image_s"]
    assert b["iteration_s"] > a["iteration_s"] and b["startup_s"] == a["startup_s"] > 0


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
                                  ["--preset", "nope"], ["--gpus", "0", "--batch", "8"],
                                  ["--preset", ""]])
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
    assert d["sweeps"]["gpu_counts_left_out"] == [] and d["sweeps"]["max_gpus"] == 1281167 // 40


def test_the_gpu_sweep_leaves_out_counts_past_an_epoch(tmp_path):
    # 408 images/GPU: 4,096 GPUs would take a batch past ImageNet's training set; the sweep
    # leaves that count out and says so, and the run itself is written, not refused
    sim.report(preset="dgxa100", gpus=8, batch=3264, epochs=90,
               json_out=str(tmp_path / "s.json"), plot=str(tmp_path / "s.png"))
    sw = json.loads((tmp_path / "s.json").read_text())["sweeps"]
    assert sw["gpu_counts"] == [2 ** k for k in range(12)] and len(sw["gpus"]["ring"]) == 12
    assert (sw["gpu_counts_left_out"], sw["max_gpus"]) == ([4096], 3140)
    assert (tmp_path / "s.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("kw", [dict(preset="abci3", gpus=1_000_000, batch=1_000_000),
                                dict(preset="abci2019", gpus=1, batch=1),
                                dict(preset="abci2019", gpus=2048, batch=81920)],
                         ids=["a million GPUs", "one image", "the paper"])
def test_report_table_keeps_its_columns_apart(kw):
    # every row of the table: its 8 cells, at least two spaces apart however long a value is
    # (the time of a step over a million GPUs ran into its neighbours at fixed widths)
    lines = sim.report(epochs=90, **kw).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("algorithm"))
    table = lines[start:lines.index("", start)]
    assert len(table) >= 5
    heads = ["algorithm", "iter ms", "comm ms", "exposed", "images/s", "img/s/GPU", "effic.",
             "time to train"]
    assert re.split(r" {2,}", table[0]) == heads
    for row in table[1:]:
        cells = re.split(r" {2,}", row)
        if row.startswith("paper"):         # the paper gives no step, communication, exposure
            assert len(cells) == 5, row
            continue
        assert len(cells) == 8, row
        assert all(re.fullmatch(r"[\d,.]+( M| s|%)?", c) for c in cells[1:]), row
    # the columns line up: each value ends where its heading does
    ends = [m.end() for m in re.finditer(r"\S+(?: \S+)*", table[0])]
    for row in table[1:]:
        if not row.startswith("paper"):
            assert [m.end() for m in re.finditer(r"\S+(?: \S+)*", row)][1:] == ends[1:], row


def test_fujitsu_cubic_groups():
    assert sim.fujitsu_cubic_bounds() == [(158, 161), (137, 158), (80, 137), (0, 80)]
    assert [e - b for b, e in sim.fujitsu_cubic_bounds()] == [3, 21, 57, 80]
    assert sim.fujitsu_cubic_bounds(10, 1) == [(9, 10), (2, 9), (0, 2)]
    t = sim.backward_tensors()
    bn = [n for name, n, _ in t if sim.is_batchnorm(name)]
    assert len(bn) == 106 and sim.is_batchnorm("stage2.0.down_bn[1]") and sim.is_batchnorm("bn1[0]")
    assert not sim.is_batchnorm("stage2.0.down[0]") and not sim.is_batchnorm("fc[1]")
    groups = sim.fujitsu_cubic_groups(grad_bytes=2, fp32_bytes=4)
    assert len(groups) == 5
    # every byte once: fp16 for weights, fp32 for BN, the fp32 collective last
    total = sum(n for _, n, _ in t)
    assert sum(b for _, b in groups) == 2 * (total - sum(bn)) + 4 * sum(bn)
    assert groups[-1] == (len(t) - 1, 4 * sum(bn))
    assert groups[0] == (2, 2 * (2048 * 1000 + 1000))             # fc weight + bias (its bn3 beta
    lasts = [i for i, _ in groups]                                 # is fp32) completes at index 2
    assert lasts == sorted(lasts)


def test_lockstep_closed_forms():
    for cv, spread in ((0.05, 0.0), (0.0, 0.08), (0.03, 0.08)):
        assert sim.lockstep_factor(1, cv, spread) == 1.0
    assert sim.lockstep_factor(2048, 0.0, 0.0) == 1.0
    # normal jitter only: E[max of 2 standard normals] = 1/sqrt(pi); z(2048) ~ 3.44
    assert sim.lockstep_factor(2, 0.05, 0.0) == pytest.approx(1 + 0.05 / math.sqrt(math.pi),
                                                              rel=1e-9)
    assert sim.lockstep_factor(2048, 1.0, 0.0) - 1 == pytest.approx(3.4418, abs=1e-3)
    # uniform spread only: E[max of n uniforms on (-s/2, s/2)] = s/2 (n-1)/(n+1)
    for n in (2, 3, 64, 2048):
        assert sim.lockstep_factor(n, 0.0, 0.08) == pytest.approx(1 + 0.04 * (n - 1) / (n + 1),
                                                                  rel=1e-12)
    # both: the convolution tends to each closed form as the other term vanishes
    assert sim.lockstep_factor(64, 1e-7, 0.08) == pytest.approx(1 + 0.04 * 63 / 65, rel=1e-6)
    assert sim.lockstep_factor(64, 0.05, 1e-9) == pytest.approx(sim.lockstep_factor(64, 0.05, 0),
                                                                rel=1e-6)
    # and lies between the larger single term and their sum; grows with n
    both = sim.lockstep_factor(2048, 0.03, 0.08) - 1
    alone = (sim.lockstep_factor(2048, 0.03, 0) - 1, sim.lockstep_factor(2048, 0, 0.08) - 1)
    assert max(alone) < both < sum(alone)
    f = [sim.lockstep_factor(n, 0.03, 0.08) for n in (2, 4, 16, 256, 2048, 4096)]
    assert f == sorted(f) and len(set(f)) == len(f)


def test_step_cv_from_published_percentiles():
    p = sim.PRESETS["abci2019"]
    # batch 32: mean 9.9, p50 9.8, p90 10.3 ms; batch 64: 17.0, 17.0, 17.5
    cv32 = (10.3 - 9.8) / (1.2815515655446004 * 9.9)
    cv64 = (17.5 - 17.0) / (1.2815515655446004 * 17.0)
    lat = p.latency_curve
    assert sim.step_cv(lat, 32) == pytest.approx(cv32, rel=1e-12)
    assert sim.step_cv(lat, 40) == pytest.approx(cv32 + (cv64 - cv32) * 8 / 32, rel=1e-12)
    assert sim.step_cv(lat, 1000) == sim.step_cv(lat, 256)        # clamped
    assert sim.step_cv((), 40) == 0.0


def test_backward_shares_sms_with_a_running_collective():
    # free until 1, shared (half speed) 1..3, free again
    assert model._time_at_work(0.0, 0.5, [(1.0, 3.0)], 0.5) == pytest.approx(0.5, rel=1e-12)
    assert model._time_at_work(0.0, 1.5, [(1.0, 3.0)], 0.5) == pytest.approx(2.0, rel=1e-12)
    assert model._time_at_work(0.0, 2.5, [(1.0, 3.0)], 0.5) == pytest.approx(3.5, rel=1e-12)
    assert model._time_at_work(0.0, 2.5, [(1.0, 3.0)], 0.0) == pytest.approx(2.5, rel=1e-12)
    assert model._time_at_work(5.0, 1.0, [(1.0, 3.0)], 0.5) == pytest.approx(6.0, rel=1e-12)


def test_horovod_cycle_and_fusion_copies_closed_form():
    # one collective of fixed cost c, ready when backward ends, comm idle: it waits cycle/2,
    # then costs c + the fusion copies; backward is already over, so no SM sharing
    c = 1e-3
    topo = sim.Topology(gpus_per_node=4, nvlink_bw=math.inf, nvlink_latency=0.0,
                        hca_bw=math.inf, hcas_per_node=2, ib_latency=0.0, ib_tree_latency=0.0,
                        call_latency=c)
    kw = dict(per_gpu_batch=40, images_per_gpu_s=1300.0, grad_bytes=2, update_s=6e-4,
              topo=topo, algorithm="hierarchical_tree", budget_bytes=4 << 20)
    nbytes, cycle, copy = 51_000_000, 0.2e-3, 4 / 900e9
    r = sim.iteration(gpus=2048, groups=[(160, nbytes)], cycle_s=cycle, copy_s_per_byte=copy,
                      sm_share=0.05, lockstep=1.1, **kw)
    compute = (40 / 1300.0 - 6e-4) * 1.1
    assert r["compute_s"] == pytest.approx(compute, rel=1e-12)
    assert r["iteration_s"] == pytest.approx(compute + cycle / 2 + c + copy * nbytes + 6e-4,
                                             rel=1e-12)
    # a group that is ready while the previous one still runs starts right after it
    r2 = sim.iteration(gpus=2048, groups=[(160, nbytes), (160, nbytes)], cycle_s=cycle,
                       copy_s_per_byte=copy, lockstep=1.1, **kw)
    assert r2["iteration_s"] - r["iteration_s"] == pytest.approx(c + copy * nbytes, rel=1e-9)


def test_preset_grouping_and_stragglers():
    head = sim.predict(preset="abci2019")
    assert head["grouping"] == "fujitsu_cubic" and head["groups"] == 5
    assert head["budget_bytes"] is None
    r = sim.predict(preset="abci2019", budget_bytes=4 << 20)
    assert r["grouping"] == "budget" and r["groups"] == 15
    assert sim.predict(preset="abci3")["grouping"] == "budget"
    r = sim.predict(preset="dgx1", gpus=1040, batch=54080)
    sizes = [n * 2 for _, n, _ in sim.backward_tensors()]        # MXNET_HOROVOD_NUM_GROUPS=16:
    assert r["grouping"] == "equal" and r["num_groups"] == 16    # large tensors leave some of
    assert r["groups"] == len(sim.grouped(sizes, num_groups=16)) < 16   # the 16 empty
    assert sim.predict(preset="dgxh100", gpus=64, batch=3200)["groups"] == 1
    # lock-step: slower than one GPU even where communication hides completely
    assert head["lockstep"] > 1 and head["straggler_s"] > 0
    assert head["compute_s"] == pytest.approx(
        (40 / head["images_per_gpu_s_compute"] - head["update_s"]) * head["lockstep"], rel=1e-12)
    assert head["iteration_s"] >= head["compute_s"] + head["update_s"]


