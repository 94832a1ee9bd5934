"""Starting a benchmark's timed processes, and the environments they run with.

* :func:`shipped_env` / :func:`horovod_default_env` -- the tuning variables of
  ``jobs/common.sh`` versus Horovod's and MXNet's own defaults (Horovod reads them at
  ``hvd.init``, so each setting needs its own launch);
* :func:`launch_ranks` -- a 2-rank worker through ``python -m yasgd.launch`` (mpirun);
  :func:`run_process` -- a worker as one process; each ends with the bench, however the
  bench ends (``PR_SET_PDEATHSIG``: SIGTERM, on which the launcher stops its ranks);
* :func:`bench_main` -- the script entry of a benchmark module (``yasgd bench NAME``'s
  options, or ``--worker`` for the processes it launches itself).
"""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Dict, Optional, Sequence

from yasgd.bench.machine import REPO_ROOT
from yasgd.supervise import die_with_parent

COMMON_SH = os.path.join(REPO_ROOT, "jobs", "common.sh")


def shipped_env(base: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """``base`` (default os.environ) plus the tuning variables as ``jobs/common.sh``
    sets them. Variables already set in ``base`` win, as in the script itself."""
    env = dict(os.environ if base is None else base)
    if os.path.isfile(COMMON_SH):
        out = subprocess.run(["bash", "-c", f"source '{COMMON_SH}' >/dev/null; env -0"],
                             env=env, capture_output=True, timeout=30)
        if out.returncode == 0:
            for item in out.stdout.decode(errors="replace").split("\0"):
                k, sep, v = item.partition("=")
                if sep and k.startswith(("OMP_", "MXNET_", "HOROVOD_", "NCCL_", "PYTHONUNBUF")):
                    env[k] = v
            return env
    # installed without the jobs/ folder: the same values, by hand
    for k, v in (("OMP_NUM_THREADS", "1"), ("HOROVOD_FUSION_THRESHOLD", "0"),
                 ("HOROVOD_CYCLE_TIME", "5"), ("HOROVOD_CACHE_CAPACITY", "1024"),
                 ("HOROVOD_HIERARCHICAL_ALLREDUCE", "0"),
                 ("MXNET_OPTIMIZER_AGGREGATION_SIZE", "55")):
        env.setdefault(k, v)
    return env


def horovod_default_env(base: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """``base`` without any HOROVOD_* or MXNET_OPTIMIZER_* variable: Horovod's and
    MXNet's own defaults (Horovod's own fusion buffer size and cycle time, MXNet's own
    optimizer aggregation size)."""
    env = dict(os.environ if base is None else base)
    for k in list(env):
        if k.startswith(("HOROVOD_", "MXNET_OPTIMIZER_")):
            del env[k]
    return env


def env_subset(env: Dict[str, str], prefixes: Sequence[str] = ("HOROVOD_", "OMP_",
                                                                 "MXNET_OPTIMIZER")) -> Dict[str, str]:
    return {k: v for k, v in sorted(env.items()) if k.startswith(tuple(prefixes))}


def launch_ranks(module: str, args: Sequence[str], env: Dict[str, str], np_: int = 2,
                 timeout: float = 600.0) -> None:
    """Run ``python -m module --worker ARGS`` on ``np_`` ranks through yasgd.launch
    (mpirun) with exactly ``env`` (``--no-tuning-defaults``: the caller chose every tuning
    variable, e.g. :func:`horovod_default_env` has none); raises RuntimeError when it fails
    (mpirun ends every rank if one dies)."""
    cmd = [sys.executable, "-m", "yasgd.launch", "-np", str(np_), "--timeout", str(int(timeout)),
           "--no-tuning-defaults",
           "--", sys.executable, "-m", module, "--worker"] + list(args)
    proc = subprocess.run(cmd, env=env, cwd=REPO_ROOT, preexec_fn=die_with_parent())
    if proc.returncode != 0:
        raise RuntimeError(f"{module} on {np_} ranks failed with exit status {proc.returncode} "
                           f"({' '.join(cmd)})")


def run_process(module: str, args: Sequence[str], env: Dict[str, str],
                timeout: float = 600.0, log: Optional[str] = None) -> None:
    """Run ``python -m module --worker ARGS`` as one process (its own OMP settings).
    ``log``: a file that takes the process's stdout and stderr (for processes that run
    side by side); its last lines are in the error when the process fails."""
    cmd = [sys.executable, "-m", module, "--worker"] + list(args)
    tie = die_with_parent()
    if log is None:
        proc = subprocess.run(cmd, env=env, cwd=REPO_ROOT, timeout=timeout, preexec_fn=tie)
    else:
        with open(log, "w") as f:
            proc = subprocess.run(cmd, env=env, cwd=REPO_ROOT, timeout=timeout, stdout=f,
                                  stderr=subprocess.STDOUT, preexec_fn=tie)
    if proc.returncode != 0:
        tail = ""
        if log is not None:
            with open(log, errors="replace") as f:
                tail = "; last lines of " + log + ":\n" + "".join(f.readlines()[-8:])
        raise RuntimeError(f"{module} failed with exit status {proc.returncode} "
                           f"({' '.join(cmd)}){tail}")


def bench_main(prog: str, argv=None, worker=None, **worker_defaults) -> int:
    """The script entry of a benchmark module (``python -m yasgd.bench.NAME``).

    A user's call runs ``yasgd bench NAME`` with the same options (the CLI imports the
    module and calls its ``run``); ``--worker`` (internal, for a module with a ``worker``:
    how ``run`` launches its own timed processes, e.g. under mpirun) calls
    ``worker(**options)`` with ``--result PATH`` and one ``--NAME VALUE`` option per
    entry of ``worker_defaults`` (typed by its default value).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if worker is None or "--worker" not in argv:    # a user's call: the CLI's checks
        from yasgd import cli
        return cli.main(["bench", prog.rsplit(".", 1)[-1], *argv])
    import argparse
    from yasgd import usage
    ap = usage.Parser(prog=prog)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    for name, default in worker_defaults.items():
        ap.add_argument(f"--{name}", type=type(default), default=default, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    worker(result=args.result, **{name: getattr(args, name) for name in worker_defaults})
    return 0
