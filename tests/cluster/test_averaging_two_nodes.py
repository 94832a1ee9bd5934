"""Horovod across the two nodes: tests/multiproc/test_averaging.py (N ranks x batch b
== 1 process x batch N*b within its tolerances, == Horovod's stock trainer, identical
parameters and groups on every rank) run by mpirun over ssh with 2 ranks (one per
node) and 4 ranks (two per node, --oversubscribe), plus tests/cluster/rank_checks.py
on every rank: Horovod's local and cross communicator sizes, the ranks' hosts, and
the veth byte counters that prove the gradients crossed the link.

Horovod turns hierarchical allreduce off without NCCL, so CPU ranks have no second
(hierarchical) case to run.
"""
import glob
import json
import os
import time

import pytest

from common import PYTHON, REPO, Job, describe, job_processes, wait_until
from netns import NODES


def launch(cluster, tmp_path, per_node: int) -> Job:
    import sys
    sys.path.insert(0, REPO)
    from yasgd.launch import single_copy_allowed
    np_ = per_node * len(NODES)
    report = str(tmp_path / "report")
    env = cluster.mpi_env(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1",
                          YASGD_CLUSTER_PER_NODE=str(per_node), YASGD_CLUSTER_REPORT=report,
                          PYTHONPATH=REPO)
    mpi = ["mpirun", "-np", str(np_), "--host", ",".join(f"{n}:{per_node}" for n in NODES),
           "--bind-to", "none", "--oversubscribe"]
    if not single_copy_allowed():
        mpi += ["--mca", "btl_vader_single_copy_mechanism", "none"]
    for var in ("OMP_NUM_THREADS", "PYTHONUNBUFFERED", "PYTHONPATH", "YASGD_CLUSTER_PER_NODE",
                "YASGD_CLUSTER_REPORT"):
        mpi += ["-x", var]
    # jobs/common.sh's Horovod/MXNet tuning, exported to every rank as the job scripts do
    mpi += ["-x", "HOROVOD_FUSION_THRESHOLD", "-x", "HOROVOD_CYCLE_TIME",
            "-x", "HOROVOD_CACHE_CAPACITY", "-x", "HOROVOD_LOG_LEVEL"]
    cmd = ["bash", "-c", 'source jobs/common.sh && exec "$@"', "_", *mpi, PYTHON, "-m", "pytest",
           "-q", "-p", "no:cacheprovider", "tests/multiproc/test_averaging.py",
           "tests/cluster/rank_checks.py"]
    return Job(cluster, "node1", cmd, cwd=REPO, env=env, out=str(tmp_path / "ranks.out"))


@pytest.mark.parametrize("per_node", [1, 2], ids=["2-ranks-1-per-node", "4-ranks-2-per-node"])
def test_averaging_across_nodes(cluster, tmp_path, jobs, per_node):
    tx0 = {n: cluster.tx_bytes(n) for n in NODES}
    t0 = time.time()
    job = launch(cluster, tmp_path, per_node)
    jobs.append(job)
    rc = job.wait(timeout=300)
    took = time.time() - t0
    out = job.output
    np_ = per_node * len(NODES)
    assert rc == 0, out[-6000:]
    assert "failed" not in out and out.count(" passed") == np_, out[-6000:]
    reports = [json.load(open(p)) for p in sorted(glob.glob(str(tmp_path / "report.*")))]
    assert len(reports) == np_, reports
    for r in reports:
        assert (r["local_size"], r["cross_size"]) == (per_node, 2), r
        assert r["host"] == NODES[r["rank"] // per_node], r
        need = r["steps"] * r["gradient_bytes_per_step"]
        assert r["tx"] >= need and r["rx"] >= need, r
    grown = {n: cluster.tx_bytes(n) - tx0[n] for n in NODES}
    need = reports[0]["steps"] * reports[0]["gradient_bytes_per_step"]
    assert all(g >= need for g in grown.values()), grown
    wait_until(lambda: not any(job_processes(cluster, n) for n in NODES), 15,
               "the job's processes to end on both nodes")
    r0 = reports[0]
    print(f"\n{np_} ranks ({per_node}/node): local_size {r0['local_size']}, cross_size "
          f"{r0['cross_size']}; averaging training {r0['steps']} steps x "
          f"{r0['gradient_bytes_per_step']} gradient bytes; veth tx/rx during it per rank: "
          + ", ".join(f"rank {r['rank']}@{r['host']} {r['tx']}/{r['rx']}" for r in reports)
          + f"; whole launch veth tx {grown}; {took:.1f} s")
    assert not describe(job_processes(cluster, "node2"))
