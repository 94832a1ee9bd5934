"""The report of ``yasgd bench throughput``: how the 2-rank launches of one Horovod setting
are combined (:func:`faster_launch`, :func:`paired_ratios`) and the table, acceptance lines,
notes and plot (:func:`report`). Per-rank batch, BN momentum, groups and dtype in the notes
are the ones the workers read from the runs that were timed (``runs`` in each result).
"""
from __future__ import annotations

import os
import statistics
from typing import List

from yasgd import outputs
from yasgd.bench import common
from yasgd.bench.throughput_arms import (B_HYB, BF16, FP32, GFLOP_PER_IMAGE, IMAGE, Y_HYB)

NAME = "throughput"
PLOT = f"bench_{NAME}.png"


#: 2-rank launches per Horovod setting (full mode), alternating: on a shared machine a whole
#: launch now and then runs every loop markedly slower, which a comparison across launches
#: cannot tell from the loops; the faster launch of each setting gives the table (all are
#: reported). yasgd against the baseline in the same launch is the median over every round of
#: every launch of the two loops' step times in that round (paired_ratio): the median of a few
#: single steps of one launch moves between launches by more than the difference measured.
LAUNCHES = 3


def faster_launch(results: List[dict]) -> dict:
    """The launch whose baseline loop (present in every 2-rank launch) stepped fastest, as a
    whole (so that "same launch" ratios stay within one launch), with every launch's medians
    per loop under ``launch_medians_ms``."""
    best = min(results, key=lambda r: r["times"][B_HYB]["median_ms"])
    out = dict(best, launches=len(results))
    out["launch_medians_ms"] = {loop: [r["times"][loop]["median_ms"] for r in results
                                       if loop in r["times"]] for loop in best["times"]}
    ratios = paired_ratios(results)
    if ratios:
        out["paired_ratios"] = ratios
        out["paired_ratio"] = round(statistics.median(ratios), 4)
    return out


def paired_ratios(results: List[dict], loop: str = Y_HYB, ref: str = B_HYB) -> List[float]:
    """ref's step time / loop's step time, round by round (both ran in the same interleaved
    round of the same launch), pooled over every launch: > 1 where ``loop`` is faster."""
    out = []
    for r in results:
        a, b = r["times"].get(loop, {}), r["times"].get(ref, {})
        out += [round(y / x, 4) for x, y in zip(a.get("samples_ms", ()), b.get("samples_ms", ()))
                if x > 0]
    return out


#: What each record states about its run, as the worker read it from the run's objects.
_FACTS = ("bn_momentum", "groups", "dtype", "input_shape", "hybridized", "optimizer", "steps")


def _runs_note(res: dict) -> str:
    """Each timed run as it ran: what its worker read from the run's objects."""
    parts = []
    for mode, label in (("single", "1 rank"), ("ranks", "2 ranks")):
        for loop, f in (res[mode].get("runs") or {}).items():
            groups = f", {f['groups']} allreduce groups" if f.get("groups") is not None else ""
            shape = "x".join(str(d) for d in f.get("input_shape") or ()) or "n/a"
            parts.append(f"{loop} at {label}: input {shape}, {f.get('dtype')} parameters, BN "
                         f"momentum {f.get('bn_momentum')}{groups}, {f.get('optimizer')} "
                         f"through {f.get('trainer')}")
    if not parts:
        return "The runs' own record of themselves is missing from this result."
    return ("The runs as they held it after the timing (the network's BatchNorm layers, the "
            "parameters, the trainer): " + "; ".join(parts) + ".")


def _paired_note(ranks: dict, launch_ratio: float) -> str:
    pr = sorted(ranks.get("paired_ratios", ()))
    if not pr:
        return ""
    q = statistics.quantiles(pr, n=4, method="inclusive") if len(pr) > 1 else [pr[0]] * 3
    return (f" yasgd vs the baseline at 2 ranks, same launch: median of {len(pr)} paired rounds "
            f"(baseline step / yasgd step, every launch) {ranks['paired_ratio']:.3f}x, quartiles "
            f"{q[0]:.3f}-{q[2]:.3f}, yasgd faster in {sum(x > 1 for x in pr)} of {len(pr)}; the "
            f"ratio of the medians of the table's launch alone: "
            f"{launch_ratio:.3f}x.")


def report(res, out_dir, quick, batch, repeats, warmup, hw=None) -> dict:
    peak_all = dict(res["single"].get("peak_gflops", {}))
    peak = max(peak_all.values()) if peak_all else None
    peak_name = max(peak_all, key=peak_all.get) if peak_all else "n/a"
    setting = {"single": "n/a (1 rank)", "ranks": "yasgd's (jobs/common.sh)",
               "ranks-default": "Horovod defaults"}
    records, rows = [], []
    ips = {}
    for mode in ("single", "ranks", "ranks-default"):
        r = res[mode]
        for loop, t in r["times"].items():
            ms = t["median_ms"]
            ran = (r.get("runs") or {}).get(loop, {})
            per_rank = ran.get("per_rank_batch", batch)
            img_s = r["size"] * per_rank / (ms / 1e3)
            gflops = img_s * GFLOP_PER_IMAGE
            ips[(mode, loop)] = img_s
            frac = gflops / peak if peak else None
            records.append({"ranks": r["size"], "run": mode, "loop": loop,
                            "batch_per_rank": per_rank,
                            "omp_num_threads": r["omp_num_threads"], "median_step_ms": ms,
                            "samples_ms": t["samples_ms"], "images_per_s": round(img_s, 2),
                            "achieved_gflops": round(gflops, 1),
                            "fraction_of_peak": None if frac is None else round(frac, 3),
                            "horovod_settings": setting[mode], "max_rss_gib": r.get("max_rss_gib"),
                            **{k: ran[k] for k in _FACTS if k in ran}})
    for rec in records:
        ref = ips.get(("ranks" if rec["run"] != "single" else "single", B_HYB))
        rec["vs_baseline_hybridized"] = round(rec["images_per_s"] / ref, 2) if ref else None
        rows.append([rec["ranks"], rec["loop"], rec["horovod_settings"], f"{rec['median_step_ms']:.0f}",
                     f"{rec['images_per_s']:.2f}", f"{rec['vs_baseline_hybridized']:.2f}x"
                     if rec["vs_baseline_hybridized"] else "", f"{rec['achieved_gflops']:.0f}",
                     f"{rec['fraction_of_peak'] * 100:.0f} %" if rec["fraction_of_peak"] else "n/a"])
    table = common.md_table(["ranks", "loop", "Horovod settings", "step ms (median)", "images/s",
                             "vs baseline hybridized (same ranks, yasgd's settings)",
                             "GFLOP/s", "of matmul peak"],
                            rows, "rllrrrrr")
    # mixed precision
    bf = res["bf16"]
    mp_rows = []
    for loop, t in bf.get("times", {}).items():
        per_rank = (bf.get("runs") or {}).get(loop, {}).get("per_rank_batch", batch)
        img_s = per_rank / (t["median_ms"] / 1e3)
        mp_rows.append([loop, f"{t['median_ms']:.0f}", f"{img_s:.2f}"])
    if bf.get("bf16_ok") and FP32 in bf["times"]:
        speed = bf["times"][FP32]["median_ms"] / bf["times"][BF16]["median_ms"]
        mp_note = (f"bf16 AMP (mx.contrib.amp.init(target_dtype='bfloat16'): Convolution and "
                   f"FullyConnected in bf16 via oneDNN, BN etc. fp32) trains at {speed:.2f}x "
                   f"the fp32 speed on this CPU (avx512_bf16: {bf.get('cpu_avx512_bf16')}, "
                   f"amx_bf16: {bf.get('cpu_amx_bf16')}).")
    else:
        speed = None
        mp_note = ("bf16 AMP training did not run here: " + str(bf.get("bf16_error", "no result"))
                   + f" (CPU avx512_bf16: {bf.get('cpu_avx512_bf16')}).")
    dnn = bf.get("onednn") or {}
    if dnn:
        amx = "AMX" in dnn.get("isa", "")
        mp_note += (f" MXNet's bundled oneDNN {dnn.get('onednn', '?')} dispatches here to "
                    f"\"{dnn.get('isa', '?')}\" (bf16 inner product: "
                    f"{dnn.get('bf16_inner_product', '?')})"
                    + (": AMX is available to it." if amx else
                       ": it does not use the CPU's AMX tiles."))
    if bf.get("peak_gflops"):
        mp_note += " bf16 matmul: " + ", ".join(f"{k}: {v:.0f} GFLOP/s"
                                                for k, v in bf["peak_gflops"].items()) + "."
    mp_table = common.md_table(["1 process, OMP 2", "step ms (median)", "images/s"], mp_rows, "lrr")

    def r(mode, loop):
        return ips.get((mode, loop))
    launch_ratio = (r("ranks", Y_HYB) or 0) / r("ranks", B_HYB)   # one launch's medians
    acc = [common.acceptance("1 rank: yasgd (its default, hybridized) images/s >= baseline "
                             "(hybridized, as the examples)",
                             (r("single", Y_HYB) or 0) / r("single", B_HYB), 1.0),
           common.acceptance("2 ranks: yasgd (its default) images/s >= baseline (hybridized), "
                             "same launch: median over every round of every launch of the "
                             "baseline's step / yasgd's step in that round",
                             res["ranks"].get("paired_ratio", launch_ratio), 1.0),
           common.acceptance("2 ranks: yasgd (yasgd's settings) >= baseline as users run it "
                             "(Horovod defaults)",
                             (r("ranks", Y_HYB) or 0) / r("ranks-default", B_HYB), 1.0)]
    best_y1 = max(v for (m, k), v in ips.items() if m == "single" and k.startswith("yasgd"))
    notes = [
        f"Synthetic {IMAGE} px data, 1,000 classes, batch {batch} per rank; 1 rank: one "
        f"process with OMP_NUM_THREADS=2; 2 ranks: mpirun, OMP_NUM_THREADS=1 each. Median of "
        f"{repeats} interleaved rounds after {warmup} warm-up round(s) (graph builds and first "
        f"allocations excluded); 2 ranks: the slower rank's step; images/s = ranks x batch / step.",
        "2 ranks: " + ("; ".join(
            f"{setting[m]}: {res[m].get('launches', 1)} launch(es), alternating, the one whose "
            f"baseline stepped fastest counts (medians per launch, ms: " + ", ".join(
                f"{loop} " + " / ".join(f"{v:.0f}" for v in vals)
                for loop, vals in res[m].get("launch_medians_ms", {}).items()) + ")"
            for m in ("ranks", "ranks-default"))) + "." + _paired_note(res["ranks"], launch_ratio),
        f"Matrix-multiply peak through MXNet (1 process, OMP 2): {peak_name} = {common.fmt(peak, 0)} "
        f"GFLOP/s (all: " + ", ".join(f"{k} {v:.0f}" for k, v in peak_all.items()) + "). "
        f"Achieved = images/s x {GFLOP_PER_IMAGE:.1f} GFLOP (3 x 4.09 GMAC x 2); yasgd's best at "
        f"1 rank: {best_y1:.2f} images/s = {best_y1 * GFLOP_PER_IMAGE:.0f} GFLOP/s"
        + (f" = {best_y1 * GFLOP_PER_IMAGE / peak * 100:.0f} % of the peak." if peak else "."),
        "Hybridized vs imperative: yasgd's train.hybridize: auto hybridizes the ImageNet "
        "ResNets (ResNet-50: the rows above) and keeps the CIFAR-style resnet<6n+2> "
        "imperative: for those small networks MXNet 1.9.1's CachedOp runs some backward "
        "operators (BatchNorm, Pooling) off the oneDNN path on this CPU, 2-3x slower.",
        mp_note,
        "fp16 on CPU: MXNet 1.9.1 has no fp16 Convolution/BatchNorm training kernels on CPU, "
        "so fp16 + fp32 master weights + dynamic loss scaling (mx.contrib.amp with "
        "target_dtype='float16', yasgd's model.dtype: float16 + multi_precision LARS) is for "
        "GPUs only; not measured here.",
    ]
    notes.insert(1, _runs_note(res))
    full_table = table + "\n\nMixed precision (yasgd loop, 1 process):\n\n" + mp_table
    backends = sorted({str(res[m].get("ops_backend")) for m in ("single", "ranks")})
    notes.insert(1, f"yasgd.ops backend of the LARS fused step: {', '.join(backends)}"
                 + (" (YASGD_OPS set by the caller)" if os.environ.get("YASGD_OPS") else "") + ".")
    with outputs.together():
        plot = common.bar_chart(os.path.join(out_dir, PLOT),
                                [f"{rec['ranks']}r {rec['loop']} [{rec['horovod_settings']}]"
                                 for rec in records], [rec["images_per_s"] for rec in records],
                                "images/s (median step)", f"ResNet-50 training, {IMAGE} px, batch "
                                f"{batch}/rank" + (" (--quick)" if quick else ""), annotate="{:.2f}",
                                colors=["#55A868" if rec["loop"].startswith("yasgd") else "#4C72B0"
                                        for rec in records])
        common.write_results(out_dir, NAME, records, full_table, notes=notes,
                             title="ResNet-50 training throughput (yasgd bench throughput)",
                             setup={"image": IMAGE, "batch_per_rank": batch, "repeats": repeats,
                                    "warmup": warmup, "statistic": "median",
                                    "gflop_per_image": GFLOP_PER_IMAGE},
                             quick=quick, acceptance_lines=acc, plots=[plot],
                             extra={"peak_gflops": peak_all, "peak": peak, "mixed_precision": bf,
                                    "bf16_speedup": speed},
                             hw=hw or common.hardware({"omp_num_threads": "2 (1 rank) / 1 per rank (2 ranks)"}))
    common.say(full_table)
    common.say(common.acceptance_table(acc))
    for n in notes[2:5] + notes[6:7]:   # runs, launches, matmul peak, mixed precision
        common.say(n)
    return {"records": records, "acceptance": acc}


