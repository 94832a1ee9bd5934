"""A job script of each scheduler, run across node1 and node2 of the namespace cluster.

- PBS (ABCI 3.0) and UGE (ABCI 2019): the scheduler's environment is faked (no PBS or
  UGE is packaged), the hosts are real: ``PBS_NODEFILE`` / ``SGE_JOB_HOSTLIST`` name
  node1 and node2, the script runs on node1 (the job's first node, where a batch
  script runs) and its mpirun starts node2's ranks over ssh.
- Slurm: ``sbatch -N 2`` to the cluster's slurmctld (tests/cluster/slurm_cluster.py);
  the batch script runs on node1 and its srun (or mpirun) starts the ranks.

The PBS and UGE starters return a running :class:`common.Job` (on node1); the Slurm
one waits for the job and returns its id, final state, exit status and output.
"""
from __future__ import annotations

import os
import shutil
from typing import Dict, Sequence, Tuple

from common import REPO, Job, job_env
from netns import NODES, Cluster

SCRIPTS = {"pbs": "jobs/abci/pbs/train.sh", "uge": "jobs/abci/uge/train.sh",
           "slurm": "jobs/slurm/train.sbatch"}


def render(scheduler: str, out: str, config: str, overrides: Sequence[str] = (),
           ranks_per_node: int = 1, walltime: str = "0:10:00") -> str:
    """``yasgd jobs render --scheduler S --nodes 2 --gpus-per-node R ...`` into ``out``."""
    import sys
    sys.path.insert(0, REPO)
    from yasgd import jobs
    text = jobs.render(scheduler=scheduler, nodes=len(NODES), gpus_per_node=ranks_per_node,
                       config=config, walltime=walltime, overrides=list(overrides),
                       group="gab12345" if scheduler != "slurm" else None)
    with open(out, "w") as f:
        f.write(text)
    return out


def start_pbs(c: Cluster, script: str, work: str, env: Dict[str, str], jobid: str,
              ranks_per_node: int = 1) -> Job:
    """The PBS job as PBS runs it: a copy of the script in its spool, from the user's
    home, PBS_NODEFILE listing each node once per MPI process (mpiprocs)."""
    aux, spool, home = (os.path.join(work, d) for d in ("aux", "spool", "home"))
    for d in (aux, spool, home):
        os.makedirs(d, exist_ok=True)
    nodefile = os.path.join(aux, jobid)
    with open(nodefile, "w") as f:
        f.writelines(f"{n}\n" for n in NODES for _ in range(ranks_per_node))
    copy = os.path.join(spool, f"{jobid}.SC")
    shutil.copy(script, copy)
    env = dict(env, PBS_NODEFILE=nodefile, PBS_O_WORKDIR=REPO, PBS_JOBID=jobid,
               PBS_JOBNAME="yasgd", PBS_QUEUE="rt_HF", PBS_ENVIRONMENT="PBS_BATCH",
               PBS_O_HOST="node1", HOME=home)
    return Job(c, "node1", ["bash", copy], cwd=home, env=env, out=os.path.join(work, f"{jobid}.out"))


def start_uge(c: Cluster, script: str, work: str, env: Dict[str, str], jobid: str) -> Job:
    """The UGE job: SGE_JOB_HOSTLIST lists each node once, NHOSTS=2, `#$ -cwd`."""
    os.makedirs(work, exist_ok=True)
    hostlist = os.path.join(work, f"hostlist-{jobid}")
    with open(hostlist, "w") as f:
        f.writelines(f"{n}\n" for n in NODES)
    copy = os.path.join(work, f"job_script-{jobid}")
    shutil.copy(script, copy)
    env = dict(env, SGE_JOB_HOSTLIST=hostlist, NHOSTS=str(len(NODES)), JOB_ID=jobid,
               JOB_NAME="yasgd", SGE_O_WORKDIR=REPO, SGE_TASK_ID="undefined")
    return Job(c, "node1", ["bash", copy], cwd=REPO, env=env, out=os.path.join(work, f"{jobid}.out"))


def run_slurm(slurm, script: str, work: str, env: Dict[str, str], timeout: float,
              args: Tuple[str, ...] = ("-N", "2")) -> Tuple[str, str, int, str]:
    """sbatch -N 2 SCRIPT from ``work``; (job id, final state, exit status, output)."""
    job = slurm.sbatch(script, cwd=work, env=env, args=args)
    state, code = slurm.wait(job, timeout=timeout)
    return job, state, code, slurm_output(work, job)


def slurm_output(work: str, job: str) -> str:
    try:
        with open(os.path.join(work, f"yasgd-{job}.out"), errors="replace") as f:
            return f.read()
    except OSError:
        return "(no output file)"
