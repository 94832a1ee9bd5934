"""The environment variables that OpenMP, MXNet and Horovod read as numbers, names or a
file to write (and jobs/common.sh's host kind), checked before any of them starts: ``yasgd
train``, ``preflight`` and ``bench`` check their own environment, ``yasgd launch`` the one
its ranks get (jobs/common.sh's defaults included).

A bad value there is not refused by its reader in a way a user can act on: MXNet aborts the
process from C++ (``dmlc::ParamError``, "terminate called", exit 134) for an integer it
cannot parse, and waits for good on an engine with no worker thread; Horovod reads a number
it cannot parse as 0 (``HOROVOD_FUSION_THRESHOLD=abc`` turns tensor fusion off without a
word) and aborts on a negative cache capacity. Here each is one line naming the variable.
An empty value counts as unset, as it does for those readers. A number is read as those
readers read it: ASCII digits (C's ``strtol``/``istream``), never Python's wider ``int()``
("1_0" and non-ASCII digits abort MXNet); a boolean as dmlc's exact words.
"""
from __future__ import annotations

import math
import os
import re
from typing import List, Mapping, Optional

from yasgd.usage import NUMBER

INT32 = 2 ** 31 - 1
INT64 = 2 ** 63 - 1
DAY_MS = 24 * 3600 * 1000
MXNET_ENGINES = ("NaiveEngine", "ThreadedEngine", "ThreadedEnginePerDevice",
                 "ThreadedEnginePooled")
HOROVOD_LOG_LEVELS = ("trace", "debug", "info", "warning", "error", "fatal")
YASGD_OPS_BACKENDS = ("yasgd", "mxnet")   # yasgd.ops.library.BACKENDS (no MXNet import here)

CASE_FREE = ("HOROVOD_LOG_LEVEL",)   # Horovod lower-cases it; the other names are exact
#: dmlc::GetEnv<bool>'s words, any case, nothing around them (dmlc/parameter.h)
DMLC_BOOLS = ("true", "false", "1", "0")
#: what C's readers skip around a number (isspace), not Python's wider str.strip()
C_SPACE = " \t\n\v\f\r"
_INT = re.compile(r"[+-]?[0-9]+")
_COUNT = re.compile(r"[0-9]+")
_TASKS = re.compile(r"[0-9]+(\(x[0-9]+\))?(,[0-9]+(\(x[0-9]+\))?)*")   # srun's "4(x2),3"
#: what a launcher announces to each process it starts (its rank, the job's size), which
#: yasgd reads before Horovod starts
LAUNCHER = ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
            "OMPI_COMM_WORLD_LOCAL_SIZE", "HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK",
            "HOROVOD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS",
            "SLURM_PROCID", "SLURM_NODEID", "SLURM_STEP_NUM_TASKS")

#: variable -> (kind, lower bound or the allowed names, upper bound, who reads it)
SPEC = {
    "OMP_NUM_THREADS": ("int", 1, INT32, "OpenMP and MXNet"),
    "MXNET_OMP_MAX_THREADS": ("int", 1, INT32, "MXNet"),
    "MXNET_CPU_WORKER_NTHREADS": ("int", 1, INT32, "MXNet"),
    "MXNET_CPU_PRIORITY_NTHREADS": ("int", 1, INT32, "MXNet"),
    "MXNET_GPU_WORKER_NTHREADS": ("int", 1, INT32, "MXNet"),
    "MXNET_GPU_COPY_NTHREADS": ("int", 1, INT32, "MXNet"),
    "MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_FWD": ("int", 0, INT32, "MXNet"),
    "MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_BWD": ("int", 0, INT32, "MXNet"),
    "MXNET_EXEC_ENABLE_ADDTO": ("int", 0, 1, "MXNet"),
    "MXNET_CUDNN_AUTOTUNE_DEFAULT": ("int", 0, 2, "MXNet"),
    "MXNET_OPTIMIZER_AGGREGATION_SIZE": ("int", 1, INT32, "MXNet"),
    "MXNET_SUBGRAPH_VERBOSE": ("int", 0, INT32, "MXNet"),
    "MXNET_ENGINE_TYPE": ("name", MXNET_ENGINES, None, "MXNet"),
    "MXNET_MKLDNN_ENABLED": ("bool", DMLC_BOOLS, None, "MXNet"),
    "HOROVOD_FUSION_THRESHOLD": ("int", 0, INT64, "Horovod"),
    # ms; 0: no wait between cycles, at most a day (a longer wait stalls every collective)
    "HOROVOD_CYCLE_TIME": ("float", 0.0, DAY_MS, "Horovod"),
    "HOROVOD_CACHE_CAPACITY": ("int", 0, INT32, "Horovod"),
    "HOROVOD_HIERARCHICAL_ALLREDUCE": ("int", 0, 1, "Horovod"),
    "HOROVOD_STALL_CHECK_TIME_SECONDS": ("int", 0, INT32, "Horovod"),
    "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": ("int", 0, INT32, "Horovod"),
    "HOROVOD_LOG_LEVEL": ("name", HOROVOD_LOG_LEVELS, None, "Horovod"),
    "YASGD_OPS": ("name", YASGD_OPS_BACKENDS, None, "yasgd.ops"),
    "YASGD_HOST_KIND": ("name", ("cpu", "gpu"), None, "jobs/common.sh"),
    # Horovod makes no folder for it, and writes no timeline (without a word) where it can't
    "HOROVOD_TIMELINE": ("file", None, None, "Horovod"),
    **{name: ("count", None, None, "yasgd; a launcher sets it") for name in LAUNCHER},
    "SLURM_STEP_TASKS_PER_NODE": ("tasks", None, None, "yasgd; srun sets it"),
}


def task_counts(text: str) -> Optional[List[int]]:
    """srun's tasks per node (``SLURM_STEP_TASKS_PER_NODE``: "4(x2),3" is [4, 4, 3]), or None
    where ``text`` is not of that form."""
    if not _TASKS.fullmatch(text):
        return None
    counts: List[int] = []
    for part in text.split(","):
        count, _, times = part.partition("(x")
        counts += [int(count)] * (int(times[:-1]) if times else 1)
    return counts


def launcher_count(name: str, env: Optional[Mapping[str, str]] = None) -> Optional[int]:
    """Variable ``name`` of ``env`` (default: os.environ) as a launcher writes a rank or a
    count (ASCII digits alone: str.isdigit also takes "²"), or None."""
    value = (os.environ if env is None else env).get(name, "")
    return int(value) if _COUNT.fullmatch(value) else None


def value_problem(name: str, value: str) -> Optional[str]:
    """Why ``value`` is not one that ``name``'s reader takes, or None."""
    kind, lo, hi, _ = SPEC[name]
    text = value.strip(C_SPACE)
    if kind == "int":
        number = int(text) if _INT.fullmatch(text) else None
        if number is None or not lo <= number <= hi:
            return f"must be an integer in [{lo}, {hi}]"
    elif kind == "float":
        number = float(text) if NUMBER.fullmatch(text) else math.nan
        if not (math.isfinite(number) and number >= lo and (hi is None or number <= hi)):
            return f"must be a finite number >= {lo:g}" if hi is None else \
                f"must be a finite number in [{lo:g}, {hi:.0f}]"
    elif kind == "count":
        if not _COUNT.fullmatch(value):
            return "must be a count in ASCII digits, as a launcher writes it"
    elif kind == "tasks":
        if task_counts(value) is None:
            return "must be task counts N or N(xM), comma-separated, as srun writes them"
    elif kind == "file":
        # tried, not read off the mode bits (which root passes everywhere, /proc included):
        # an entry made and removed in its folder, the file itself opened to append
        from yasgd import outputs, writable
        why = outputs.checked(writable.file_problem, value)
        if why:
            return f"must name a regular file that can be written in an existing folder ({why})"
    elif kind == "bool":
        if value.lower() not in lo:
            return f"must be one of {', '.join(lo)} (any case, no spaces)"
    elif (text.lower() if name in CASE_FREE else value) not in lo:
        return f"must be one of {', '.join(lo)}"
    return None


def problem(env: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The first variable of ``env`` (default: os.environ) whose value its reader cannot
    take, as one sentence, or None."""
    env = os.environ if env is None else env
    for name in SPEC:
        value = env.get(name)
        if value is None or not value.strip():
            continue
        why = value_problem(name, value)
        if why:
            return (f"environment variable {name} {why}, got {value!r} "
                    f"(read by {SPEC[name][3]})")
    return None
