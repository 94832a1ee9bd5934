"""``yasgd bench allreduce`` (``make bench-allreduce``): summing ResNet-50's gradients over
2 ranks, every way side by side, against the memory-copy bound.

Tensors: the 161 gradient tensors of yasgd's ``resnet50_v1.5`` (25,557,032 floats,
102 MB; ``yasgd.model.resnet50_tensors``, every trainable tensor whatever its structure),
as ``param.grad()`` arrays of an initialised model. Ways (each summed over ranks
in place, ``average=False``, as a trainer does):

    naive loop                  per tensor ``hvd.allreduce_`` then ``wait_to_read`` (each waited)
    Horovod per-tensor async    ``hvd.allreduce_`` of every tensor, priority -i, then waitall:
                                exactly horovod.mxnet.DistributedTrainer's path; Horovod's
                                fusion buffer packs what is ready each cycle
    yasgd groups, B MB          yasgd.allreduce.DistributedTrainer._allreduce_grads: static
                                groups in backward order under a B MB budget, one
                                ``grouped_allreduce_`` per group (B = 1, 4, 16, 64; 4 is
                                yasgd's default)
    flat buffer, Horovod        one ``hvd.allreduce_`` of a single 25.6 M-float array
    flat buffer, mpi4py         ``comm.Allreduce(IN_PLACE, ...)`` on one NumPy array
                                (OpenMPI's own algorithm and defaults)
    memory copy (bound)         ``np.copyto`` of the whole 102 MB buffer, on both ranks at once

Horovod reads its tuning variables once, at ``hvd.init``, so every setting is its own
``mpirun`` launch, all from one ``run()``: Horovod's defaults (no HOROVOD_* variable:
64 MB fusion buffer, default cycle time) and the settings yasgd ships
(``jobs/common.sh``: HOROVOD_FUSION_THRESHOLD=0, HOROVOD_CYCLE_TIME=5, ...). Each
launch times every way in interleaved rounds (a barrier before each call; warm-up rounds
untimed; each call's time the slower rank's); figures are medians.

Bus bandwidth = 2 (n - 1) / n x bytes / time (NCCL's definition; n = 2: bytes / time).
The memory-copy bound: on one host a 2-rank allreduce moves at least one copy of the
buffer per rank (read the peer's half, add, write), so one ``memcpy`` of the buffer is a
floor no allreduce beats.
"""
from __future__ import annotations

import os
import sys
import tempfile
from typing import Dict, List

from yasgd import outputs
from yasgd.bench import common

NAME = "allreduce"
PLOT = f"bench_{NAME}.png"
BUDGETS_MB = (1, 4, 16, 64)
DEFAULT_BUDGET_MB = 4
SETTINGS = {
    "horovod-default": "Horovod defaults (no HOROVOD_* set)",
    "yasgd": "yasgd shipped (jobs/common.sh)",
}
NAIVE = "naive loop (per-tensor, each waited)"
HVD = "Horovod per-tensor async (its DistributedTrainer)"
FLAT_HVD = "one flat buffer, Horovod"
FLAT_MPI = "one flat buffer, mpi4py Allreduce"
COPY = "memory copy of 102 MB (bound)"


def _group_name(mb: int, ngroups: int) -> str:
    return f"yasgd groups {mb} MB ({ngroups} groups)"


def worker(setting: str, repeats: int, warmup: int, result: str) -> None:
    from mpi4py import MPI          # before Horovod: it then shares MPI's initialisation
    import mxnet as mx
    import numpy as np
    import horovod.mxnet as hvd
    from yasgd import model
    from yasgd.allreduce import DistributedTrainer

    comm = MPI.COMM_WORLD
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    net, plist = model.resnet50_tensors(seed=rank)   # the trainable tensors, forward order
    for p in plist:
        p.grad()[:] = mx.nd.random.uniform(0, 1e-3, shape=p.shape)
    grads = [p.grad() for p in plist]
    floats = int(sum(g.size for g in grads))
    nbytes = floats * 4
    trainers = {}
    for mb in BUDGETS_MB:
        t = DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1},
                               group_budget_bytes=mb << 20, prefix=f"b{mb}.")
        trainers[_group_name(mb, len(t.groups))] = t
    flat = mx.nd.random.uniform(0, 1e-3, shape=(floats,))
    flat_np = np.random.default_rng(rank).uniform(0, 1e-3, floats).astype(np.float32)
    src = np.random.default_rng(rank).uniform(0, 1, floats).astype(np.float32)
    dst = np.empty_like(src)
    mx.nd.waitall()

    def naive():
        for i, g in enumerate(grads):
            hvd.allreduce_(g, average=False, name=f"naive.{i}")
            g.wait_to_read()

    def per_tensor():
        for i, g in enumerate(grads):   # horovod.mxnet.DistributedTrainer._allreduce_grads
            hvd.allreduce_(g, average=False, name=f"hvd.{i}", priority=-i)

    def flat_hvd():
        hvd.allreduce_(flat, average=False, name="flat")

    def flat_mpi():
        comm.Allreduce(MPI.IN_PLACE, flat_np, op=MPI.SUM)

    def copy():
        np.copyto(dst, src)

    fns = {NAIVE: naive, HVD: per_tensor}
    for name, t in trainers.items():
        fns[name] = t._allreduce_grads
    fns.update({FLAT_HVD: flat_hvd, FLAT_MPI: flat_mpi, COPY: copy})
    times = common.interleaved_times(fns, repeats=repeats, warmup=warmup, before=comm.Barrier)
    out = common.slowest_rank_ms(comm, times, digits=3)   # the slower rank's time per round
    if out is not None:
        hv_env = common.env_subset(os.environ, ("HOROVOD_",))
        common.write_json(result, {
            "setting": setting, "size": size, "tensors": len(grads), "floats": floats,
            "bytes": nbytes, "horovod_env": hv_env,
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "groups": {k: [len(g) for g in t.groups] for k, t in trainers.items()},
            "times": out})
    comm.Barrier()


def plots(quick: bool) -> List[str]:
    """The plots a run writes under its ``--out`` (checked by ``output.check_paths``)."""
    return [PLOT]


def run(out_dir: str = "results", quick: bool = False) -> dict:
    repeats, warmup = (3, 1) if quick else (10, 2)
    common.say(f"bench allreduce: ResNet-50's 161 gradient tensors (102 MB) over 2 ranks, "
               f"one launch per Horovod setting{' (--quick)' if quick else ''}")
    base = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    base.pop("YASGD_OPS", None)
    hw = common.hardware({"omp_num_threads": "1 per rank"})
    envs = {"horovod-default": common.horovod_default_env(base),
            "yasgd": common.shipped_env(common.horovod_default_env(base))}
    results = {}
    with tempfile.TemporaryDirectory(prefix="yasgd-bench-ar-") as tmp:
        for setting, env in envs.items():
            common.say(f"  launch: {SETTINGS[setting]}: "
                       f"{common.env_subset(env, ('HOROVOD_',)) or 'no HOROVOD_* variable'}")
            path = os.path.join(tmp, f"{setting}.json")
            common.launch_ranks("yasgd.bench.allreduce",
                                ["--setting", setting, "--repeats", str(repeats), "--warmup",
                                 str(warmup), "--result", path], env=env, timeout=600)
            results[setting] = common.read_json(path)
    return report(results, out_dir, quick, repeats, warmup, hw)


def report(results: Dict[str, dict], out_dir: str, quick: bool, repeats: int,
           warmup: int, hw: dict = None) -> dict:
    any_res = next(iter(results.values()))
    nbytes, n = any_res["bytes"], any_res["size"]
    # the bound: the memory copy, measured in the same run (the faster of the launches)
    bound = min(r["times"][COPY]["median_ms"] for r in results.values())
    records, rows = [], []
    for setting, res in results.items():
        for way, t in res["times"].items():
            ms = t["median_ms"]
            busbw = 2 * (n - 1) / n * nbytes / (ms / 1e3) / 1e9
            rec = {"setting": setting, "way": way, "median_ms": ms, "samples_ms": t["samples_ms"],
                   "bus_bandwidth_GBps": round(busbw, 2), "ratio_to_copy_bound": round(ms / bound, 2)}
            records.append(rec)
            lo, hi = min(t["samples_ms"]), max(t["samples_ms"])
            rows.append([SETTINGS[setting], way, f"{ms:.1f}", f"{lo:.0f}-{hi:.0f}",
                         f"{busbw:.2f}", f"{ms / bound:.1f}x"])
    table = common.md_table(["Horovod setting", "way", "ms (median)", "range (ms)",
                             "bus bandwidth (GB/s)", "time / copy bound"], rows, "llrrrr")

    def t(setting, way):
        return results[setting]["times"][way]["median_ms"]

    ydef = next(k for k in results["yasgd"]["times"] if k.startswith(f"yasgd groups {DEFAULT_BUDGET_MB} MB"))
    yms = t("yasgd", ydef)
    acc = [common.acceptance(f"yasgd default ({ydef}, shipped settings) >= 1.5x faster than "
                             f"Horovod's default path ({HVD}, Horovod defaults)",
                             t("horovod-default", HVD) / yms, 1.5),
           common.acceptance("yasgd default >= 5x faster than the naive loop (Horovod defaults)",
                             t("horovod-default", NAIVE) / yms, 5.0),
           common.acceptance("yasgd default within 3x of the memory-copy bound (time / bound <= 3)",
                             yms / bound, 3.0, higher_is_better=False)]
    groups = any_res["groups"]
    notes = [
        f"{any_res['tensors']} tensors, {any_res['floats']:,} floats = {nbytes / 1e6:.1f} MB; "
        f"{n} ranks on this host (mpirun, OMP_NUM_THREADS=1 each); median of {repeats} "
        f"interleaved rounds after {warmup} warm-up round(s), a barrier before each call, each "
        f"call's time the slower rank's.",
        "Settings: " + "; ".join(
            f"{SETTINGS[s]}: {', '.join(f'{k}={v}' for k, v in r['horovod_env'].items()) or 'none'}"
            for s, r in results.items()) + ".",
        "Group sizes (tensors per group, backward order): " + "; ".join(
            f"{k.split(' (')[0]}: {len(v)} groups" for k, v in groups.items()) + ".",
        f"Bound: one np.copyto of the {nbytes / 1e6:.0f} MB buffer on both ranks at once, "
        f"{bound:.1f} ms (the faster of the launches); bus bandwidth = 2(n-1)/n x bytes / time.",
    ]
    labels = [f"{r['way']} [{r['setting']}]" for r in records]
    with outputs.together():
        plot = common.bar_chart(os.path.join(out_dir, PLOT), labels,
                                [r["median_ms"] for r in records], "ms to sum 102 MB over 2 ranks (median)",
                                "ResNet-50 gradients, 2 ranks" + (" (--quick)" if quick else ""),
                                ref=bound, ref_label="memory copy",
                                colors=["#4C72B0" if r["setting"] == "horovod-default" else "#55A868"
                                        for r in records])
        common.write_results(out_dir, NAME, records, table, notes=notes,
                             title="Allreduce of ResNet-50's gradients, 2 ranks (yasgd bench allreduce)",
                             setup={"ranks": n, "tensors": any_res["tensors"], "bytes": nbytes,
                                    "repeats": repeats, "warmup": warmup, "omp_num_threads": 1,
                                    "budgets_mb": list(BUDGETS_MB), "statistic": "median",
                                    "settings": {s: r["horovod_env"] for s, r in results.items()}},
                             quick=quick, acceptance_lines=acc, plots=[plot],
                             hw=hw or common.hardware({"omp_num_threads": "1 per rank"}))
    common.say(table)
    common.say(common.acceptance_table(acc))
    return {"records": records, "acceptance": acc}


def main(argv: List[str] = None) -> int:
    return common.bench_main("python -m yasgd.bench.allreduce", argv, worker, setting="yasgd", repeats=10, warmup=2)


if __name__ == "__main__":
    sys.exit(main())
