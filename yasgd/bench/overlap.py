"""``yasgd bench overlap`` (``make bench-overlap``): does grouped allreduce overlap backward?

A 2-rank training step of yasgd's ResNet-50 v1.5 on small synthetic images (64 px,
batch 4 per rank: the 102 MB of gradients then weigh as much as the compute, so the
overlap is visible), yasgd's step (label-smoothing loss, LARS fused, grouped allreduce),
timed five ways in one launch with the settings yasgd ships (jobs/common.sh):

    overlapped (yasgd)          forward, backward (queued), ``trainer.step``: one grouped
                                allreduce per 4 MB group, each starting as soon as backward
                                has written its gradients -- what ``yasgd train`` does
    waitall, then groups        the same, but ``mx.nd.waitall()`` after backward: every
                                allreduce starts after the whole backward
    waitall, then one allreduce the same with a single grouped allreduce of all 161
                                gradients (num_groups=1) after ``waitall()``
    compute only                forward, backward, LARS update; no allreduce
    allreduce only              the 4 MB groups' allreduce of gradients already there

Each step ends with ``mx.nd.waitall()``; a barrier before each; rounds interleaved;
the slower rank's time; medians. The overlap gained is t(waitall, then groups) -
t(overlapped); the share of communication hidden is
(t(compute only) + t(allreduce only) - t(overlapped)) / t(allreduce only).
"""
from __future__ import annotations

import os
import sys
import tempfile
from typing import List

from yasgd.bench import common

NAME = "overlap"
MODEL, IMAGE, BATCH, BUDGET_MB = "resnet50_v1.5", 64, 4, 4
OVER = "overlapped (yasgd: groups issued right after backward)"
WAIT_G = "waitall, then the same groups"
WAIT_1 = "waitall, then one allreduce of all gradients"
COMPUTE = "compute only (no allreduce)"
COMM = "allreduce only (4 MB groups)"


def worker(repeats: int, warmup: int, result: str, image: int, batch: int) -> None:
    from mpi4py import MPI
    import mxnet as mx
    import horovod.mxnet as hvd
    from mxnet import autograd
    from yasgd import allreduce, dist, init, model, ops, params
    from yasgd.loss import LabelSmoothingCE
    from yasgd.optim.lars import LARS

    comm = MPI.COMM_WORLD
    world = dist.world(force_horovod=True)
    net = model.build(MODEL, classes=1000)
    init.parallel_initialize(net, seed=0, ctx=mx.cpu(), check=False, world=world)
    _, plain = params.split_by_structure(net.collect_params().values())
    for p in plain:
        p.wd_mult = 0.0
    pdict = net.collect_params()

    def lars():
        return LARS(learning_rate=0.01, momentum=0.9, wd=5e-5, eta=0.001, epsilon=1e-9)

    grouped = allreduce.DistributedTrainer(pdict, lars(), group_budget_bytes=BUDGET_MB << 20,
                                           prefix="g.")
    single = allreduce.DistributedTrainer(pdict, lars(), num_groups=1, prefix="one.")
    local = allreduce.DistributedTrainer(pdict, lars(), prefix="local.")
    local._allreduce_grads = lambda: None
    loss_fn = LabelSmoothingCE(0.1)
    mx.random.seed(world.rank)
    x = mx.nd.random.uniform(-1, 1, shape=(batch, 3, image, image))
    y = mx.nd.array([(i * 37 + world.rank) % 1000 for i in range(batch)])

    def fwd_bwd():
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()

    def overlapped():
        fwd_bwd()
        grouped.step(batch)

    def wait_groups():
        fwd_bwd()
        mx.nd.waitall()
        grouped.step(batch)

    def wait_one():
        fwd_bwd()
        mx.nd.waitall()
        single.step(batch)

    def compute_only():
        fwd_bwd()
        local.step(batch)

    fns = {OVER: overlapped, WAIT_G: wait_groups, WAIT_1: wait_one, COMPUTE: compute_only,
           COMM: grouped._allreduce_grads}
    times = common.interleaved_times(fns, repeats=repeats, warmup=warmup, before=comm.Barrier)
    out = common.slowest_rank_ms(comm, times, digits=2)   # the slower rank's time per round
    if out is not None:
        common.write_json(result, {
            "size": world.size, "groups": len(grouped.groups), "image": image, "batch": batch,
            "ops_backend": ops.backend(),
            "horovod_env": common.env_subset(os.environ, ("HOROVOD_",)),
            "times": out})
    comm.Barrier()


def run(out_dir: str = "results", quick: bool = False) -> dict:
    repeats, warmup = (3, 1) if quick else (15, 2)
    common.say(f"bench overlap: {MODEL} {IMAGE} px, batch {BATCH}/rank, 2 ranks, shipped "
               f"settings{' (--quick)' if quick else ''}")
    env = common.shipped_env(common.horovod_default_env(dict(os.environ, OMP_NUM_THREADS="1")))
    hw = common.hardware({"omp_num_threads": "1 per rank"})
    with tempfile.TemporaryDirectory(prefix="yasgd-bench-ov-") as tmp:
        path = os.path.join(tmp, "result.json")
        common.launch_ranks("yasgd.bench.overlap", ["--repeats", str(repeats), "--warmup",
                                                    str(warmup), "--result", path,
                                                    "--image", str(IMAGE), "--batch", str(BATCH)],
                            env=env, timeout=600)
        res = common.read_json(path)
    return report(res, out_dir, quick, repeats, warmup, hw)


def report(res: dict, out_dir: str, quick: bool, repeats: int, warmup: int,
           hw: dict = None) -> dict:
    t = {k: v["median_ms"] for k, v in res["times"].items()}
    gained = t[WAIT_G] - t[OVER]
    hidden = (t[COMPUTE] + t[COMM] - t[OVER]) / t[COMM] if t[COMM] > 0 else None
    records, rows = [], []
    for k, v in res["times"].items():
        records.append({"step": k, "median_ms": v["median_ms"], "samples_ms": v["samples_ms"]})
        lo, hi = min(v["samples_ms"]), max(v["samples_ms"])
        rel = "" if k in (COMPUTE, COMM) else f"{t[OVER] / v['median_ms']:.2f}"
        rows.append([k, f"{v['median_ms']:.1f}", f"{lo:.0f}-{hi:.0f}", rel])
    table = common.md_table(["2-rank step", "ms (median)", "range (ms)",
                             "t(overlapped) / t(this)"], rows, "lrrr")
    summary = (f"Overlap gained: t(waitall, then groups) - t(overlapped) = {gained:.1f} ms "
               f"({gained / t[WAIT_G] * 100:.1f} % of the step); versus one allreduce after "
               f"waitall: {t[WAIT_1] - t[OVER]:.1f} ms. Share of the allreduce hidden behind "
               f"compute: (t(compute) + t(allreduce) - t(overlapped)) / t(allreduce) = "
               + (f"{hidden * 100:.0f} %." if hidden is not None else "n/a."))
    notes = [summary,
             f"{MODEL}, {res['image']} px synthetic images, batch {res['batch']} per rank, "
             f"{res['size']} ranks (OMP_NUM_THREADS=1 each), label-smoothing CE, yasgd LARS fused, "
             f"{res['groups']} allreduce groups of <= {BUDGET_MB} MB, yasgd.ops backend "
             f"{res.get('ops_backend')}; Horovod settings "
             f"{', '.join(f'{k}={v}' for k, v in res['horovod_env'].items())}; median of "
             f"{repeats} interleaved rounds after {warmup} warm-up round(s); the slower rank's "
             f"time.",
             "On this CPU host the allreduce (Horovod's background thread, MPI shared-memory "
             "copies) runs on the same two cores as backward, so overlap can hide waiting and "
             "latency but not the copying work itself; on GPUs communication has its own "
             "engines."]
    plot = common.bar_chart(os.path.join(out_dir, "bench_overlap.png"), list(t), list(t.values()),
                            "ms per step (median)", f"{MODEL} {res['image']} px, batch "
                            f"{res['batch']}/rank, 2 ranks" + (" (--quick)" if quick else ""))
    common.write_results(out_dir, NAME, records, table, notes=notes,
                         title="Overlap of grouped allreduce with backward, 2 ranks (yasgd bench overlap)",
                         setup={"model": MODEL, "image": res["image"], "batch_per_rank": res["batch"],
                                "ranks": res["size"], "groups": res["groups"], "repeats": repeats,
                                "warmup": warmup, "statistic": "median"},
                         quick=quick, plots=[plot],
                         extra={"overlap_gained_ms": round(gained, 2),
                                "allreduce_hidden_fraction": None if hidden is None else round(hidden, 3)},
                         hw=hw or common.hardware({"omp_num_threads": "1 per rank"}))
    common.say(table)
    common.say(summary)
    return {"records": records, "overlap_gained_ms": gained, "hidden": hidden}


def main(argv: List[str] = None) -> int:
    return common.bench_main("python -m yasgd.bench.overlap", run, worker, argv, repeats=15, warmup=2, image=IMAGE, batch=BATCH)


if __name__ == "__main__":
    sys.exit(main())
