"""``yasgd bench init`` (``make bench-init``): time to identical ResNet-50 parameters on
2 ranks, parallel initialization versus init + broadcast.

    parallel init + check   yasgd.init.parallel_initialize(seed, check=True): every rank
                            draws the same weights from the same seed, then one allgather of
                            (sum, sum of squares) per parameter proves they agree (YASGD,
                            "framework optimizations"; what ``yasgd train`` does)
    parallel init, no check the same without the agreement check (the paper's version)
    init + broadcast        each rank initialises with its own seed, then
                            ``hvd.broadcast_parameters(net.collect_params(), root_rank=0)``
                            (Horovod's and GluonCV's examples); 322 arrays incl. BN statistics

yasgd's ``resnet50_v1.5`` (161 trainable tensors, 25,557,032 floats, plus BN running
statistics), He-normal initialiser, OMP_NUM_THREADS=1 per rank, the settings yasgd ships
(jobs/common.sh). Each call: barrier, the arm, ``mx.nd.waitall()``; the slower rank's
time; median of the timed calls after one warm-up call per arm (rounds interleaved).
After timing, every arm's result is checked once more for agreement across ranks.
"""
from __future__ import annotations

import os
import sys
import tempfile
from typing import List

from yasgd import outputs
from yasgd.bench import common

NAME = "init"
PLOT = f"bench_{NAME}.png"
PAR_CHECK = "parallel init + agreement check (yasgd)"
PAR = "parallel init, no check"
BCAST = "init + hvd.broadcast_parameters (Horovod's examples)"


def worker(repeats: int, warmup: int, result: str) -> None:
    from mpi4py import MPI
    import mxnet as mx
    import horovod.mxnet as hvd
    from yasgd import dist, init, model

    comm = MPI.COMM_WORLD
    world = dist.world(force_horovod=True)
    net = model.build("resnet50_v1.5")
    initializer = model.default_initializer()

    def par_check():
        init.parallel_initialize(net, seed=42, ctx=mx.cpu(), check=True, world=world)

    def par():
        init.parallel_initialize(net, seed=42, ctx=mx.cpu(), check=False, world=world)

    def bcast():
        init.seed_everything(1000 + world.rank)     # ranks differ, as without a shared seed
        net.initialize(initializer, ctx=mx.cpu(), force_reinit=True)
        hvd.broadcast_parameters(net.collect_params(), root_rank=0)

    fns = {PAR_CHECK: par_check, PAR: par, BCAST: bcast}
    times = common.interleaved_times(fns, repeats=repeats, warmup=warmup, before=comm.Barrier)
    identical = {}
    for k, fn in fns.items():
        fn()
        mx.nd.waitall()
        try:
            init.check_agreement(net, world)
            identical[k] = True
        except init.InitMismatchError:
            identical[k] = False
    out = common.slowest_rank_ms(comm, times, digits=1)   # the slower rank's time per round
    if out is not None:
        allp = list(net.collect_params().values())
        common.write_json(result, {
            "size": world.size, "arrays": len(allp),
            "floats": int(sum(p.data().size for p in allp)),
            "trainable_floats": int(sum(p.data().size for p in allp if p.grad_req != "null")),
            "identical": identical, "times": out,
            "horovod_env": common.env_subset(os.environ, ("HOROVOD_",))})
    comm.Barrier()


def plots(quick: bool) -> List[str]:
    """The plots a run writes under its ``--out`` (checked by ``output.check_paths``)."""
    return [PLOT]


def run(out_dir: str = "results", quick: bool = False) -> dict:
    repeats, warmup = (1, 1) if quick else (5, 1)
    common.say(f"bench init: ResNet-50 on 2 ranks{' (--quick)' if quick else ''}")
    env = common.shipped_env(common.horovod_default_env(dict(os.environ, OMP_NUM_THREADS="1")))
    hw = common.hardware({"omp_num_threads": "1 per rank"})
    with tempfile.TemporaryDirectory(prefix="yasgd-bench-init-") as tmp:
        path = os.path.join(tmp, "result.json")
        common.launch_ranks("yasgd.bench.init", ["--repeats", str(repeats), "--warmup",
                                                 str(warmup), "--result", path], env=env,
                            timeout=600)
        res = common.read_json(path)
    t = {k: v["median_ms"] for k, v in res["times"].items()}
    records, rows = [], []
    for k, v in res["times"].items():
        records.append({"arm": k, "median_ms": v["median_ms"], "samples_ms": v["samples_ms"],
                        "identical_on_all_ranks": res["identical"][k]})
        rows.append([k, f"{v['median_ms']:.0f}", f"{min(v['samples_ms']):.0f}-"
                     f"{max(v['samples_ms']):.0f}", f"{v['median_ms'] / t[BCAST]:.2f}",
                     "yes" if res["identical"][k] else "**no**"])
    table = common.md_table(["2 ranks, ResNet-50", "ms to identical parameters (median)",
                             "range (ms)", "time / init + broadcast", "identical on all ranks"],
                            rows, "lrrrl")
    notes = [f"yasgd resnet50_v1.5: {res['arrays']} arrays ({res['trainable_floats']:,} trainable "
             f"floats, {res['floats']:,} with BN statistics), He-normal; {res['size']} ranks, "
             f"OMP_NUM_THREADS=1 each, Horovod settings "
             f"{', '.join(f'{k}={v}' for k, v in res['horovod_env'].items())}; median of "
             f"{repeats} interleaved calls after {warmup} warm-up call(s), the slower rank's time.",
             f"Parallel init with its check {'saves' if t[BCAST] >= t[PAR_CHECK] else 'costs'} "
             f"{abs(t[BCAST] - t[PAR_CHECK]):.0f} ms against init + broadcast here (the check "
             f"itself: {t[PAR_CHECK] - t[PAR]:.0f} ms, two integer checksums over a host copy of "
             f"the parameters); the broadcast's cost grows with the number of ranks (log2(n) "
             f"steps of 102 MB for a tree), the check's is one allgather of {res['arrays']} x 4 "
             f"doubles per rank."]
    with outputs.together():
        plot = common.bar_chart(os.path.join(out_dir, PLOT), list(t), list(t.values()),
                                "ms to identical parameters (median)",
                                "ResNet-50 initialisation, 2 ranks" + (" (--quick)" if quick else ""))
        common.write_results(out_dir, NAME, records, table, notes=notes,
                             title="Parallel initialization vs init + broadcast (yasgd bench init)",
                             setup={"ranks": res["size"], "repeats": repeats, "warmup": warmup,
                                    "statistic": "median"},
                             quick=quick, plots=[plot],
                             hw=hw)
    common.say(table)
    return {"records": records}


def main(argv: List[str] = None) -> int:
    return common.bench_main("python -m yasgd.bench.init", argv, worker, repeats=5, warmup=1)


if __name__ == "__main__":
    sys.exit(main())
