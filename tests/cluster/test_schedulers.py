"""The job scripts across node1 and node2, each a tiny training to completion
(examples/configs/tiny.yaml, 2 ranks, one per node):

- PBS (ABCI 3.0) and UGE (ABCI 2019), their environments faked, the hosts real:
  mpirun starts node2's rank over ssh;
- Slurm for real: ``sbatch -N 2`` of the rendered script (``yasgd jobs render
  --scheduler slurm --nodes 2 --gpus-per-node 1``) to a slurmctld with one slurmd per
  node; the ranks started by ``srun --mpi=pmix`` (the default across nodes) and, with
  YASGD_LAUNCHER=mpirun, by mpirun (which starts its node2 daemon through srun).
"""
import os
import shlex
import time

import pytest

from common import CONFIG, JOB_TIMEOUT, REPO, check_run_dir, job_env
from schedulers import SCRIPTS, render, run_slurm, start_pbs, start_uge


def test_pbs_script_across_two_nodes(cluster, tmp_path, jobs):
    """jobs/abci/pbs/train.sh as it is (the config from YASGD_CONFIG)."""
    runs = str(tmp_path / "runs")
    job = start_pbs(cluster, os.path.join(REPO, SCRIPTS["pbs"]), str(tmp_path),
                    job_env(cluster, runs), "123.pbs1")
    jobs.append(job)
    assert job.wait() == 0, job.tail()
    check_run_dir(job.output, runs, "pbs", "123.pbs1", launcher="mpirun")
    print(f"\npbs (jobs/abci/pbs/train.sh): node1 + node2, {job.seconds:.1f} s")


def test_uge_rendered_across_two_nodes(cluster, tmp_path, jobs):
    """The script `yasgd jobs render --scheduler uge --nodes 2` writes (#$ -l rt_F=2)."""
    script = render("uge", str(tmp_path / "job.sh"), CONFIG)
    with open(script) as f:
        assert "#$ -l rt_F=2\n" in f.read()
    runs = str(tmp_path / "runs")
    job = start_uge(cluster, script, str(tmp_path), job_env(cluster, runs), "4242")
    jobs.append(job)
    assert job.wait() == 0, job.tail()
    check_run_dir(job.output, runs, "uge", "4242", launcher="mpirun")
    print(f"\nuge (rendered): node1 + node2, {job.seconds:.1f} s")


@pytest.mark.parametrize("launcher", ["srun", "mpirun"])
def test_slurm_sbatch_two_nodes(cluster, slurm, tmp_path, launcher):
    script = render("slurm", str(tmp_path / "job.sbatch"), CONFIG)
    with open(script) as f:
        text = f.read()
    assert "#SBATCH --nodes=2\n" in text and "#SBATCH --ntasks-per-node=1\n" in text
    runs = str(tmp_path / "runs")
    env = job_env(cluster, runs, **({"YASGD_LAUNCHER": "mpirun"} if launcher == "mpirun" else {}))
    t0 = time.time()
    job, state, code, out = run_slurm(slurm, script, str(tmp_path), env, timeout=JOB_TIMEOUT)
    took = time.time() - t0
    assert (state, code) == ("COMPLETED", 0), out[-5000:] + slurm.logs()
    info = slurm.job_info(job)
    assert info.get("NodeList") == "node[1-2]" and info.get("NumNodes") == "2", info
    job_dir = os.path.dirname(check_run_dir(out, runs, "slurm", job, launcher=launcher))
    with open(os.path.join(job_dir, "job.txt")) as f:
        txt = f.read()
    if launcher == "srun":
        assert "launcher=srun --mpi=pmix" in txt, txt
        with open(os.path.join(job_dir, "command.sh")) as f:
            cmd = shlex.split(f.read())
        assert cmd[:9] == ["srun", "--mpi=pmix", "--kill-on-bad-exit=1", "--cpu-bind=none",
                           "--nodes=2", "--ntasks=2", "--export=ALL,OMPI_COMM_WORLD_SIZE=2",
                           "--ntasks-per-node=1", "bash"], cmd
    else:
        assert "launcher=mpirun\n" in txt, txt
    print(f"\nslurm sbatch -N 2 ({launcher}): job {job} {state} on {info['NodeList']}, "
          f"{took:.1f} s")
