"""(b) Node loss under srun: a real two-node Slurm (tests/cluster/slurm_cluster.py), the
rendered Slurm script submitted with ``sbatch -N 2``, its ranks started by
``srun --mpi=pmix --kill-on-bad-exit=1``; node2's Slurm-started task (its rank)
SIGKILLed mid-epoch -> srun ends the step and the job exits non-zero within 60 s,
naming the lost task and host; nothing of the job is left on either node (the
slurmd stay up)."""
import os
import signal
import time

from common import CONFIG, describe, job_dir_of, job_env, job_processes, steps, wait_until
from netns import NODES, cmdline
from schedulers import render, slurm_output

SPE = 4


def test_b_node_loss_under_srun(cluster, slurm, data_root, tmp_path):
    args = " ".join([f"data.root={data_root}", "data.limit=0", "train.epochs=60",
                     "train.max_steps=0", "train.checkpoint_every=1", "train.eval_every=100",
                     "optim.lr=0.5", "train.log_interval=2"])
    script = render("slurm", str(tmp_path / "job.sbatch"), CONFIG)
    runs = str(tmp_path / "runs")
    job = slurm.sbatch(script, cwd=str(tmp_path), env=job_env(cluster, runs, YASGD_ARGS=args),
                       args=("-N", "2"))
    wait_until(lambda: os.path.isdir(runs) and os.listdir(runs), 90, "the job's run directory")
    job_dir = job_dir_of(runs, "slurm", job)
    wait_until(lambda: any(s >= 2 * SPE + 1 for s in steps(job_dir)), 150, "epoch 3", poll=0.05)
    tasks = [p for p in cluster.pids("node2") if "yasgd.cli" in " ".join(cmdline(p))]
    assert tasks, describe(cluster.pids("node2"))
    for pid in tasks:
        os.kill(pid, signal.SIGKILL)
    t_kill = time.time()
    state, code = slurm.wait(job, timeout=120)
    took = time.time() - t_kill
    out = slurm_output(str(tmp_path), job)
    assert "srun --mpi=pmix --kill-on-bad-exit=1" in out, out[-4000:]
    assert state == "FAILED" and code != 0, (state, code, out[-4000:])
    assert took < 60, f"{took:.1f} s"
    lost = [line for line in out.splitlines() if "node2" in line and "task 1" in line]
    assert lost, out[-4000:]
    with open(os.path.join(job_dir, "exit_status")) as f:
        status = int(f.read())
    assert status != 0
    try:
        wait_until(lambda: not any(job_processes(cluster, n) for n in NODES), 20,
                   "no job process on either node")
    except AssertionError as e:
        raise AssertionError(f"{e}: {[describe(job_processes(cluster, n)) for n in NODES]}")
    assert sorted(slurm.cmd("sinfo", "-h", "-N", "-o", "%N").stdout.split()) == list(NODES)
    print(f"\n(b) srun: node2's task SIGKILLed; job {job} {state}, exit {code} (job script "
          f"{status}) {took:.1f} s later: {lost[0].strip()!r}")
