"""``python -m yasgd.bench.report [--check] [--results DIR]``: every measured figure of the
README and of ``docs/*.md``, written from the recorded results (the last step of ``make bench``).

A generated block in a Markdown file is::

    <!-- yasgd:begin NAME -->
    ... (written by this module; edits are overwritten) ...
    <!-- yasgd:end NAME -->

where NAME selects a rendering function of :data:`RENDERERS`. Inputs, all in the results
folder (``--results``, default ``examples/results``; a file missing there is read from
``examples/results``):

* ``bench_*.json`` -- what ``make bench`` recorded (tables, acceptance lines, notes);
* ``paper.json`` -- the published figures the documents quote (the paper, the MLPerf v0.6
  log of the same team, published inputs of the scaling model);
* ``make_train.log`` / ``make_test.log`` -- the recorded output of the README's two commands;
* the scaling model itself: :mod:`yasgd.simulate` is pure Python and deterministic, so its
  tables are computed here, at generation time, never copied.

``--check`` rewrites nothing and exits 1 naming every block that differs from what the
records give (``tests/unit/test_docs.py`` does the same in memory).
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import os
import re
import sys
import textwrap
from dataclasses import replace
from typing import Callable, Dict, List, Optional, Tuple

from yasgd.bench import common, summary

REPO = common.REPO_ROOT
DEFAULT_RESULTS = os.path.join(REPO, "examples", "results")
#: The Markdown files that may hold generated blocks (relative to the repository).
DOC_GLOBS = ("README.md", "docs/*.md")
BEGIN = re.compile(r"<!-- yasgd:begin ([a-z0-9-]+) -->")
BLOCK = re.compile(r"(<!-- yasgd:begin ([a-z0-9-]+) -->\n)(.*?)(<!-- yasgd:end \2 -->)", re.S)


class Records:
    """The recorded results, loaded on first use."""

    def __init__(self, results_dir: str = DEFAULT_RESULTS):
        self.dir = results_dir
        self._cache: Dict[str, object] = {}

    def path(self, name: str) -> str:
        p = os.path.join(self.dir, name)
        return p if os.path.exists(p) else os.path.join(DEFAULT_RESULTS, name)

    def json(self, name: str) -> dict:
        if name not in self._cache:
            with open(self.path(name)) as f:
                self._cache[name] = json.load(f)
        return self._cache[name]

    def bench(self, name: str) -> dict:
        return self.json(f"bench_{name}.json")

    def text(self, name: str) -> Optional[str]:
        p = self.path(name)
        if not os.path.exists(p):
            return None
        with open(p) as f:
            return f.read()

    def found(self) -> Dict[str, Dict[str, object]]:
        """summary.collect() of the results folder (bench name -> json/md/pngs)."""
        if "_found" not in self._cache:
            self._cache["_found"] = summary.collect(self.dir)
        return self._cache["_found"]


# -- helpers -----------------------------------------------------------------------------
def _rel(name: str) -> str:
    """A results file as the documents link it (docs/ sit one level down)."""
    return f"../examples/results/{name}"


def _hardware(hw: dict) -> str:
    """common.hardware_line without the git revision (a record states its data, not a build)."""
    return common.hardware_line(dict(hw, git=None))


def _notes(notes: List[str], skip: Tuple[str, ...] = ()) -> List[str]:
    return [f"- {n}" for n in notes if not any(s in n for s in skip)]


def _acc(d: dict, i: int) -> str:
    a = d["acceptance"][i]
    return f"{common.acceptance_value(a)}{a.get('unit', '')}"


def _wrap(text: str, width: int = 96) -> str:
    """Prose for the README, whose lines stay within 100 characters."""
    glued = _UNIT_SPACE.sub(lambda m: m.group(1) + "\0" + m.group(2), text)
    return textwrap.fill(glued, width, break_on_hyphens=False,
                         break_long_words=False).replace("\0", " ")


#: a number and its unit stay on one line
_UNIT_SPACE = re.compile(r"(\d) (%|ms|s|min|h|img/s|images/s|GB/s|MB|M|pts)(?![\w/])")


def _fold(line: str, width: int = 96) -> List[str]:
    """A recorded output line longer than the README allows, folded with a trailing ``\\``."""
    out = []
    while len(line) > width:
        cut = line.rfind(" ", 0, width)
        cut = cut if cut > 0 else width
        out.append(line[:cut] + " \\")
        line = "    " + line[cut:].lstrip()
    return out + [line]


def _rec(d: dict, key: str, value: str, **match) -> dict:
    for r in d["records"]:
        if r.get(key) == value and all(r.get(k) == v for k, v in match.items()):
            return r
    raise KeyError(f"{d.get('bench')}: no record with {key}={value!r} {match}")


def _range(r: dict) -> str:
    s = r["samples_ms"]
    return f"{min(s):.0f}-{max(s):.0f}"


def _x(a: float, b: float, digits: int = 2) -> str:
    return f"{a / b:.{digits}f}x"


# -- README ------------------------------------------------------------------------------
def paper_headline(rec: Records) -> str:
    p = rec.json("paper.json")["yasgd"]
    return _wrap(f"In March 2019 Fujitsu Laboratories trained ResNet-50 on ImageNet-1k in "
            f"**{p['time_s']} s** on **{p['gpus']:,} Tesla V100 GPUs** of the ABCI cluster, "
            f"with a mini-batch of **{p['batch']:,}** images, reaching **{p['top1_pct']} % "
            f"top-1** at over **{p['images_per_s'] / 1e6:.2f} M images/s** and "
            f"{p['efficiency_pct']} % scaling efficiency ({p['cite']}).")


def _train_log(rec: Records) -> Tuple[str, dict]:
    text = rec.text("make_train.log")
    if text is None:
        return "", {}
    info: Dict[str, object] = {}
    m = re.search(r"(\d+) steps/epoch, (\d+) epochs", text)
    if m:
        info["steps"], info["epochs"] = int(m.group(1)), int(m.group(2))
    m = re.search(r"final test accuracy: ([0-9.]+) \(([0-9.]+) %\) after (\d+) epochs, ([0-9.]+) s",
                  text)
    if m:
        info["acc_pct"], info["train_s"] = float(m.group(2)), float(m.group(4))
    return text, info


def make_train(rec: Records) -> str:
    text, info = _train_log(rec)
    if not text:
        return "No `make train` output is recorded yet (`examples/results/make_train.log`)."
    lines = [f for ln in text.rstrip("\n").splitlines() for f in _fold(ln)]
    out = ["```"] + lines + ["```", ""]
    if info.get("train_s") and info.get("epochs"):
        out.append(_wrap(f"(Recorded in `examples/results/make_train.log`: {info['epochs']} "
                         f"epochs of "
                   f"{info['steps']} LARS steps, {info['train_s']:.1f} s of training, "
                   f"{info['train_s'] / info['epochs']:.1f} s an epoch on the 2-core machine "
                   f"of the benchmarks; epochs without evaluation are left out of the record"
                         + ("; long lines folded)" if len(lines) > len(text.splitlines())
                            else ")")))
    return "\n".join(out)


def make_test(rec: Records) -> str:
    text = rec.text("make_test.log")
    if text is None:
        return _wrap("No `make test` output is recorded yet: `make test 2>&1 | tee "
                     "examples/results/make_test.log`, then `python -m yasgd.bench.report`.")
    lines = [f for ln in text.rstrip("\n").splitlines() for f in _fold(ln)]
    tail = lines[-12:]
    return "\n".join(["```"] + (["..."] if len(lines) > len(tail) else []) + tail + ["```"])


def headline_results(rec: Records) -> str:
    opt, ar, tp = rec.bench("optimizer"), rec.bench("allreduce"), rec.bench("throughput")
    dat, lb = rec.bench("data"), rec.bench("largebatch")
    s = {x["batch"]: x for x in lb["setup"]["summary"]}
    _, info = _train_log(rec)
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
        ["large batch in miniature, 8K: recipe minus batch-256 baseline",
         f"{s[8192]['recipe_minus_baseline_pts']:+.2f} pts"],
        ["large batch in miniature, 16K: recipe minus best SGD",
         f"{s[16384]['recipe_minus_sgd_pts']:+.2f} pts"],
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


def bench_reading(rec: Records) -> str:
    opt, ar, ov = rec.bench("optimizer"), rec.bench("allreduce"), rec.bench("overlap")
    ini, tp = rec.bench("init"), rec.bench("throughput")
    fused = opt["records"][0]["median_ms"]
    mx_ops = _rec(opt, "arm", "yasgd fused (MXNet operators)")["median_ms"]
    gbps = opt["fused_gb_per_s"][opt["records"][0]["arm"]]
    copy_gbps = 2 * opt["setup"]["floats"] * 4 / (opt["memcpy_ms"] / 1e3) / 1e9

    def a(setting, way):
        return _rec(ar, "way", way, setting=setting)["median_ms"]
    y4 = a("yasgd", "yasgd groups 4 MB (23 groups)")
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


# -- docs/largebatch.md -----------------------------------------------------------------
def largebatch_results(rec: Records) -> str:
    from yasgd.bench import largebatch as lb
    d = rec.bench("largebatch")
    results, scale = d["records"], d["setup"]["scale"]
    base = lb._best(results, "baseline", lb.BASELINE_BATCH)
    rows = [[f"{lb.BASELINE_BATCH}", base["steps"], f"{lb._pct(base['final_top1'])} "
             f"(lr {base['lr']:g})", "", "", ""]]
    for s in d["setup"]["summary"]:
        steps = next(r["steps"] for r in results if r["batch"] == s["batch"])
        rows.append([f"{s['batch']:,}", steps,
                     f"{lb._pct(s['sgd_best_top1'])} (lr {s['sgd_best_lr']:g})",
                     f"{lb._pct(s['recipe_best_top1'])} (lr {s['recipe_best_lr']:g})",
                     f"{s['recipe_minus_baseline_pts']:+.2f}", f"{s['recipe_minus_sgd_pts']:+.2f}"])
    t1 = common.md_table(["batch", "steps", "SGD: test top-1 % (LR)",
                          "yasgd recipe: test top-1 % (LR)", "recipe - baseline (pts)",
                          "recipe - SGD (pts)"], rows, "rrrrrr")
    rows2 = []
    for r in sorted(results, key=lambda r: (r["batch"], r["arm"] != "baseline",
                                            r["arm"] == "lars", r["lr"])):
        curve = [e["top1"] for e in r.get("epochs", [])]
        rows2.append([f"{r['batch']:,}", lb.ARM_LABEL[r["arm"]], lb._lr_label(lb._spec_of(r)),
                      f"{r['micro']} x {r['accumulate']}",
                      lb._pct(r.get("final_top1")) + (" **best**" if r.get("best_of_grid") else ""),
                      lb._pct(max(curve)) if curve else "n/a", f"{r.get('wall_s', 0):.0f}"])
    t2 = common.md_table(["batch", "arm", "LR", "micro x accumulate", "final top-1 %",
                          "best epoch top-1 %", "wall s"], rows2, "llllrrr")
    # notes: not the ones stating the BN rule in optimizer steps (training counts micro-batches,
    # see the text) or the bench's history
    notes = _notes(d["notes"], skip=("bn_momentum_rule", "issue"))
    plots = [f"![{p}]({_rel(p)})" for p in d.get("plots") or []]
    return "\n".join([f"Best of each arm's LR grid ({scale['epochs']} epochs every run; "
                      f"baseline: batch {lb.BASELINE_BATCH}, SGD + momentum):", "", t1, "",
                      "Every grid point:", "", t2, "",
                      common.acceptance_table(d["acceptance"]), ""] + notes
                     + ["", _hardware(d["hardware"]), ""] + plots)


def largebatch_reading(rec: Records) -> str:
    d = rec.bench("largebatch")
    s = {x["batch"]: x for x in d["setup"]["summary"]}
    b = ", ".join(f"{s[k]['recipe_minus_baseline_pts']:+.2f} at {k // 1024}K" for k in sorted(s)
                  if k <= 8192)
    g = ", ".join(f"{s[k]['recipe_minus_sgd_pts']:+.2f} at {k // 1024}K" for k in sorted(s))
    margin = s[8192]["recipe_minus_baseline_pts"] - d["acceptance"][0]["threshold"]
    return (f"With the same epochs and the same schedule shape for every run, yasgd's recipe "
            f"holds the baseline's accuracy to within 2 points up to 8K (points: {b}) and is at "
            f"or above SGD with the linear scaling rule at every batch size ({g}), the pattern "
            f"of the LARS paper's tables. The margins at 8K are thin: {margin:.2f} points inside "
            f"the 2-point line, {s[8192]['recipe_minus_sgd_pts']:.2f} over SGD, from one seed. "
            f"At 16K ({next(r['steps'] for r in d['records'] if r['batch'] == 16384)} steps) "
            f"both arms fall away ({s[16384]['recipe_minus_baseline_pts']:+.2f} points for the "
            f"recipe), where LARS's advantage over SGD is largest, as in the paper.")


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
    sim, p = _sim(), rec.json("paper.json")["yasgd"]
    pre = sim.PRESETS["abci2019"]
    b = p["batch"] // p["gpus"]
    s = pre.single_node[0]
    r = sim.predict(preset="abci2019", gpus=p["gpus"], batch=p["batch"], epochs=90)
    rows = [["per-GPU batch b", f"{b}"],
            ["shape h (least-squares line of the fp16 V100 inference table)",
             f"{pre.shape_h:.2f} images"],
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
    rows, notes = [], []
    for r in validate.rows():
        m = logs.get(r["case"])
        rows.append([r["case"], r["preset"], f"{r['gpus']:,}", f"{r['batch']:,}",
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
                + (f"Beyond 15 %: {why}." if over and why else ""))
        elif abs(r["err_images_per_s"]) > .15 or abs(r["err_time"]) > .15:
            notes.append(f"- {r['case']}: `{r['source']}`. Beyond 15 %: "
                         f"{validate.EXPLANATIONS.get(r['case'], 'not explained')}.")
    s = validate.summary()
    return (common.md_table(["case", "preset", "GPUs", "batch", "epochs", "images/s", "model",
                             "error", "time", "model", "error"], rows, "llrrrrrrrrr")
            + "\n\n" + f"Over the {s['cases']} cases: |error| on images/s median "
            f"{s['median_images_per_s'] * 100:.1f} %, worst {s['worst_images_per_s'] * 100:.1f} %;"
            f" on time to train median {s['median_time'] * 100:.1f} %, worst "
            f"{s['worst_time'] * 100:.1f} %; {s['within_15']} of {s['cases']} within 15 % on "
            f"both.\n\n" + "\n".join(notes))


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
            f"{a('yasgd', 'yasgd groups 4 MB (23 groups)'):.1f} ms. The price of a long cycle "
            f"is paid by code that waits for every tensor: the naive per-tensor loop takes "
            f"{a('horovod-default', nv):.1f} ms under the defaults and {a('yasgd', nv):.1f} ms "
            f"with the long cycle.")


def reason_cma(rec: Records) -> str:
    ar = rec.bench("allreduce")
    y = _rec(ar, "way", "yasgd groups 4 MB (23 groups)", setting="yasgd")
    copy = _rec(ar, "way", "memory copy of 102 MB (bound)", setting="yasgd")
    return (f"With single-copy shared memory on (this host allows it), yasgd's 4 MiB groups "
            f"sum ResNet-50's gradients over 2 ranks in {y['median_ms']:.1f} ms, "
            f"{y['bus_bandwidth_GBps']:.2f} GB/s of bus bandwidth, {y['ratio_to_copy_bound']:.1f}x "
            f"a plain memory copy of the same bytes ({copy['median_ms']:.1f} ms; "
            f"`make bench-allreduce`).")


RENDERERS: Dict[str, Callable[[Records], str]] = {
    "paper-headline": paper_headline, "make-train": make_train, "make-test": make_test,
    "headline-results": headline_results,
    "bench-acceptance": bench_acceptance, "bench-optimizer": bench_optimizer,
    "bench-allreduce": bench_allreduce, "bench-overlap": bench_overlap,
    "bench-init": bench_init, "bench-throughput": bench_throughput,
    "bench-reading": bench_reading, "data-loaders": data_loaders,
    "largebatch-results": largebatch_results, "largebatch-reading": largebatch_reading,
    "simulate-abci2019": simulate_abci2019, "simulate-abci3": simulate_abci3,
    "simulate-inputs": simulate_inputs, "simulate-single-node": simulate_single_node,
    "simulate-validation": simulate_validation,
    "simulate-tail": simulate_tail,
    "simulate-sweeps": simulate_sweeps, "simulate-constants": simulate_constants,
    "prior-work": prior_work,
    "reason-hybridize": reason_hybridize, "reason-guarded": reason_guarded,
    "reason-cycle": reason_cycle, "reason-cma": reason_cma,
}


# -- the engine ---------------------------------------------------------------------------
def doc_files(root: str = REPO) -> List[str]:
    out: List[str] = []
    for g in DOC_GLOBS:
        out += sorted(glob.glob(os.path.join(root, g)))
    return out


def blocks(text: str) -> List[Tuple[str, str]]:
    """(name, body) of every generated block, in order; ValueError on a begin marker without
    its end marker."""
    found = [(m.group(2), m.group(3)) for m in BLOCK.finditer(text)]
    begins = BEGIN.findall(text)
    if len(begins) != len(found):
        closed = {n for n, _ in found}
        raise ValueError(f"begin marker without its end marker: "
                         f"{', '.join(n for n in begins if n not in closed) or begins}")
    return found


def render_text(text: str, rec: Records) -> Tuple[str, List[str]]:
    """``text`` with every block rewritten from the records, and the names that changed."""
    blocks(text)   # validates the markers
    changed: List[str] = []

    def sub(m):
        name = m.group(2)
        if name not in RENDERERS:
            raise ValueError(f"unknown block {name!r}; one of {', '.join(RENDERERS)}")
        body = RENDERERS[name](rec).rstrip("\n") + "\n"
        if body != m.group(3):
            changed.append(name)
        return m.group(1) + body + m.group(4)
    return BLOCK.sub(sub, text), changed


def stale(root: str = REPO, results: str = DEFAULT_RESULTS) -> List[Tuple[str, str]]:
    """(file relative to root, block name) of every block that differs from the records."""
    rec = Records(results)
    out = []
    for path in doc_files(root):
        with open(path) as f:
            _, changed = render_text(f.read(), rec)
        out += [(os.path.relpath(path, root), n) for n in changed]
    return out


def write(root: str = REPO, results: str = DEFAULT_RESULTS) -> List[Tuple[str, str]]:
    rec = Records(results)
    out = []
    for path in doc_files(root):
        with open(path) as f:
            text = f.read()
        new, changed = render_text(text, rec)
        if new != text:
            with open(path, "w") as f:
                f.write(new)
        out += [(os.path.relpath(path, root), n) for n in changed]
    return out


def main(argv: List[str] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m yasgd.bench.report",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=DEFAULT_RESULTS,
                    help="folder of bench_*.json, paper.json and the recorded logs")
    ap.add_argument("--check", action="store_true",
                    help="rewrite nothing; exit 1 if a block differs from the records")
    args = ap.parse_args(argv)
    if not os.path.isdir(args.results):
        print(f"yasgd.bench.report: error: {args.results} is not a folder", file=sys.stderr)
        return 2
    try:
        if args.check:
            bad = stale(REPO, args.results)
            for f, n in bad:
                print(f"{f}: block {n} differs from the records in {args.results}")
            print("generated blocks up to date" if not bad else
                  f"{len(bad)} block(s) out of date: run python -m yasgd.bench.report")
            return 1 if bad else 0
        done = write(REPO, args.results)
    except (OSError, ValueError, KeyError) as e:
        print(f"yasgd.bench.report: error: {e}", file=sys.stderr)
        return 2
    for f, n in done:
        print(f"{f}: rewrote block {n}")
    print(f"{len(done)} block(s) rewritten from {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
