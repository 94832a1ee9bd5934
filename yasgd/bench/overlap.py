"""``yasgd bench overlap`` (``make bench-overlap``): does grouped allreduce overlap backward?

A 2-rank training step of yasgd's ResNet-50 v1.5 on small synthetic images (64 px,
batch 4 per rank: at that size summing the gradients of all of ResNet-50's parameters
over the ranks takes about as long as computing them, so the overlap is visible), on a
run made by ``yasgd.train.build`` and stepped by ``yasgd.step.train_step``
(label-smoothing loss, LARS fused, grouped allreduce), timed five ways in one launch
with the settings yasgd ships (jobs/common.sh); the ways differ only in the trainer the
step uses (yasgd.allreduce.DistributedTrainer, or a subclass changed at its
``_allreduce_grads`` seam):

    overlapped (yasgd)          forward, backward (queued), ``trainer.step``: one grouped
                                allreduce per 4 MB group, each starting as soon as backward
                                has written its gradients -- what ``yasgd train`` does
    waitall, then groups        the same, but ``mx.nd.waitall()`` before the allreduce:
                                every allreduce starts after the whole backward
    waitall, then one allreduce the same with a single grouped allreduce of all the
                                gradients (num_groups=1) after ``waitall()``
    compute only                forward, backward, LARS update; no allreduce
    allreduce only              the 4 MB groups' allreduce of gradients already there (not a
                                training step: ``_allreduce_grads`` of the overlapped trainer)

Groups, per-rank batch and image size in the report are read from the run that was
timed. Each step ends with ``mx.nd.waitall()``; a barrier before each; rounds interleaved;
the slower rank's time; medians. The overlap gained is t(waitall, then groups) -
t(overlapped); the share of communication hidden is
(t(compute only) + t(allreduce only) - t(overlapped)) / t(allreduce only).
"""
from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
from typing import List

from yasgd import outputs
from yasgd.bench import common

NAME = "overlap"
PLOT = f"bench_{NAME}.png"
MODEL, IMAGE, BATCH, BUDGET_MB = "resnet50_v1.5", 64, 4, 4
OVER = "overlapped (yasgd: groups issued right after backward)"
WAIT_G = "waitall, then the same groups"
WAIT_1 = "waitall, then one allreduce of all gradients"
COMPUTE = "compute only (no allreduce)"
COMM = "allreduce only (4 MB groups)"


def _trainers(s):
    """The trainers of the ways that are not ``yasgd train``'s own, on the same parameters,
    each with a fresh optimizer made as ``yasgd.train.build`` makes it."""
    import mxnet as mx
    from yasgd import allreduce, optim, schedule
    cfg = s.cfg

    def opt():
        return optim.from_config(cfg.optim, *schedule.from_config(
            cfg.optim, cfg.schedule, s.steps_per_epoch, cfg.train.epochs))

    class WaitThenAllreduce(allreduce.DistributedTrainer):
        """Waits for the whole backward before the first allreduce starts."""

        def _allreduce_grads(self):
            mx.nd.waitall()
            super()._allreduce_grads()

    class LocalOnly(allreduce.DistributedTrainer):
        """Updates with this rank's gradients: no allreduce at all."""

        def _allreduce_grads(self):
            pass

    pdict = s.net.collect_params()
    budget = cfg.comm.group_budget_bytes
    return {WAIT_G: WaitThenAllreduce(pdict, opt(), group_budget_bytes=budget, prefix="wg."),
            WAIT_1: WaitThenAllreduce(pdict, opt(), num_groups=1, prefix="one."),
            COMPUTE: LocalOnly(pdict, opt(), prefix="local.")}


def overrides(ranks: int, image: int, batch: int) -> List[str]:
    """The run of every way: ResNet-50 v1.5 on synthetic data, LARS, imperative."""
    return ["run.dir=", "run.seed=0", "mlperf.enabled=false", f"model.name={MODEL}",
            "model.classes=1000", "data.kind=synthetic", f"data.image_size={image}",
            f"data.synthetic_samples={ranks * batch * 10000}",
            f"train.global_batch={ranks * batch}",
            "train.epochs=1", "train.hybridize=false", "train.label_smoothing=0.1",
            "train.progress=false", "optim.name=lars", "optim.lr=0.01", "optim.momentum=0.9",
            "optim.wd=5e-5", "optim.eta=0.001", "optim.epsilon=1e-9", "optim.fused=true",
            "schedule.warmup_epochs=0", "schedule.power=1", "schedule.end_lr=0.01",   # constant
            "comm.check_init=false", f"comm.group_budget_bytes={BUDGET_MB << 20}"]


def worker(repeats: int, warmup: int, result: str, image: int, batch: int) -> None:
    from mpi4py import MPI
    from yasgd import dist, ops
    from yasgd.bench import runs

    comm = MPI.COMM_WORLD
    world = dist.world(force_horovod=True)
    s = runs.build_run(overrides(world.size, image, batch), world)
    ways = {OVER: runs.train_arm(s)}
    ways.update({k: runs.train_arm(dataclasses.replace(s, trainer=t))
                 for k, t in _trainers(s).items()})
    fns = dict(ways, **{COMM: s.trainer._allreduce_grads})
    times = common.interleaved_times(fns, repeats=repeats, warmup=warmup, before=comm.Barrier)
    out = common.slowest_rank_ms(comm, times, digits=2)   # the slower rank's time per round
    if out is not None:
        facts = {k: arm.facts() for k, arm in ways.items()}
        ran = facts[OVER]
        common.write_json(result, {
            "size": ran["ranks"], "groups": ran["groups"], "image": ran["input_shape"][-1],
            "batch": ran["per_rank_batch"], "ops_backend": ops.backend(),
            "horovod_env": common.env_subset(os.environ, ("HOROVOD_",)),
            "times": out, "runs": facts, "repeats": repeats, "warmup": warmup})
    comm.Barrier()


def plots(quick: bool) -> List[str]:
    """The plots a run writes under its ``--out`` (checked by ``output.check_paths``)."""
    return [PLOT]


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
    with outputs.together():
        plot = common.bar_chart(os.path.join(out_dir, PLOT), list(t), list(t.values()),
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
    return common.bench_main("python -m yasgd.bench.overlap", argv, worker, repeats=15,
                             warmup=2, image=IMAGE, batch=BATCH)


if __name__ == "__main__":
    sys.exit(main())
