"""The machine and the software stack behind a benchmark's numbers (provenance).

* :func:`hardware` -- CPU model and flags from /proc/cpuinfo, cores, memory, load average,
  Python/MXNet/Horovod/NumPy/... versions, OMP threads, every tuning variable
  (``HOROVOD_*``, ``MXNET_*``, ...), git revision, as one JSON-able dict;
* :func:`hardware_line` -- the same in one Markdown sentence, under every table;
* :func:`onednn_info` -- the oneDNN version inside MXNet and the instruction set it
  dispatches to (DNNL_VERBOSE of a child process).
"""
from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from typing import Dict, Iterable, List, Optional

#: The checkout yasgd runs from (its git revision is part of every record).
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: CPU flags worth stating next to a number (vector width, bf16/fp16 support).
FLAGS_OF_INTEREST = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni",
                     "amx_bf16", "amx_tile")
#: Prefixes of the environment variables that change how fast a run is.
TUNING_PREFIXES = ("OMP_", "MXNET_", "HOROVOD_", "KMP_", "YASGD_OPS")


# -- the machine ---------------------------------------------------------------------
def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags() -> set:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def memory_gib() -> Optional[float]:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 2 ** 20, 1)
    except (OSError, ValueError):
        pass
    return None


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def _version(module: str) -> Optional[str]:
    """A package's version, importing it only when its metadata is missing."""
    from importlib import metadata
    names = {"cv2": "opencv-python", "mxnet": "mxnet"}
    try:
        return metadata.version(names.get(module, module))
    except metadata.PackageNotFoundError:
        pass
    try:
        mod = __import__(module)
        return getattr(mod, "__version__", "?")
    except Exception:  # noqa: BLE001 -- not installed / not importable: say so
        return None


def _git_revision() -> Optional[str]:
    try:
        rev = subprocess.run(["git", "-C", REPO_ROOT, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO_ROOT, "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               timeout=10).stdout.strip()
        return (rev + ("+dirty" if dirty else "")) if rev else None
    except (OSError, subprocess.SubprocessError):
        return None


def hardware(extra: Optional[Dict[str, object]] = None) -> Dict[str, object]:
    """The machine and software stack, as one JSON-able dict.

    Keys kept stable for yasgd.bench.data / ops_micro: cpu, cores, load_avg_1min, python,
    mxnet, numpy, opencv, omp_num_threads, platform.
    """
    if "mxnet" in sys.modules:
        mxv = sys.modules["mxnet"].__version__
    else:
        mxv = _version("mxnet")
    flags = cpu_flags()
    hw: Dict[str, object] = {
        "cpu": cpu_model(), "cores": cores(), "memory_gib": memory_gib(),
        "cpu_flags": [f for f in FLAGS_OF_INTEREST if f in flags],
        "load_avg_1min": round(os.getloadavg()[0], 2),
        "python": platform.python_version(), "mxnet": mxv, "horovod": _version("horovod"),
        "numpy": _version("numpy"), "mpi4py": _version("mpi4py"), "opencv": _version("cv2"),
        "gluoncv": _version("gluoncv"), "matplotlib": _version("matplotlib"),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "unset"),
        "tuning_env": {k: v for k, v in sorted(os.environ.items())
                       if k.startswith(TUNING_PREFIXES)},
        "platform": platform.platform(), "git": _git_revision(),
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if extra:
        hw.update(extra)
    return hw


def machine_label(hw: Optional[Dict[str, object]] = None) -> str:
    """The machine in a few words (CPU, cores, memory): what a cached training run records
    of the machine it trained on, so that a table built later names where its runs ran."""
    hw = hw or hardware()
    mem = f", {hw['memory_gib']} GiB RAM" if hw.get("memory_gib") else ""
    return f"{hw.get('cpu')}, {hw.get('cores')} cores{mem}"


def runs_on(records: Iterable[Dict[str, object]]) -> List[List[object]]:
    """[[machine, runs], ...] over the records' ``machine`` (most runs first); runs that
    did not record one count under "not recorded"."""
    counts: Dict[str, int] = {}
    for r in records:
        m = str(r.get("machine") or "not recorded")
        counts[m] = counts.get(m, 0) + 1
    return [[m, n] for m, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


def hardware_line(hw: Dict[str, object]) -> str:
    """One Markdown sentence: the machine and the software behind a table.

    With ``runs_on`` (a table of cached runs, yasgd.bench.study_run), the machines its runs
    trained on come first and the rest describes the machine that built the table."""
    flags = ", ".join(hw.get("cpu_flags") or []) or "n/a"
    sw = [f"Python {hw.get('python')}", f"MXNet {hw.get('mxnet')}"]
    for key, label in (("horovod", "Horovod"), ("numpy", "NumPy"), ("mpi4py", "mpi4py"),
                       ("opencv", "OpenCV")):
        if hw.get(key):
            sw.append(f"{label} {hw[key]}")
    lead = "Hardware"
    if hw.get("runs_on"):
        lead = ("Runs trained on: " + "; ".join(
            f"{m} ({n} run{'s' if n != 1 else ''})" for m, n in hw["runs_on"])
            + ". Table built on")
    line = (f"{lead}: {machine_label(hw)} (flags: {flags}); "
            f"1-min load average {hw.get('load_avg_1min')} at start"
            + (f", {hw['load_avg_1min_end']} at end" if "load_avg_1min_end" in hw else "")
            + ". Software: "
            f"{', '.join(sw)}; {hw.get('platform')}")
    if hw.get("git"):
        line += f"; yasgd git {hw['git']}"
    return line + "."


def onednn_info(timeout: float = 120.0) -> Dict[str, str]:
    """oneDNN's version and the ISA it dispatches to here (from DNNL_VERBOSE of a tiny
    fp32 and bf16 FullyConnected in a child process); {} when it cannot tell."""
    code = ("import mxnet as mx\n"
            "from mxnet.contrib.amp import amp\n"
            "a = mx.nd.ones((64, 64))\n"
            "mx.nd.FullyConnected(a, a, no_bias=True, num_hidden=64).wait_to_read()\n"
            "b = mx.nd.amp_cast(a, dtype=amp.bfloat16)\n"
            "mx.nd.FullyConnected(b, b, no_bias=True, num_hidden=64).wait_to_read()\n")
    env = dict(os.environ, DNNL_VERBOSE="1", MKLDNN_VERBOSE="1", OMP_NUM_THREADS="1")
    try:
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=timeout).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    info: Dict[str, str] = {}
    for line in out.splitlines():
        parts = line.split(",")
        if line.startswith("dnnl_verbose,info,oneDNN"):
            info["onednn"] = parts[2].replace("oneDNN ", "").split(" (")[0]
        elif line.startswith("dnnl_verbose,info,cpu,isa:"):
            info["isa"] = line.split("isa:", 1)[1].strip()
        elif line.startswith("dnnl_verbose,exec,cpu,inner_product") and "bf16" in line:
            info["bf16_inner_product"] = parts[4]
        elif line.startswith("dnnl_verbose,exec,cpu,inner_product"):
            info["f32_inner_product"] = parts[4]
    return info
