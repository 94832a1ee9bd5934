"""Renderers of the generated blocks of docs/simulate.md: the scaling model is pure
Python and deterministic, so its tables are computed at generation time
(:mod:`yasgd.bench.report`)."""
from __future__ import annotations

import math
from dataclasses import replace

from yasgd.bench import common
from yasgd.bench.report_util import Records, _wrap


# -- docs/simulate.md ---------------------------------------------------------------------
def _sim():
    import yasgd.simulate as sim
    return sim


def simulate_abci2019(rec: Records) -> str:
    p = rec.json("paper.json")["yasgd"]
    return "```\n" + _sim().report(preset="abci2019", gpus=p["gpus"], batch=p["batch"],
                                   epochs=90) + "\n```"


def simulate_abci3(rec: Records) -> str:
    p = rec.json("paper.json")["yasgd"]
    return "```\n" + _sim().report(preset="abci3", gpus=p["gpus"], batch=p["batch"],
                                   epochs=90) + "\n```"


def simulate_inputs(rec: Records) -> str:
    from yasgd.simulate import presets
    sim, p = _sim(), rec.json("paper.json")["yasgd"]
    pre = sim.PRESETS["abci2019"]
    b = p["batch"] // p["gpus"]
    s = pre.single_node[0]
    r = sim.predict(preset="abci2019", gpus=p["gpus"], batch=p["batch"], epochs=90)
    rows = [["per-GPU batch b", f"{b}"],
            [f"shape h (least-squares line of the fp16 V100 inference table, "
             f"{presets.SHAPE_H_INFER:.2f}, x {presets.TRAIN_TO_INFER_H:.2f} training over "
             f"inference h of MXNet's V100 tables)", f"{pre.shape_h:.2f} images"],
            [f"per-image time c (single-node log, MLPerf {s.mlperf_round}, {s.gpus} GPUs x "
             f"{s.per_gpu_batch}, {s.iteration_s * 1e3:.2f} ms per iteration)",
             f"{sim.per_image_s(pre) * 1e3:.4f} ms"],
            [f"X({b}) = b / t(b), one GPU alone", f"{sim.per_gpu_throughput(pre, b):,.0f} img/s"],
            [f"step-time jitter cv at b = {b}", f"{r['step_cv'] * 100:.1f} %"],
            ["GPU-to-GPU spread s", f"{pre.gpu_spread * 100:.0f} %"],
            [f"lock-step factor L({p['gpus']:,})", f"{r['lockstep']:.3f}"],
            ["exposed communication of the tree", f"{r['exposed_comm_s'] * 1e3:.2f} ms of "
             f"{r['iteration_s'] * 1e3:.2f} ms"]]
    return common.md_table(["model input at the paper's point (abci2019)", "value"], rows, "lr")


def simulate_single_node(rec: Records) -> str:
    """Each preset run on the one node whose MLPerf log set its per-GPU line (in-sample)."""
    sim = _sim()
    rows = []
    for name, pre in sim.PRESETS.items():
        for s in pre.single_node:
            r = sim.predict(preset=name, gpus=s.gpus, batch=s.gpus * s.per_gpu_batch,
                            mlperf_round=s.mlperf_round)
            rows.append([name, f"{s.mlperf_round}", f"`{s.source.split(' ', 1)[1]}`",
                         f"{s.gpus} x {s.per_gpu_batch}", f"{s.iteration_s * 1e3:.2f}",
                         f"{r['iteration_s'] * 1e3:.2f}",
                         f"{(r['iteration_s'] / s.iteration_s - 1) * 100:+.1f} %"])
    return common.md_table(["preset", "round", "single-node log", "GPUs x b", "log ms",
                            "model ms", "in-sample error"], rows, "lllrrrr")



def simulate_validation(rec: Records) -> str:
    """The validation table, recomputed from the presets; the published side and the sources
    from mlperf_logs.json."""
    from yasgd.simulate import validate
    logs = {m["case"]: m for m in rec.json("mlperf_logs.json")["multi_node"]}
    rows, notes, rs = [], [], validate.rows()
    for r in rs:
        m = logs.get(r["case"])
        rows.append([r["case"] + (" (held out)" if r["held_out"] else ""), r["preset"],
                     f"{r['gpus']:,}", f"{r['batch']:,}",
                     f"{r['epochs']:g}", f"{r['images_per_s'] / 1e6:.3f} M",
                     f"{r['model_images_per_s'] / 1e6:.3f} M",
                     f"{r['err_images_per_s'] * 100:+.1f} %", f"{r['time_s']:.2f} s",
                     f"{r['model_time_s']:.2f} s", f"{r['err_time'] * 100:+.1f} %"])
        if m:
            why = validate.EXPLANATIONS.get(r["case"], m.get("explanation"))
            over = abs(r["err_images_per_s"]) > .15 or abs(r["err_time"]) > .15
            first = [x["first_epoch_s"] - x["median_epoch_s"] for x in m["runs"]]
            start = [x["run_start_to_first_epoch_s"] for x in m["runs"]]
            notes.append(
                f"- {r['case']}: `{m['repository']}` `{m['results']}` "
                f"({', '.join(m['runs_used'])} used for the epochs; score over "
                f"{', '.join(m['score_runs'])}); median epoch {m['median_epoch_s']} s of "
                f"{m['steps_per_epoch']} steps, {m['per_gpu_batch']} images per GPU, "
                f"{m['epochs']:g} epochs and {m['evals']:g} evaluations; the log spends "
                f"{sorted(start)[2]:.1f} s from run_start to the first epoch and its first "
                f"epoch is {sorted(first)[2]:.1f} s above the median one (the model adds the "
                f"start-up and the relative first-epoch excess of its single-node log). "
                + (f"Per-GPU line from the MLPerf {r['software_round']} single-node log (the "
                   f"run's software generation). " if r["software_round"] != r["mlperf_round"]
                   else "")
                + (f"{m['note']}. " if m.get("note") else "")
                + ("Held out: recorded after the model's constants and method were fixed. "
                   if r["held_out"] else "")
                + (f"Beyond 15 %: {why}." if over and why else ""))
        elif abs(r["err_images_per_s"]) > .15 or abs(r["err_time"]) > .15:
            notes.append(f"- {r['case']}: `{r['source']}`. Beyond 15 %: "
                         f"{validate.EXPLANATIONS.get(r['case'], 'not explained')}.")
    held = [r for r in rs if r["held_out"]]
    return (common.md_table(["case", "preset", "GPUs", "batch", "epochs", "images/s", "model",
                             "error", "time", "model", "error"], rows, "llrrrrrrrrr")
            + "\n\n" + _over(rs, "cases")
            + (" " + _over(held, "held-out cases alone (recorded after the model's constants "
                               "and method were fixed)") if held else "")
            + "\n\n" + _readings() + "\n\n" + "\n".join(notes))


def _over(rs, what: str) -> str:
    """'Over the N <what>: |error| ...' of the validation summary of ``rs``."""
    from yasgd.simulate import validate
    s = validate.summary(rs)
    return (f"Over the {s['cases']} {what}: |error| on images/s median "
            f"{s['median_images_per_s'] * 100:.1f} %, worst {s['worst_images_per_s'] * 100:.1f} %;"
            f" on time to train median {s['median_time'] * 100:.1f} %, worst "
            f"{s['worst_time'] * 100:.1f} %; {s['within_15']} of {s['cases']} within 15 % on "
            f"both.")


def _readings() -> str:
    """The summary under each published reading of the training-to-inference ratio of h."""
    from yasgd.simulate import validate
    parts = [f"{r['reading']} ({r['ratio']:.2f}): median {r['median_images_per_s'] * 100:.1f} % "
             f"/ {r['median_time'] * 100:.1f} %, worst {r['worst_images_per_s'] * 100:.1f} % / "
             f"{r['worst_time'] * 100:.1f} %, {r['within_15']} of {r['cases']} within 15 %"
             for r in validate.readings_of_the_ratio()]
    return ("The same table under each reading of the training-to-inference ratio of h "
            "(|error| on images/s / on time to train): " + "; ".join(parts) + ".")


def simulate_tail(rec: Records) -> str:
    """The what-if of an exponential jitter tail through the published p90 and p99."""
    sim, pj = _sim(), rec.json("paper.json")
    p, q = pj["yasgd"], pj["v100_latency_p99_ms"]
    base = sim.PRESETS["abci2019"]
    b, n = p["batch"] // p["gpus"], p["gpus"]
    lat = {row[0]: row for row in base.latency_curve}
    lo, hi = max(k for k in lat if k <= b), min(k for k in lat if k >= b)
    w = (b - lo) / (hi - lo)

    def at(i):
        return lat[lo][i] + (lat[hi][i] - lat[lo][i]) * w
    p99 = q[str(lo)] + (q[str(hi)] - q[str(lo)]) * w
    mean, p90 = at(1), at(3)
    # E[max of n] of an exponential tail through p90 and p99 (Euler's constant for the mean)
    tail = (p90 + (p99 - p90) / math.log(10) * (math.log(n / 10) + 0.5772)) / mean - 1
    normal = sim.lockstep_factor(n, sim.step_cv(base.latency_curve, b), 0.0) - 1
    p99_only = p99 / mean - 1
    scale = tail / normal
    sim_presets = dict(sim.PRESETS)
    try:
        sim.PRESETS["_tail"] = replace(base, latency_curve=tuple(
            (bb, m, p50, p50 + (qq - p50) * scale) for bb, m, p50, qq in base.latency_curve))
        r = sim.predict(preset="_tail", gpus=n, batch=p["batch"], epochs=90)
    finally:
        sim.PRESETS.clear()
        sim.PRESETS.update(sim_presets)
    return (f"At {n:,} ranks the normal body gives {normal * 100:+.1f} % on the slowest rank's "
            f"step, the published p99 itself {p99_only * 100:+.1f} %; an exponential tail "
            f"through the published p90 and p99, extrapolated to the slowest of {n:,}, gives "
            f"{tail * 100:+.1f} %, which moves the prediction to "
            f"{r['images_per_s'] / 1e6:.3f} M images/s "
            f"({(r['images_per_s'] / p['images_per_s'] - 1) * 100:+.1f} %) and "
            f"{r['time_to_train_s']:.1f} s ({(r['time_to_train_s'] / p['time_s'] - 1) * 100:+.1f} "
            f"%). It is not the default: it extrapolates far beyond the last published "
            f"percentile.")


def simulate_sweeps(rec: Records) -> str:
    from yasgd.simulate import plot as sp
    sim, p = _sim(), rec.json("paper.json")["yasgd"]
    sw = sp.sweeps(preset="abci2019", gpus=p["gpus"], batch=p["batch"], epochs=90,
                   images_per_gpu_s=None, budget_bytes=None)
    idx = [i for i, bb in enumerate(sw["budgets"]) if (bb >> 10) & ((bb >> 10) - 1) == 0
           and int(math.log2(bb >> 16)) % 2 == 0]
    rows = [[alg] + [f"{sw['budget'][alg][i] * 100:.0f} %" for i in idx] for alg in sim.ALGORITHMS]
    t = common.md_table(["budget"] + [sp._bytes(sw["budgets"][i]) for i in idx], rows,
                        "l" + "r" * len(idx))
    g = sw["gpu_counts"]

    def eff(alg, n):
        return f"{sw['gpus'][alg][g.index(n)] * 100:.0f} %"
    four = sim.predict(preset="abci2019", gpus=p["gpus"], batch=p["batch"], epochs=90,
                       budget_bytes=4 << 20)
    return (t + "\n\n" + f"At 4 MiB yasgd's grouping gives {four['efficiency'] * 100:.0f} % "
            f"({four['images_per_s'] / 1e6:.3f} M images/s, {four['time_to_train_s']:.1f} s). "
            f"Against GPU count ({sw['per_gpu_batch']} images/GPU, the preset's groups) the tree "
            f"falls from {eff('hierarchical_tree', 2)} at 2 GPUs to "
            f"{eff('hierarchical_tree', 32)} at 32, {eff('hierarchical_tree', 512)} at 512 and "
            f"{eff('hierarchical_tree', 4096)} at 4,096; the hierarchical ring holds "
            f"{eff('hierarchical', 256)} at 256 GPUs and falls to {eff('hierarchical', 2048)} at "
            f"2,048 and {eff('hierarchical', 4096)} at 4,096.")


def simulate_constants(rec: Records) -> str:
    """Every preset's constants with their sources, from ``Preset.sources`` (the model's own)."""
    sim, out = _sim(), []
    for name, pre in sim.PRESETS.items():
        t = pre.topo
        head = (f"**{name}**: {pre.title}. NVLink {t.nvlink_bw / 1e9:g} GB/s per GPU one "
                f"direction, {t.hcas_per_node} x {t.hca_bw / 1e9:g} GB/s InfiniBand per node; "
                f"NCCL {t.nvlink_latency * 1e6:g} / {t.ib_latency * 1e6:g} / "
                f"{t.ib_tree_latency * 1e6:g} us per NVLink step / IB ring step / tree level, "
                f"{t.call_latency * 1e6:g} us per call; HBM {pre.hbm_bw / 1e9:,.0f} GB/s; "
                f"c = {sim.per_image_s(pre) * 1e3:.4f} ms per image, h = {pre.shape_h:.2f}.")
        out.append(_wrap(head))
        out.append("")
        out.append(common.md_table(["constant", "source"], [[w, s] for w, s in pre.sources],
                                   "ll"))
        out.append("")
    return "\n".join(out).rstrip()


def prior_work(rec: Records) -> str:
    pj = rec.json("paper.json")
    rows = [[w["work"], w["batch"], w["hardware"], w["framework"], w["time"], w["top1"]]
            for w in pj["prior_work"]]
    p = pj["yasgd"]
    rows.append([f"**{c}**" for c in ("YASGD 2019", f"{p['batch']:,}", f"{p['gpus']:,} V100",
                                      "MXNet", f"{p['time_s']} s", f"{p['top1_pct']} %")])
    sim = _sim()
    t = sim.predict(preset="abci2019", gpus=p["gpus"], batch=p["batch"], epochs=90,
                    algorithm="hierarchical_tree")
    ring = sim.predict(preset="abci2019", gpus=p["gpus"], batch=p["batch"], epochs=90,
                       algorithm="hierarchical")
    rows.append(["yasgd model, abci2019 preset", f"{p['batch']:,}",
                 f"{p['gpus']:,} V100 (modelled)", "", f"{t['time_to_train_s']:.1f} s (tree) / "
                 f"{ring['time_to_train_s']:.1f} s (ring)", "n/a"])
    return common.md_table(["work", "batch", "hardware", "framework", "time", "top-1"], rows,
                           "llllll")
