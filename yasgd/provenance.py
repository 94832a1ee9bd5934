"""Provenance of a run (Fujitsu's ABCI job scripts record the same): resolved
environment, package versions, git revision, host list, world size.

Written as ``provenance.json`` into the run directory, by rank 0 or by a job
script before it starts MPI (``yasgd provenance RUN_DIR``).
"""
from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
import time
from typing import Any, Dict, Optional, Tuple

from yasgd import UsageError

# Environment variables that change what a run does or how fast it runs.
ENV_PREFIXES = ("OMP_", "MXNET_", "HOROVOD_", "NCCL_", "OMPI_COMM_WORLD_SIZE", "UCX_",
                "PBS_JOBID", "PBS_NODEFILE", "SGE_", "JOB_ID", "NHOSTS", "SLURM_JOB",
                "SLURM_NNODES", "SLURM_NTASKS", "CUDA_VISIBLE_DEVICES", "KMP_", "YASGD_")
PACKAGES = ("mxnet", "mxnet-cu110", "horovod", "numpy", "gluoncv", "mpi4py", "mlperf-logging",
            "opencv-python", "pyyaml")


def _git_revision() -> Dict[str, Any]:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        rev = subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", here, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return {"revision": rev or None, "dirty": bool(dirty)}
    except (OSError, subprocess.SubprocessError):
        return {"revision": None, "dirty": None}


def _versions() -> Dict[str, Optional[str]]:
    from importlib import metadata
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def _hosts(hostfile: Optional[str]) -> Tuple[list, Optional[str]]:
    """(the job's hosts, None), or ([], why not) when its host list cannot be read: the
    record of a running training is no reason to stop it."""
    from yasgd.argtypes import check_hostfile
    for what, path in (("--hostfile", hostfile), ("$PBS_NODEFILE", os.environ.get("PBS_NODEFILE")),
                       ("$SGE_JOB_HOSTLIST", os.environ.get("SGE_JOB_HOSTLIST"))):
        if path and os.path.isfile(path):
            try:
                return check_hostfile(path, what), None
            except UsageError as e:
                return [], str(e)
    if os.environ.get("SLURM_JOB_NODELIST"):
        return [os.environ["SLURM_JOB_NODELIST"]], None
    return [socket.gethostname()], None


def collect(world_size: Optional[int] = None, hostfile: Optional[str] = None) -> Dict[str, Any]:
    env = {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)}
    hosts, hosts_problem = _hosts(hostfile)
    out = {
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "argv": sys.argv,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "host": socket.gethostname(),
        "hosts": hosts,
        "world_size": world_size,
        "cpu_count": os.cpu_count(),
        "git": _git_revision(),
        "packages": _versions(),
        "environment": env,
    }
    if hosts_problem:
        out["hosts_problem"] = hosts_problem
    return out


def write(run_dir: str, world_size: Optional[int] = None, hostfile: Optional[str] = None,
          name: str = "provenance.json") -> str:
    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, name)
    with open(path, "w") as f:
        json.dump(collect(world_size, hostfile), f, indent=1)
    return path
