"""``yasgd bench throughput`` (``make bench-throughput``): ResNet-50 training images/s on
synthetic 224 px data, yasgd's step against the loop users would otherwise write, side by
side, and how far from the machine's matrix-multiply peak.

Loops (same per-rank batch, synthetic images of the same shape, 1,000 classes, fp32):

    yasgd                 yasgd's step as ``yasgd train`` runs it: a run made by
                          ``yasgd.train.build`` (resnet50_v1.5, BN momentum 0.9, zero-init
                          last gamma, parallel init, label-smoothing CE,
                          yasgd.allreduce.DistributedTrainer with 4 MB static groups, LARS
                          fused), each timed step one ``yasgd.step.train_step`` (loss and
                          accuracy accumulated on the device); hybridized (``train.hybridize:
                          auto`` resolves to true for the ImageNet ResNets), also imperative
                          and with fused BN+ReLU (1 rank)
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
ended by ``mx.nd.waitall()``, medians; images/s = ranks x batch / step time, with the
batch, BN momentum, groups and dtype of each run read from the run's objects after the
timing (``runs`` in each worker's result; yasgd.bench.runs). yasgd against the baseline
at 2 ranks: the median, over every round of every launch, of the ratio of the two loops'
step times in that round (paired, so a slow launch or round hits both alike).

Peak: the fastest fp32 matrix multiply through MXNet in the 1-rank process
(``mx.nd.FullyConnected``, oneDNN's sgemm, and ``mx.nd.dot``, N = 2048/4096; 2 N^3 FLOP).
Achieved: ResNet-50 v1.5 training ~= 3 x 4.09 GMAC x 2 FLOP per 224 px image (forward,
and backward with respect to data and weights).

Mixed precision (its own process, OMP 2): the yasgd loop in fp32, then with
``mx.contrib.amp.init(target_dtype='bfloat16')`` (Convolution and FullyConnected in bf16
through oneDNN, BN and the rest fp32, fp32 weights and optimizer), and a bf16
FullyConnected peak. fp16 training is not supported on CPU by MXNet 1.9.1 (no fp16
Convolution/BatchNorm kernels on CPU): fp16 + fp32 master weights + dynamic loss scaling
(``amp.init('float16')``, ``model.dtype: float16``) is the GPU path.

Modules: yasgd.bench.throughput_arms (the loops and the peak), yasgd.bench.throughput_report
(combining launches, the report); this one launches and runs the workers.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from typing import Dict, List

from yasgd import usage
from yasgd.bench import common
from yasgd.bench.throughput_arms import (B_HYB, B_IMP, BF16, FP32, GFLOP_PER_IMAGE,  # noqa: F401
                                         IMAGE, Y_FBR, Y_HYB, Y_IMP, arms, baseline_arm,
                                         matmul_peak, yasgd_arm, yasgd_overrides)
from yasgd.bench.throughput_report import (LAUNCHES, NAME, PLOT, faster_launch,  # noqa: F401
                                           paired_ratios, report)


# -- workers -----------------------------------------------------------------------------
def _gather_worst(world, times):
    """Per round, the slower rank's time (rank 0 gets the dict; others None)."""
    mine = {k: t.samples for k, t in times.items()}
    if world.size == 1:
        return mine
    import horovod.mxnet as hvd
    everyone = hvd.allgather_object(mine, name="bench.tp.gather")
    return {k: [max(r[k][i] for r in everyone) for i in range(len(mine[k]))] for k in mine}


def _ms(samples) -> Dict[str, object]:
    return {"median_ms": round(statistics.median(samples) * 1e3, 1),
            "samples_ms": [round(s * 1e3, 1) for s in samples]}


def worker(mode: str, batch: int, repeats: int, warmup: int, result: str, quick: bool,
           image: int = IMAGE) -> None:
    """One launch: time the arms of ``mode`` in interleaved rounds; rank 0 writes the
    medians and, per arm, what its run holds (``runs``: steps taken, batch, BN momentum,
    groups, dtype, read from the objects after the timing)."""
    import resource
    from yasgd import dist
    from yasgd import ops
    world = dist.world(force_horovod=(mode != "bf16"))
    out: Dict[str, object] = {"mode": mode, "size": world.size, "batch": batch,
                              "image": image, "repeats": repeats, "warmup": warmup,
                              "ops_backend": ops.backend(),
                              "horovod_env": common.env_subset(os.environ, ("HOROVOD_",)),
                              "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}
    if mode == "bf16":
        out.update(_bf16(batch, repeats, warmup, world, image))
    else:
        timed = {k: make() for k, make in arms(mode, world, batch, image).items()}
        barrier = (lambda: world.barrier("bench.tp")) if world.size > 1 else None
        times = common.interleaved_times(timed, repeats=repeats, warmup=warmup, before=barrier)
        out["times"] = {k: _ms(v) for k, v in _gather_worst(world, times).items()}
        out["runs"] = {k: arm.facts() for k, arm in timed.items()}
        if mode == "single":
            sizes = (2048,) if quick else (2048, 4096)
            out["peak_gflops"] = matmul_peak(sizes, repeats=2 if quick else 3)
    out["max_rss_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20, 2)
    if world.rank == 0:
        common.write_json(result, out)


def _bf16(batch, repeats, warmup, world, image=IMAGE):
    """fp32, then bf16 AMP, of the yasgd step; whatever happens is reported."""
    res: Dict[str, object] = {"runs": {}}
    res["cpu_avx512_bf16"] = "avx512_bf16" in common.cpu_flags()
    res["cpu_amx_bf16"] = "amx_bf16" in common.cpu_flags()
    fp32 = yasgd_arm(world, batch, image)
    t32 = common.median_time(fp32, repeats=repeats, warmup=warmup)
    res["times"] = {FP32: {"median_ms": round(t32.ms, 1),
                           "samples_ms": [round(s * 1e3, 1) for s in t32.samples]}}
    res["runs"][FP32] = fp32.facts()
    del fp32
    try:
        res["peak_gflops"] = matmul_peak((2048,), repeats=2, dtype="bfloat16")
    except Exception as e:  # noqa: BLE001 -- report, don't fail the benchmark
        res["peak_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
    try:
        from mxnet.contrib import amp
        amp.init(target_dtype="bfloat16")
        bf = yasgd_arm(world, batch, image)
        t16 = common.median_time(bf, repeats=repeats, warmup=warmup)
        res["times"][BF16] = {"median_ms": round(t16.ms, 1),
                              "samples_ms": [round(s * 1e3, 1) for s in t16.samples]}
        res["runs"][BF16] = dict(bf.facts(), amp_target_dtype="bfloat16")
        res["bf16_ok"] = True
    except Exception as e:  # noqa: BLE001
        res["bf16_ok"] = False
        res["bf16_error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:400]}"
    return res


# -- the run -----------------------------------------------------------------------------
def plots(quick: bool) -> List[str]:
    """The plots a run writes under its ``--out`` (checked by ``output.check_paths``)."""
    return [PLOT]


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


def main(argv: List[str] = None) -> int:
    ap = usage.Parser(prog="python -m yasgd.bench.throughput")
    ap.add_argument("--out", default="results")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="single", help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, default=8, help=argparse.SUPPRESS)
    ap.add_argument("--repeats", type=int, default=5, help=argparse.SUPPRESS)
    ap.add_argument("--warmup", type=int, default=2, help=argparse.SUPPRESS)
    ap.add_argument("--image", type=int, default=IMAGE, help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args.mode, args.batch, args.repeats, args.warmup, args.result, args.quick,
               image=args.image)
    else:
        run(out_dir=args.out, quick=args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
