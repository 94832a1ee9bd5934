"""What the two-node tests share: job environments, bounded jobs run in a node, the
Fashion-MNIST cut, run-directory checks."""
from __future__ import annotations

import json
import os
import re
import shlex
import signal
import struct
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence

import numpy as np

from netns import NODES, Cluster, alive, cmdline

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON = sys.executable
CONFIG = "examples/configs/tiny.yaml"
JOB_TIMEOUT = 180          # seconds for one tiny two-node job (it takes about 25 s here)
MODULE_VARS = ("BASH_FUNC_module%%", "BASH_FUNC_module()", "BASH_FUNC_ml%%", "MODULESHOME",
               "MODULEPATH", "LOADEDMODULES", "MODULES_CMD")


def job_env(cluster: Cluster, runs: str, **extra: str) -> Dict[str, str]:
    """A batch job's environment on node1: no `module` command, no scheduler variables
    of this host, one OpenMP thread per rank, OpenMPI over the veth with the cluster's
    ssh (``Cluster.mpi_env``), run directories under ``runs``."""
    env = {k: v for k, v in os.environ.items()
           if k not in MODULE_VARS and not k.startswith(("PBS_", "SGE_", "SLURM_", "OMPI_",
                                                          "PMIX_", "YASGD_"))}
    env = cluster.mpi_env(env)
    env.update(OMP_NUM_THREADS="1", YASGD_CONFIG=CONFIG, YASGD_RUNS=runs, YASGD_PYTHON=PYTHON,
               YASGD_ARGS="", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def write_fmnist(out: str, n_train: int = 1024, n_test: int = 512) -> str:
    """Fashion-MNIST's first images as IDX files (tests/e2e/test_resume.py's cut)."""
    sys.path.insert(0, REPO)
    from yasgd.data import fashion_mnist as fm
    os.makedirs(out, exist_ok=True)
    for split, n in (("train", n_train), ("test", n_test)):
        x, y = fm.load("/usr/share/datasets/fashion-mnist", split)
        images, labels = fm.FILES[split]
        with open(os.path.join(out, images), "wb") as f:
            f.write(struct.pack(">IIII", 0x803, n, 28, 28) + x[:n].tobytes())
        with open(os.path.join(out, labels), "wb") as f:
            f.write(struct.pack(">II", 0x801, n) + y[:n].astype(np.uint8).tobytes())
    return out


class Job:
    """A command run on one node of the cluster in a session of its own, output in a
    file; ``kill()`` ends its session and every job process left on either node."""

    def __init__(self, cluster: Cluster, node: str, cmd: Sequence[str], cwd: str,
                 env: Dict[str, str], out: str):
        self.c, self.out_path = cluster, out
        self.t0 = time.time()
        with open(out, "w") as f:
            self.proc = cluster.popen(node, list(cmd), cwd=cwd, env=env, stdout=f,
                                      stderr=subprocess.STDOUT)
        self.rc: Optional[int] = None
        self.seconds = 0.0

    def wait(self, timeout: float = JOB_TIMEOUT) -> int:
        try:
            self.rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the job did not end in {timeout:.0f} s:\n{self.tail()}")
        self.seconds = time.time() - self.t0
        return self.rc

    @property
    def output(self) -> str:
        try:
            with open(self.out_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def tail(self, n: int = 5000) -> str:
        return self.output[-n:]

    def kill(self) -> None:
        kill_session(self.proc.pid)
        for node in NODES:
            for pid in job_processes(self.c, node):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def kill_session(sid: int) -> None:
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[3]) == sid:
                os.kill(int(entry), signal.SIGKILL)
        except (OSError, IndexError, ValueError):
            continue


def job_processes(cluster: Cluster, node: str) -> List[int]:
    """Every process of ``node`` that is not one of the cluster's daemons (the sshd
    listeners, slurmctld, slurmd, munged): what a job leaves behind."""
    daemons = cluster.daemon_pids()
    return [p for p in cluster.pids(node) if p not in daemons and alive(p)
            and not " ".join(cmdline(p)).startswith("slurmctld: slurmscriptd")]  # its helper


def describe(pids: Sequence[int]) -> List[str]:
    return [f"{p}: {' '.join(cmdline(p))[:160]}" for p in pids]


def wait_until(cond, timeout: float, what: str, poll: float = 0.1) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def events(train_dir: str) -> List[dict]:
    try:
        with open(os.path.join(train_dir, "metrics.jsonl")) as f:
            return [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return []


def train_dirs(job_dir: str) -> List[str]:
    try:
        return sorted(os.path.join(job_dir, d) for d in os.listdir(job_dir)
                      if os.path.isfile(os.path.join(job_dir, d, "metrics.jsonl")))
    except OSError:
        return []


def steps(job_dir: str) -> List[int]:
    return [e["step"] for d in train_dirs(job_dir) for e in events(d) if e["event"] == "train"]


def job_dir_of(runs: str, sched: str, jobid: str) -> str:
    dirs = [d for d in os.listdir(runs) if re.fullmatch(rf"\S+-{sched}-{re.escape(jobid)}(\.\d+)?", d)]
    assert len(dirs) == 1, dirs
    return os.path.join(runs, dirs[0])


def check_run_dir(output: str, runs: str, sched: str, jobid: str, launcher: str,
                  ranks_per_node: int = 1) -> str:
    """The job's run directory across node1 and node2: hostfile, bind lines of every
    rank on its node, exit status 0, the launcher's line, the training's own run
    directory with its end record and world size. Returns the training's directory."""
    job_dir = job_dir_of(runs, sched, jobid)
    ranks = ranks_per_node * len(NODES)
    with open(os.path.join(job_dir, "hostfile")) as f:
        assert f.read() == "".join(f"{n} slots={ranks_per_node}\n" for n in NODES)
    for name in ("config.yaml", "provenance.json", "pip-freeze.txt", "hostlist.orig",
                 "job-script", "job.txt", "command.sh"):
        assert os.path.isfile(os.path.join(job_dir, name)), name
    with open(os.path.join(job_dir, "provenance.json")) as f:
        hosts = json.load(f)["hosts"]
    assert {h.split()[0] for h in hosts} == set(NODES), hosts
    with open(os.path.join(job_dir, "command.sh")) as f:
        command = shlex.split(f.read())
    assert command[0] == launcher, command[:6]
    with open(os.path.join(job_dir, "exit_status")) as f:
        assert f.read().strip() == "0"
    assert f"{sched} job {jobid}: 2 node(s), {ranks} rank(s)" in output, output[-3000:]
    assert f"{launcher} exited with status 0" in output, output[-3000:]
    with open(os.path.join(job_dir, "job.log")) as f:
        log = f.read()
    for r in range(ranks):
        node = NODES[r // ranks_per_node]
        lr = r % ranks_per_node
        assert f"[bind] rank {r} local {lr}/{ranks_per_node} on {node}:" in log, log[-3000:]
    m = re.search(r"^run directory: (\S+)$", output, re.M)
    assert m, output[-3000:]
    train_dir = m.group(1)
    assert os.path.dirname(train_dir) == job_dir
    ev = events(train_dir)
    assert ev and ev[-1]["event"] == "end", ev[-2:]
    with open(os.path.join(train_dir, "provenance.json")) as f:
        assert json.load(f)["world_size"] == ranks
    return train_dir
