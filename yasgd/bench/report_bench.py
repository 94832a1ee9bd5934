"""Renderers of the generated blocks of README.md, docs/benchmarks.md, docs/data.md,
docs/largebatch.md and docs/design.md (the measured reasons), from the benchmarks'
records (:mod:`yasgd.bench.report`)."""
from __future__ import annotations

from yasgd.bench import common, summary
from yasgd.bench.report_logs import make_train_info
from yasgd.bench.report_util import (Missing, Records, _acc, _hardware, _notes, _range, _rec, _rel,
                                     _wrap, _x)


# -- README ------------------------------------------------------------------------------
def paper_headline(rec: Records) -> str:
    p = rec.json("paper.json")["yasgd"]
    return _wrap(f"In March 2019 Fujitsu Laboratories trained ResNet-50 on ImageNet-1k in "
            f"**{p['time_s']} s** on **{p['gpus']:,} Tesla V100 GPUs** of the ABCI cluster, "
            f"with a mini-batch of **{p['batch']:,}** images, reaching **{p['top1_pct']} % "
            f"top-1** at over **{p['images_per_s'] / 1e6:.2f} M images/s** and "
            f"{p['efficiency_pct']} % scaling efficiency ({p['cite']}).")


def headline_results(rec: Records) -> str:
    opt, ar, tp = rec.bench("optimizer"), rec.bench("allreduce"), rec.bench("throughput")
    dat, lb = rec.bench("data"), rec.bench("largebatch")
    s = {x["batch"]: x for x in lb["setup"]["summary"]}
    big, huge = lb["setup"]["scale"]["big"], lb["setup"]["scale"]["huge"]

    fresh = {(c["batch"], c["against"]): c.get("fresh_pts")
             for c in (lb.get("fresh") or {}).get("comparisons", [])}

    def pts(b: int, k: str) -> str:
        v = s.get(b, {}).get(k)
        f = fresh.get((b, "baseline" if k == "recipe_minus_baseline_pts" else "sgd"))
        return ("pending" if v is None else f"{v:+.2f} pts"
                + ("" if f is None else f" ({f:+.2f})"))
    _, info = make_train_info(rec)
    import yasgd.simulate as sim
    paper = rec.json("paper.json")["yasgd"]
    pr = sim.predict(preset="abci2019", gpus=paper["gpus"], batch=paper["batch"], epochs=90)
    rows = [
        ["LARS step over ResNet-50's 161 tensors: fused vs per-layer", _acc(opt, 0)],
        ["fused LARS vs MXNet's built-in `lars` (its best aggregation)", _acc(opt, 1)],
        ["allreduce of ResNet-50's gradients, 2 ranks: yasgd vs stock Horovod", _acc(ar, 0)],
        ["ResNet-50 images/s, yasgd vs the Horovod/GluonCV loop, 1 rank", _acc(tp, 0)],
        ["the same, 2 ranks (median of paired rounds)", _acc(tp, 1)],
        ["RecordIO loader vs Gluon's `ImageFolderDataset`",
         f"{dat['yasgd_vs_gluon_folder']:.2f}x"],
        [f"large batch in miniature, {big // 1024}K: recipe minus baseline, 3 seeds (3 fresh "
         f"seeds)", pts(big, "recipe_minus_baseline_pts")],
        [f"large batch in miniature, {huge // 1024}K: recipe minus SGD, 3 seeds (3 fresh "
         f"seeds)", pts(huge, "recipe_minus_sgd_pts")],
    ]
    if info.get("acc_pct"):
        rows.append(["`make train` demo (Fashion-MNIST, ResNet-8, batch 4,096): test top-1",
                     f"{info['acc_pct']:.2f} %"])
    rows.append(["scaling model, paper's 2,048 V100: throughput / time vs paper",
                 f"{(pr['images_per_s'] / paper['images_per_s'] - 1) * 100:+.1f} % / "
                 f"{(pr['time_to_train_s'] / paper['time_s'] - 1) * 100:+.1f} %"])
    hw = opt["hardware"]
    return (common.md_table(["what", "measured"], rows, "lr") + "\n\n" + _wrap(
        f"Measured on {hw['cpu']}, {hw['cores']} cores, no GPU; MXNet {hw['mxnet']}, "
        f"Horovod {hw['horovod']}; the scaling model is computed. Details: "
        f"[benchmarks](docs/benchmarks.md), [data](docs/data.md), "
        f"[large batch](docs/largebatch.md), [scaling model](docs/simulate.md)."))


# -- docs/benchmarks.md -------------------------------------------------------------------
def bench_acceptance(rec: Records) -> str:
    rows = summary.acceptance_rows(rec.found())
    return common.md_table(["bench", "criterion", "measured", "verdict"], rows, "llrl")


def bench_optimizer(rec: Records) -> str:
    d = rec.bench("optimizer")
    fused = d["records"][0]
    ref = fused["arm"]
    rows = [[r["arm"], f"{r['median_ms']:.1f}", _range(r), _x(r["median_ms"], fused["median_ms"]),
             f"{r['update_rel_diff_vs_first_arm'] or 0:.0e}"] for r in d["records"]]
    mb = d["setup"]["floats"] * 4 / 1e6
    rows.append([f"reference: one single-threaded np.copyto of the {mb:.0f} MB of weights",
                 f"{d['memcpy_ms']:.1f}", "", _x(d["memcpy_ms"], fused["median_ms"]), ""])
    t = common.md_table(["arm (one step, 161 tensors)", "ms/step (median)", "range (ms)",
                         f"time / {ref}", "update vs first arm (max rel)"], rows, "lrrrr")
    return "\n".join([t, "", common.acceptance_table(d["acceptance"]), ""] + _notes(d["notes"])
                     + ["", _hardware(d["hardware"]), "",
                        f"![bench_optimizer.png]({_rel('bench_optimizer.png')})"])


ALLREDUCE_SETTING = {"horovod-default": "Horovod defaults (no HOROVOD_* set)",
                     "yasgd": "yasgd shipped (jobs/common.sh)"}


def bench_allreduce(rec: Records) -> str:
    d = rec.bench("allreduce")
    rows = [[ALLREDUCE_SETTING.get(r["setting"], r["setting"]), r["way"], f"{r['median_ms']:.1f}",
             _range(r), f"{r['bus_bandwidth_GBps']:.2f}", f"{r['ratio_to_copy_bound']:.1f}x"]
            for r in d["records"]]
    t = common.md_table(["Horovod setting", "way", "ms (median)", "range (ms)",
                         "bus bandwidth (GB/s)", "time / copy bound"], rows, "llrrrr")
    return "\n".join([t, "", common.acceptance_table(d["acceptance"]), ""] + _notes(d["notes"])
                     + ["", _hardware(d["hardware"]), "",
                        f"![bench_allreduce.png]({_rel('bench_allreduce.png')})"])


def bench_overlap(rec: Records) -> str:
    d = rec.bench("overlap")
    over = d["records"][0]["median_ms"]
    rows = []
    for r in d["records"]:
        rel = "" if r["step"].startswith(("compute only", "allreduce only")) else \
            f"{over / r['median_ms']:.2f}"
        rows.append([r["step"], f"{r['median_ms']:.1f}", _range(r), rel])
    t = common.md_table(["2-rank step", "ms (median)", "range (ms)", "t(overlapped) / t(this)"],
                        rows, "lrrr")
    return "\n".join([t, ""] + _notes(d["notes"]) + ["", _hardware(d["hardware"]), "",
                     f"![bench_overlap.png]({_rel('bench_overlap.png')})"])


def bench_init(rec: Records) -> str:
    d = rec.bench("init")
    bcast = d["records"][-1]["median_ms"]
    rows = [[r["arm"], f"{r['median_ms']:.0f}", _range(r), f"{r['median_ms'] / bcast:.2f}",
             "yes" if r["identical_on_all_ranks"] else "**no**"] for r in d["records"]]
    t = common.md_table(["2 ranks, ResNet-50", "ms to identical parameters (median)",
                         "range (ms)", "time / init + broadcast", "identical on all ranks"],
                        rows, "lrrrl")
    return "\n".join([t, ""] + _notes(d["notes"]) + ["", _hardware(d["hardware"]), "",
                     f"![bench_init.png]({_rel('bench_init.png')})"])


def bench_throughput(rec: Records) -> str:
    d = rec.bench("throughput")
    rows = [[r["ranks"], r["loop"], r["horovod_settings"], f"{r['median_step_ms']:.0f}",
             f"{r['images_per_s']:.2f}",
             f"{r['vs_baseline_hybridized']:.2f}x" if r.get("vs_baseline_hybridized") else "",
             f"{r['achieved_gflops']:.0f}",
             f"{r['fraction_of_peak'] * 100:.0f} %" if r.get("fraction_of_peak") else "n/a"]
            for r in d["records"]]
    t = common.md_table(["ranks", "loop", "Horovod settings", "step ms (median)", "images/s",
                         "vs baseline hybridized (same ranks, yasgd's settings)", "GFLOP/s",
                         "of matmul peak"], rows, "rllrrrrr")
    mp = d.get("mixed_precision") or {}
    batch = mp.get("batch", d["setup"]["batch_per_rank"])
    mp_rows = [[k, f"{v['median_ms']:.0f}", f"{batch / (v['median_ms'] / 1e3):.2f}"]
               for k, v in (mp.get("times") or {}).items()]
    out = [t, ""]
    if mp_rows:
        out += ["Mixed precision (yasgd loop, 1 process):", "",
                common.md_table(["1 process, OMP 2", "step ms (median)", "images/s"], mp_rows,
                                "lrr"), ""]
    return "\n".join(out + [common.acceptance_table(d["acceptance"]), ""] + _notes(d["notes"])
                     + ["", _hardware(d["hardware"]), "",
                        f"![bench_throughput.png]({_rel('bench_throughput.png')})"])


def data_loaders(rec: Records) -> str:
    d = rec.bench("data")
    s = d["setup"]
    rows = [[r["loader"], f"{r['images_per_s']:.0f}",
             ", ".join(f"{v:.0f}" for v in r["passes_images_per_s"]), r["note"]]
            for r in d["results"]]
    by = {r["loader"]: r["images_per_s"] for r in d["results"]}
    y = by["yasgd RecordTrainLoader"]
    hw = d["hardware"]
    return "\n".join([
        f"{s['images']:,} real JPEGs ({s['source']}) -> random-resized crop {s['image_size']} px "
        f"+ flip + normalise, NCHW float32, batch {s['batch']}, {s['threads']} threads; median "
        f"of {s['passes']} passes after {s['warmup_passes']} warm-up pass, all loaders in one run.",
        "", common.md_table(["loader", "images/s", "passes (images/s)", "threads"], rows,
                            "lrll"), "",
        f"yasgd's loader decodes and augments {y:,.0f} images/s with {s['threads']} threads: "
        f"{_x(y, by['gluon ImageFolderDataset+DataLoader'])} Gluon's `ImageFolderDataset` + "
        f"`DataLoader` and {_x(y, by['mx.io.ImageRecordIter'])} `mx.io.ImageRecordIter`; with "
        f"one thread it still runs "
        f"{_x(by['yasgd RecordTrainLoader, 1 thread'], by['mx.io.ImageRecordIter'])} "
        f"`ImageRecordIter` (which decodes with one thread in this MXNet build, whatever it is "
        f"asked).", "",
        f"Hardware: {hw['cpu']}, {hw['cores']} cores; Python {hw['python']}, MXNet {hw['mxnet']}, "
        f"NumPy {hw['numpy']}, OpenCV {hw['opencv']}; {hw['platform']}."])


def _groups_way(ar: dict, mb: int) -> str:
    """The allreduce bench's label of yasgd's groups at a budget of ``mb`` MB (it carries the
    number of groups the run made: ``yasgd groups 4 MB (31 groups)``)."""
    prefix = f"yasgd groups {mb} MB ("
    for r in ar["records"]:
        if r["way"].startswith(prefix):
            return r["way"]
    raise Missing(f"no record of yasgd's groups at {mb} MB", ar)


def bench_reading(rec: Records) -> str:
    opt, ar, ov = rec.bench("optimizer"), rec.bench("allreduce"), rec.bench("overlap")
    ini, tp = rec.bench("init"), rec.bench("throughput")
    fused = opt["records"][0]["median_ms"]
    mx_ops = _rec(opt, "arm", "yasgd fused (MXNet operators)")["median_ms"]
    gbps = opt["fused_gb_per_s"][opt["records"][0]["arm"]]
    copy_gbps = 2 * opt["setup"]["floats"] * 4 / (opt["memcpy_ms"] / 1e3) / 1e9

    def a(setting, way):
        return _rec(ar, "way", way, setting=setting)["median_ms"]
    y4 = a("yasgd", _groups_way(ar, 4))
    hvd_def = a("horovod-default", "Horovod per-tensor async (its DistributedTrainer)")
    hvd_y = a("yasgd", "Horovod per-tensor async (its DistributedTrainer)")
    naive = a("horovod-default", "naive loop (per-tensor, each waited)")
    o = {r["step"]: r["median_ms"] for r in ov["records"]}
    ini_r = ini["records"][0]["median_ms"] / ini["records"][-1]["median_ms"]
    bf = tp.get("bf16_speedup")
    t = {r["loop"] + "|" + str(r["ranks"]): r for r in tp["records"]}
    fusedbn = t["yasgd (hybridized, fused BN+ReLU)|1"]["vs_baseline_hybridized"]
    peak = tp["records"][0]["fraction_of_peak"]
    return "\n".join([
        f"- **LARS step.** The fused step takes {fused:.1f} ms: {_acc(opt, 0)} faster than the "
        f"per-layer path and {_acc(opt, 1)} faster than MXNet's built-in `lars`. It moves its "
        f"7 passes over the weights at {gbps:.1f} GB/s, {gbps / copy_gbps:.1f}x the rate of a "
        f"single-threaded memory copy; on MXNet's own operators (the fallback) it takes "
        f"{mx_ops:.0f} ms, most of it the float64 norms the fallback needs to be accurate.",
        f"- **Allreduce.** With the settings yasgd ships, its 4 MiB groups sum ResNet-50's "
        f"gradients in {y4:.1f} ms: {_acc(ar, 0)} faster than Horovod's own trainer under "
        f"Horovod's defaults ({hvd_def:.1f} ms), {_acc(ar, 1)} faster than the naive per-tensor "
        f"loop ({naive:.1f} ms) and within {_acc(ar, 2)} of a memory copy. The gain is the "
        f"settings, not the grouping: under the same settings Horovod's per-tensor path takes "
        f"{hvd_y:.1f} ms, because on 2 ranks of one host the negotiation that static groups "
        f"save is cheap.",
        f"- **Overlap.** None on 2 cores (overlapped "
        f"{o['overlapped (yasgd: groups issued right after backward)']:.1f} ms, `waitall` first "
        f"{o['waitall, then the same groups']:.1f} ms, one allreduce after `waitall` "
        f"{o['waitall, then one allreduce of all gradients']:.1f} ms): communication and "
        f"compute share the two cores.",
        f"- **Initialization.** Parallel init with its agreement check is level with init + "
        f"broadcast on 2 ranks ({ini_r:.2f}x the time); its gain grows with the rank count.",
        f"- **Throughput.** yasgd's step is {_acc(tp, 0)} the examples' loop at 1 rank "
        f"({fusedbn:.2f}x with fused BN+ReLU), {_acc(tp, 1)} at 2 ranks in the same launch and "
        f"{_acc(tp, 2)} against the loop as users run it (Horovod's defaults); it reaches "
        f"{peak * 100:.0f} % of the machine's matmul peak. bf16 AMP trains at "
        + (f"{bf:.2f}x" if bf else "n/a") + " the fp32 speed (no AMX in MXNet's oneDNN)."])


# -- docs/design.md: the measured reasons ------------------------------------------------
def reason_hybridize(rec: Records) -> str:
    tp = rec.bench("throughput")
    hyb = _rec(tp, "loop", "yasgd (hybridized, its default for ResNet-50)", ranks=1)
    imp = _rec(tp, "loop", "yasgd (imperative)", ranks=1)
    note = next((n for n in tp["notes"] if n.startswith("Hybridized vs imperative")), "")
    return (f"ResNet-50 at 224 px, 1 rank: hybridized {hyb['median_step_ms']:.0f} ms a step, "
            f"imperative {imp['median_step_ms']:.0f} ms "
            f"({_x(imp['median_step_ms'], hyb['median_step_ms'])} the time; "
            f"`make bench-throughput`). The benchmark's own note: \"{note}\"")


def reason_guarded(rec: Records) -> str:
    opt = rec.bench("optimizer")
    g, u = opt["records"][0], opt["records"][1]
    gb = opt["fused_gb_per_s"]
    return (f"A fused LARS step over ResNet-50's 161 tensors takes {g['median_ms']:.1f} ms on "
            f"guarded weights written in place and {u['median_ms']:.1f} ms when MXNet writes "
            f"the weights in a second pass ({_x(u['median_ms'], g['median_ms'])}; "
            f"{gb[g['arm']]:.1f} against {gb[u['arm']]:.1f} GB/s; `make bench-optimizer`), "
            f"and every arm computes the same update bits.")


def reason_cycle(rec: Records) -> str:
    ar = rec.bench("allreduce")

    def a(setting, way):
        return _rec(ar, "way", way, setting=setting)["median_ms"]
    hv = "Horovod per-tensor async (its DistributedTrainer)"
    nv = "naive loop (per-tensor, each waited)"
    return (f"Summing ResNet-50's gradients over 2 CPU ranks (`make bench-allreduce`): "
            f"Horovod's own trainer takes {a('horovod-default', hv):.1f} ms under Horovod's "
            f"defaults and {a('yasgd', hv):.1f} ms under the settings of `jobs/common.sh` "
            f"(fusion buffer off, `HOROVOD_CYCLE_TIME=5`); yasgd's 4 MiB groups take "
            f"{a('yasgd', _groups_way(ar, 4)):.1f} ms. The price of a long cycle "
            f"is paid by code that waits for every tensor: the naive per-tensor loop takes "
            f"{a('horovod-default', nv):.1f} ms under the defaults and {a('yasgd', nv):.1f} ms "
            f"with the long cycle.")


def reason_cma(rec: Records) -> str:
    ar = rec.bench("allreduce")
    y = _rec(ar, "way", _groups_way(ar, 4), setting="yasgd")
    copy = _rec(ar, "way", "memory copy of 102 MB (bound)", setting="yasgd")
    return (f"With single-copy shared memory on (this host allows it), yasgd's 4 MiB groups "
            f"sum ResNet-50's gradients over 2 ranks in {y['median_ms']:.1f} ms, "
            f"{y['bus_bandwidth_GBps']:.2f} GB/s of bus bandwidth, {y['ratio_to_copy_bound']:.1f}x "
            f"a plain memory copy of the same bytes ({copy['median_ms']:.1f} ms; "
            f"`make bench-allreduce`).")
