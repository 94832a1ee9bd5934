"""``yasgd bench throughput`` (``make bench-throughput``): ResNet-50 training images/s on
synthetic 224 px data, yasgd's step against the loop users would otherwise write, side by
side, and how far from the machine's matrix-multiply peak.

Loops (same per-rank batch, same synthetic data, 1,000 classes, fp32):

    yasgd                 yasgd's step as ``yasgd train`` runs it: yasgd.model resnet50_v1.5
                          (BN momentum 0.9, zero-init last gamma), parallel init,
                          label-smoothing CE, yasgd.allreduce.DistributedTrainer (4 MB static
                          groups) with LARS fused, loss/accuracy accumulated on the device;
                          hybridized (``train.hybridize: auto`` resolves to true for the
                          ImageNet ResNets), also imperative and with fused BN+ReLU (1 rank)
    baseline              written like Horovod's examples/mxnet/mxnet_imagenet_resnet50.py and
                          GluonCV's train_imagenet.py: GluonCV ``resnet50_v1b`` (= v1.5),
                          Xavier init + ``hvd.broadcast_parameters``, ``net.hybridize(
                          static_alloc=True, static_shape=True)``, SGD momentum 0.9 wd 1e-4,
                          ``hvd.DistributedTrainer``, SoftmaxCrossEntropyLoss,
                          ``mx.metric.Accuracy`` updated every batch; also not hybridized

Runs: 1 rank (one process, OMP_NUM_THREADS=2); 2 ranks (mpirun, OMP_NUM_THREADS=1 each)
with the settings yasgd ships (jobs/common.sh), every loop in the same launch; 2 ranks
with Horovod's defaults, the baseline alone (as a user would run the example). In each
run the loops' steps are timed in interleaved rounds (warm-up rounds untimed), each step
ended by ``mx.nd.waitall()``, medians; images/s = ranks x batch / step time. yasgd against
the baseline at 2 ranks: the median, over every round of every launch, of the ratio of the
two loops' step times in that round (paired, so a slow launch or round hits both alike).

Peak: the fastest fp32 matrix multiply through MXNet in the 1-rank process
(``mx.nd.FullyConnected``, oneDNN's sgemm, and ``mx.nd.dot``, N = 2048/4096; 2 N^3 FLOP).
Achieved: ResNet-50 v1.5 training ~= 3 x 4.09 GMAC x 2 FLOP = 24.5 GFLOP per 224 px image
(forward, and backward with respect to data and weights).

Mixed precision (its own process, OMP 2): the yasgd loop in fp32, then with
``mx.contrib.amp.init(target_dtype='bfloat16')`` (Convolution and FullyConnected in bf16
through oneDNN, BN and the rest fp32, fp32 weights and optimizer), and a bf16
FullyConnected peak. fp16 training is not supported on CPU by MXNet 1.9.1 (no fp16
Convolution/BatchNorm kernels on CPU): fp16 + fp32 master weights + dynamic loss scaling
(``amp.init('float16')``, ``model.dtype: float16``) is the GPU path.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from typing import Dict, List

from yasgd.bench import common

NAME = "throughput"
IMAGE = 224
GFLOP_PER_IMAGE = 3 * 4.09 * 2          # training: fwd + 2 x bwd; 4.09 GMAC forward
Y_HYB = "yasgd (hybridized, its default for ResNet-50)"
Y_IMP = "yasgd (imperative)"
Y_FBR = "yasgd (hybridized, fused BN+ReLU)"
B_HYB = "baseline Horovod/GluonCV loop (hybridized, as the examples)"
B_IMP = "baseline Horovod/GluonCV loop (imperative)"
FP32 = "yasgd fp32 (imperative)"
BF16 = "yasgd bf16 AMP (imperative)"


# -- the loops ---------------------------------------------------------------------------
def _data(batch, rank, ctx):
    import mxnet as mx
    import numpy as np
    rng = np.random.default_rng(rank)
    x = mx.nd.array(rng.uniform(-1, 1, (batch, 3, IMAGE, IMAGE)), ctx=ctx)
    y = mx.nd.array(rng.integers(0, 1000, batch), ctx=ctx)
    return x, y


def yasgd_step(world, batch, hybridize=False, fused_bn_relu=False):
    """One training step as yasgd.train.train_epoch does it; returns step()."""
    import mxnet as mx
    from mxnet import autograd
    from yasgd import allreduce, init, model, params
    from yasgd.loss import LabelSmoothingCE
    from yasgd.optim.lars import LARS
    ctx = world.context()
    net = model.build("resnet50_v1.5", classes=1000, fused_bn_relu=fused_bn_relu)
    init.parallel_initialize(net, seed=0, ctx=ctx, check=world.size > 1, world=world)
    if hybridize:
        net.hybridize(static_alloc=True, static_shape=True)
    _, plain = params.split_by_structure(net.collect_params().values())
    for p in plain:
        p.wd_mult = 0.0
    opt = LARS(learning_rate=0.1, momentum=0.9, wd=5e-5, eta=0.001, epsilon=1e-9)
    trainer = allreduce.DistributedTrainer(net.collect_params(), opt,
                                           group_budget_bytes=allreduce.DEFAULT_BUDGET_BYTES,
                                           prefix=f"y{int(hybridize)}{int(fused_bn_relu)}.")
    loss_fn = LabelSmoothingCE(0.1)
    x, y = _data(batch, world.rank, ctx)
    acc = {"loss": mx.nd.zeros((1,), ctx=ctx, dtype="float64"),
           "correct": mx.nd.zeros((1,), ctx=ctx, dtype="float64")}

    def step():
        with autograd.record():
            out = net(x)
            loss = loss_fn(out, y)
        loss.backward()
        acc["loss"] += loss.sum().astype("float64")
        acc["correct"] += (out.argmax(axis=1) == y.astype(out.dtype)).sum().astype("float64")
        trainer.step(batch)
    return step


def baseline_step(world, batch, hybridize=True):
    """Horovod's mxnet_imagenet_resnet50.py train_gluon() loop (GluonCV model); step()."""
    import mxnet as mx
    from mxnet import autograd, gluon
    import horovod.mxnet as hvd
    ctx = world.context()
    try:
        from gluoncv.model_zoo import get_model
        net = get_model("resnet50_v1b", classes=1000)
    except ImportError:       # GluonCV missing: Gluon's own (v1) ResNet-50
        net = gluon.model_zoo.vision.resnet50_v1(classes=1000)
    if hybridize:
        net.hybridize(static_alloc=True, static_shape=True)
    mx.random.seed(world.rank)
    net.initialize(mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2), ctx=ctx)
    params = net.collect_params()
    hvd.broadcast_parameters(params, root_rank=0, prefix=f"b{int(hybridize)}.")
    opt = mx.optimizer.create("sgd", learning_rate=0.1 * world.size, momentum=0.9, wd=1e-4)
    trainer = hvd.DistributedTrainer(params, opt, prefix=f"b{int(hybridize)}.")
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    metric = mx.metric.Accuracy()
    x, y = _data(batch, world.rank, ctx)

    def step():
        with autograd.record():
            output = net(x)
            loss = loss_fn(output, y)
        loss.backward()
        trainer.step(batch)
        metric.update([y], [output])
    return step


def matmul_peak(sizes, repeats=3, dtype="float32"):
    """{label: GFLOP/s} of the fastest N x N x N multiply through MXNet."""
    import mxnet as mx
    out = {}
    for n in sizes:
        a = mx.nd.random.uniform(shape=(n, n))
        b = mx.nd.random.uniform(shape=(n, n))
        if dtype == "bfloat16":
            from mxnet.contrib.amp import amp as amp_mod
            a = mx.nd.amp_cast(a, dtype=amp_mod.bfloat16)
            b = mx.nd.amp_cast(b, dtype=amp_mod.bfloat16)
        fns = {f"FullyConnected (oneDNN) {dtype} N={n}":
               lambda: mx.nd.FullyConnected(a, b, no_bias=True, num_hidden=n)}
        if dtype == "float32":
            fns[f"dot {dtype} N={n}"] = lambda: mx.nd.dot(a, b)
        for k, fn in fns.items():
            t = common.median_time(fn, repeats=repeats, warmup=1)
            out[k] = round(2 * n ** 3 / t.median / 1e9, 1)
    return out


# -- workers -----------------------------------------------------------------------------
def _gather_worst(world, times):
    """Per round, the slower rank's time (rank 0 gets the dict; others None)."""
    mine = {k: t.samples for k, t in times.items()}
    if world.size == 1:
        return mine
    import horovod.mxnet as hvd
    everyone = hvd.allgather_object(mine, name="bench.tp.gather")
    return {k: [max(r[k][i] for r in everyone) for i in range(len(mine[k]))] for k in mine}


def worker(mode: str, batch: int, repeats: int, warmup: int, result: str, quick: bool) -> None:
    import resource
    from yasgd import dist
    from yasgd import ops
    world = dist.world(force_horovod=(mode != "bf16"))
    out: Dict[str, object] = {"mode": mode, "size": world.size, "batch": batch,
                              "ops_backend": ops.backend(),
                              "horovod_env": common.env_subset(os.environ, ("HOROVOD_",)),
                              "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}
    if mode == "bf16":
        out.update(_bf16(batch, repeats, warmup, world, quick))
    else:
        if mode == "single":
            arms = {Y_HYB: lambda: yasgd_step(world, batch, hybridize=True),
                    Y_IMP: lambda: yasgd_step(world, batch),
                    Y_FBR: lambda: yasgd_step(world, batch, hybridize=True, fused_bn_relu=True),
                    B_HYB: lambda: baseline_step(world, batch, True),
                    B_IMP: lambda: baseline_step(world, batch, False)}
        elif mode == "ranks":
            arms = {Y_HYB: lambda: yasgd_step(world, batch, hybridize=True),
                    B_HYB: lambda: baseline_step(world, batch, True),
                    B_IMP: lambda: baseline_step(world, batch, False)}
        else:   # "ranks-default": the baseline as a user runs the example
            arms = {B_HYB: lambda: baseline_step(world, batch, True)}
        steps = {k: make() for k, make in arms.items()}
        barrier = (lambda: world.barrier("bench.tp")) if world.size > 1 else None
        times = common.interleaved_times(steps, repeats=repeats, warmup=warmup, before=barrier)
        worst = _gather_worst(world, times)
        out["times"] = {k: {"median_ms": round(statistics.median(v) * 1e3, 1),
                            "samples_ms": [round(s * 1e3, 1) for s in v]}
                        for k, v in worst.items()}
        if mode == "single":
            sizes = (2048,) if quick else (2048, 4096)
            out["peak_gflops"] = matmul_peak(sizes, repeats=2 if quick else 3)
    out["max_rss_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20, 2)
    if world.rank == 0:
        common.write_json(result, out)


def _bf16(batch, repeats, warmup, world, quick):
    """fp32, then bf16 AMP, of the yasgd loop; whatever happens is reported."""
    res: Dict[str, object] = {}
    from yasgd.bench.common import cpu_flags
    res["cpu_avx512_bf16"] = "avx512_bf16" in cpu_flags()
    res["cpu_amx_bf16"] = "amx_bf16" in cpu_flags()
    fp32 = yasgd_step(world, batch)
    t32 = common.median_time(fp32, repeats=repeats, warmup=warmup)
    res["times"] = {FP32: {"median_ms": round(t32.ms, 1),
                           "samples_ms": [round(s * 1e3, 1) for s in t32.samples]}}
    del fp32
    try:
        res["peak_gflops"] = matmul_peak((2048,), repeats=2, dtype="bfloat16")
    except Exception as e:  # noqa: BLE001 -- report, don't fail the benchmark
        res["peak_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
    try:
        from mxnet.contrib import amp
        amp.init(target_dtype="bfloat16")
        bf = yasgd_step(world, batch)
        t16 = common.median_time(bf, repeats=repeats, warmup=warmup)
        res["times"][BF16] = {"median_ms": round(t16.ms, 1),
                              "samples_ms": [round(s * 1e3, 1) for s in t16.samples]}
        res["bf16_ok"] = True
    except Exception as e:  # noqa: BLE001
        res["bf16_ok"] = False
        res["bf16_error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:400]}"
    return res


# -- the run -----------------------------------------------------------------------------
#: 2-rank launches per Horovod setting (full mode), alternating: on this shared machine one
#: launch now and then runs every loop 1.5x slower, which a comparison across launches cannot
#: tell from the loops; the faster launch of each setting gives the table (all are reported).
#: yasgd against the baseline in the same launch is the median over every round of every launch
#: of the two loops' step times in that round (paired_ratio): one launch's median of a few
#: single steps moved by +-10 % between launches (2026-12-01: 0.97x and 1.22x).
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


def run(out_dir: str = "results", quick: bool = False) -> dict:
    batch, repeats, warmup = (2, 2, 1) if quick else (8, 8, 2)
    common.say(f"bench throughput: ResNet-50 {IMAGE} px synthetic, batch {batch}/rank"
               f"{' (--quick)' if quick else ''}")
    base = dict(os.environ, PYTHONUNBUFFERED="1")   # YASGD_OPS, if set, is kept (and reported)
    hw = common.hardware({"omp_num_threads": "2 (1 rank) / 1 per rank (2 ranks)"})
    res = {}
    with tempfile.TemporaryDirectory(prefix="yasgd-bench-tp-") as tmp:
        def args(mode, tag=""):
            return ["--mode", mode, "--batch", str(batch), "--repeats", str(repeats),
                    "--warmup", str(warmup), "--result", os.path.join(tmp, f"{mode}{tag}.json")] + \
                (["--quick"] if quick else [])
        t0 = time.time()
        common.say("  1 rank, OMP_NUM_THREADS=2 ...")
        env1 = common.shipped_env(common.horovod_default_env(dict(base, OMP_NUM_THREADS="2")))
        common.run_process("yasgd.bench.throughput", args("single"), env=env1, timeout=1200)
        env2 = common.shipped_env(common.horovod_default_env(dict(base, OMP_NUM_THREADS="1")))
        env3 = common.horovod_default_env(dict(base, OMP_NUM_THREADS="1"))
        launches = 1 if quick else LAUNCHES
        for k in range(launches):   # alternate the two settings' launches
            common.say(f"  2 ranks, OMP_NUM_THREADS=1 each, yasgd's settings, launch {k + 1}/"
                       f"{launches} ... ({time.time() - t0:.0f} s)")
            common.launch_ranks("yasgd.bench.throughput", args("ranks", f".{k}"), env=env2,
                                timeout=1200)
            common.say(f"  2 ranks, Horovod's defaults, baseline, launch {k + 1}/{launches} ... "
                       f"({time.time() - t0:.0f} s)")
            common.launch_ranks("yasgd.bench.throughput", args("ranks-default", f".{k}"),
                                env=env3, timeout=1200)
        for mode in ("ranks", "ranks-default"):
            common.write_json(os.path.join(tmp, f"{mode}.json"), faster_launch(
                [common.read_json(os.path.join(tmp, f"{mode}.{k}.json"))
                 for k in range(launches)]))
        common.say(f"  mixed precision (bf16), 1 process ... ({time.time() - t0:.0f} s)")
        try:
            common.run_process("yasgd.bench.throughput", args("bf16"), env=env1, timeout=1200)
        except RuntimeError as e:   # a crash inside MXNet's bf16 path: report it
            common.write_json(os.path.join(tmp, "bf16.json"),
                              {"mode": "bf16", "bf16_ok": False, "bf16_error": str(e), "times": {}})
        for mode in ("single", "ranks", "ranks-default", "bf16"):
            res[mode] = common.read_json(os.path.join(tmp, f"{mode}.json"))
        res["bf16"]["onednn"] = common.onednn_info()
        common.say(f"  done in {time.time() - t0:.0f} s")
    return report(res, out_dir, quick, batch, repeats, warmup, hw)


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
            img_s = r["size"] * batch / (ms / 1e3)
            gflops = img_s * GFLOP_PER_IMAGE
            ips[(mode, loop)] = img_s
            frac = gflops / peak if peak else None
            records.append({"ranks": r["size"], "run": mode, "loop": loop, "batch_per_rank": batch,
                            "omp_num_threads": r["omp_num_threads"], "median_step_ms": ms,
                            "samples_ms": t["samples_ms"], "images_per_s": round(img_s, 2),
                            "achieved_gflops": round(gflops, 1),
                            "fraction_of_peak": None if frac is None else round(frac, 3),
                            "horovod_settings": setting[mode], "max_rss_gib": r.get("max_rss_gib")})
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
        img_s = batch / (t["median_ms"] / 1e3)
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
        f"Synthetic {IMAGE} px data, 1,000 classes, fp32, batch {batch} per rank; 1 rank: one "
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
    plot = common.bar_chart(os.path.join(out_dir, "bench_throughput.png"),
                            [f"{rec['ranks']}r {rec['loop']} [{rec['horovod_settings']}]"
                             for rec in records], [rec["images_per_s"] for rec in records],
                            "images/s (median step)", f"ResNet-50 training, {IMAGE} px, batch "
                            f"{batch}/rank" + (" (--quick)" if quick else ""), annotate="{:.2f}",
                            colors=["#55A868" if rec["loop"].startswith("yasgd") else "#4C72B0"
                                    for rec in records])
    full_table = table + "\n\nMixed precision (yasgd loop, 1 process):\n\n" + mp_table
    backends = sorted({str(res[m].get("ops_backend")) for m in ("single", "ranks")})
    notes.insert(1, f"yasgd.ops backend of the LARS fused step: {', '.join(backends)}"
                 + (" (YASGD_OPS set by the caller)" if os.environ.get("YASGD_OPS") else "") + ".")
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
    for n in notes[2:4] + notes[5:6]:   # launches, matmul peak, mixed precision
        common.say(n)
    return {"records": records, "acceptance": acc}


def main(argv: List[str] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m yasgd.bench.throughput")
    ap.add_argument("--out", default="results")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="single", help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, default=8, help=argparse.SUPPRESS)
    ap.add_argument("--repeats", type=int, default=5, help=argparse.SUPPRESS)
    ap.add_argument("--warmup", type=int, default=2, help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args.mode, args.batch, args.repeats, args.warmup, args.result, args.quick)
    else:
        run(out_dir=args.out, quick=args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
