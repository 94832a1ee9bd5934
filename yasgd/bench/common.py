"""What every yasgd benchmark shares (design principle 9, after NVIDIA's
DeepLearningExamples): warm-up skipped, medians, side by side in one run, JSON plus a
Markdown table that states the hardware, PNG plots.

* :func:`hardware` -- the machine and the software stack (CPU model and flags from
  /proc/cpuinfo, cores, memory, load average, Python/MXNet/Horovod/NumPy/... versions,
  OMP threads, every ``HOROVOD_*``/``MXNET_*`` variable, git revision); :func:`hardware_line`
  says it in one Markdown sentence; :func:`onednn_info` -- the oneDNN version inside MXNet
  and the instruction set it dispatches to (DNNL_VERBOSE of a child process).
* :func:`median_time` -- ``warmup`` untimed calls, then ``repeats`` timed ones, each
  ended by ``mx.nd.waitall()`` (MXNet's engine is asynchronous: a call only queues work);
  the statistic is the median.
* :func:`write_results` -- ``bench_<name>.json`` (records, setup, notes, acceptance lines,
  hardware) and ``bench_<name>.md`` (title, setup, table, acceptance, notes, hardware,
  plots); :mod:`yasgd.bench.summary` collects them into ``SUMMARY.md``.
* :func:`bar_chart` -- a PNG (matplotlib, Agg backend).
* :func:`launch_ranks` -- a 2-rank worker through ``python -m yasgd.launch`` (mpirun);
  :func:`shipped_env` / :func:`horovod_default_env` -- the tuning variables of
  ``jobs/common.sh`` versus Horovod's own defaults (Horovod reads them at ``hvd.init``,
  so each setting needs its own launch).
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Sequence

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMMON_SH = os.path.join(REPO_ROOT, "jobs", "common.sh")
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


def hardware_line(hw: Dict[str, object]) -> str:
    """One Markdown sentence: the machine and the software behind a table."""
    flags = ", ".join(hw.get("cpu_flags") or []) or "n/a"
    mem = f", {hw['memory_gib']} GiB RAM" if hw.get("memory_gib") else ""
    sw = [f"Python {hw.get('python')}", f"MXNet {hw.get('mxnet')}"]
    for key, label in (("horovod", "Horovod"), ("numpy", "NumPy"), ("mpi4py", "mpi4py"),
                       ("opencv", "OpenCV")):
        if hw.get(key):
            sw.append(f"{label} {hw[key]}")
    line = (f"Hardware: {hw.get('cpu')}, {hw.get('cores')} cores{mem} (flags: {flags}); "
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


# -- environments --------------------------------------------------------------------
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
    MXNet's own defaults (64 MB fusion buffer, Horovod's default cycle time, MXNet's
    optimizer aggregation of 4)."""
    env = dict(os.environ if base is None else base)
    for k in list(env):
        if k.startswith(("HOROVOD_", "MXNET_OPTIMIZER_")):
            del env[k]
    return env


def env_subset(env: Dict[str, str], prefixes: Sequence[str] = ("HOROVOD_", "OMP_",
                                                                 "MXNET_OPTIMIZER")) -> Dict[str, str]:
    return {k: v for k, v in sorted(env.items()) if k.startswith(tuple(prefixes))}


# -- timing --------------------------------------------------------------------------
@dataclass
class Timing:
    """Seconds per call: the median and every timed sample (warm-up excluded)."""
    median: float
    samples: List[float] = field(default_factory=list)
    warmup: int = 0

    @property
    def ms(self) -> float:
        return self.median * 1e3

    def to_dict(self, unit: str = "ms") -> Dict[str, object]:
        f = 1e3 if unit == "ms" else 1.0
        return {f"median_{unit}": round(self.median * f, 4),
                f"samples_{unit}": [round(s * f, 4) for s in self.samples],
                "repeats": len(self.samples), "warmup": self.warmup}


def _waitall() -> None:
    if "mxnet" in sys.modules:
        sys.modules["mxnet"].nd.waitall()


def median_time(fn: Callable[[], object], repeats: int = 5, warmup: int = 1,
                sync: Optional[Callable[[], None]] = _waitall,
                before: Optional[Callable[[], None]] = None) -> Timing:
    """Call ``fn`` ``warmup`` times untimed, then ``repeats`` times timed.

    ``sync`` ends every call (default ``mx.nd.waitall()``: the timing must include the
    work the call queued). ``before`` runs untimed ahead of every call (a barrier, a
    reset). Returns a :class:`Timing` (median of the timed calls, in seconds).
    """
    return interleaved_times({"fn": fn}, repeats, warmup, sync=sync, before=before)["fn"]


def interleaved_times(fns: Dict[str, Callable[[], object]], repeats: int, warmup: int = 1,
                      sync: Optional[Callable[[], None]] = _waitall,
                      before: Optional[Callable[[], None]] = None) -> Dict[str, Timing]:
    """Like :func:`median_time` for several arms at once, in rounds (a, b, c, a, b, c,
    ...) so that a change of machine load hits every arm alike."""
    samples: Dict[str, List[float]] = {k: [] for k in fns}
    for r in range(warmup + max(1, repeats)):
        for name, fn in fns.items():
            if before:
                before()
            t0 = time.perf_counter()
            fn()
            if sync:
                sync()
            if r >= warmup:
                samples[name].append(time.perf_counter() - t0)
    return {k: Timing(statistics.median(v), v, warmup) for k, v in samples.items()}


# -- output ------------------------------------------------------------------------------
def md_table(headers: Sequence[str], rows: Iterable[Sequence[object]],
             align: Optional[str] = None) -> str:
    """A Markdown table; ``align`` one letter per column: l (left) or r (right)."""
    align = align or ("l" + "r" * (len(headers) - 1))
    out = ["| " + " | ".join(headers) + " |",
           "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    for row in rows:
        out.append("| " + " | ".join("" if c is None else str(c) for c in row) + " |")
    return "\n".join(out)


def fmt(x: Optional[float], digits: int = 1) -> str:
    if x is None:
        return "n/a"
    return f"{x:,.{digits}f}"


def acceptance(criterion: str, value: Optional[float], threshold: float,
               higher_is_better: bool = True, unit: str = "x") -> Dict[str, object]:
    """One acceptance line: ``value`` against ``threshold`` (met or not, never hidden)."""
    met = None if value is None else (value >= threshold if higher_is_better else value <= threshold)
    return {"criterion": criterion, "value": None if value is None else round(value, 3),
            "threshold": threshold, "unit": unit, "met": met}


def acceptance_value(a: Dict[str, object]) -> str:
    """Two decimals, three when the verdict hinges on the third."""
    v, t = float(a["value"]), float(a.get("threshold") or 0)
    return f"{v:.3f}" if abs(v - t) < 0.01 else f"{v:.2f}"


def acceptance_table(lines: Sequence[Dict[str, object]]) -> str:
    rows = []
    for a in lines:
        val = "n/a" if a["value"] is None else f"{acceptance_value(a)}{a.get('unit', '')}"
        met = {True: "met", False: "**not met**", None: "n/a"}[a["met"]]
        rows.append([a["criterion"], val, met])
    return md_table(["acceptance", "measured", "verdict"], rows, "lrl")


def write_results(out_dir: str, name: str, records: List[Dict[str, object]],
                  markdown_table: str, notes: Sequence[str] = (), title: Optional[str] = None,
                  setup: Optional[Dict[str, object]] = None, quick: bool = False,
                  hw: Optional[Dict[str, object]] = None,
                  acceptance_lines: Sequence[Dict[str, object]] = (),
                  plots: Sequence[str] = (), extra: Optional[Dict[str, object]] = None,
                  intro: str = "") -> Dict[str, str]:
    """Write ``bench_<name>.json`` and ``bench_<name>.md`` into ``out_dir``.

    records: one dict per measured row (the JSON's "records"); markdown_table: the
    table as text; notes: sentences under the table; plots: PNG paths (linked, relative
    to out_dir). Returns {"json": path, "md": path}.
    """
    os.makedirs(out_dir, exist_ok=True)
    hw = dict(hw or hardware())
    hw["load_avg_1min_end"] = round(os.getloadavg()[0], 2)
    title = title or f"yasgd bench {name}"
    report = {"bench": name, "title": title, "quick": bool(quick), "hardware": hw,
              "setup": setup or {}, "records": records, "notes": list(notes),
              "acceptance": list(acceptance_lines),
              "plots": [os.path.basename(p) for p in plots]}
    if extra:
        report.update(extra)
    jpath = os.path.join(out_dir, f"bench_{name}.json")
    with open(jpath, "w") as f:
        json.dump(report, f, indent=1, default=str)
    lines = [f"# {title}", ""]
    if quick:
        lines += ["> **--quick smoke run**: few repetitions, numbers are noisy; not for quoting "
                  "as results.", ""]
    if intro:
        lines += [intro, ""]
    lines += [markdown_table, ""]
    if acceptance_lines:
        lines += [acceptance_table(acceptance_lines), ""]
    for n in notes:
        lines += [f"- {n}"]
    if notes:
        lines.append("")
    lines += [hardware_line(hw), ""]
    for p in plots:
        base = os.path.basename(p)
        lines += [f"![{base}]({base})", ""]
    mpath = os.path.join(out_dir, f"bench_{name}.md")
    with open(mpath, "w") as f:
        f.write("\n".join(lines))
    return {"json": jpath, "md": mpath}


def bar_chart(path: str, labels: Sequence[str], values: Sequence[float], xlabel: str,
              title: str, ref: Optional[float] = None, ref_label: str = "",
              colors: Optional[Sequence[str]] = None, annotate: str = "{:.1f}") -> str:
    """A horizontal bar chart (PNG, matplotlib Agg); returns ``path``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    n = len(labels)
    fig, ax = plt.subplots(figsize=(10, 0.42 * n + 1.6))
    ys = list(range(n))[::-1]
    ax.barh(ys, values, color=colors or "#4C72B0")
    ax.set_yticks(ys)
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=10)
    vmax = max([v for v in values if v is not None] + [ref or 0])
    for y, v in zip(ys, values):
        ax.text(v + vmax * 0.01, y, annotate.format(v), va="center", fontsize=7)
    if ref is not None:
        ax.axvline(ref, color="#C44E52", linestyle="--", linewidth=1)
        if ref_label:
            ax.text(ref, n - 0.4, " " + ref_label, color="#C44E52", fontsize=7, va="top")
    ax.set_xlim(0, vmax * 1.15)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# -- processes ------------------------------------------------------------------------
def launch_ranks(module: str, args: Sequence[str], env: Dict[str, str], np_: int = 2,
                 timeout: float = 600.0) -> None:
    """Run ``python -m module --worker ARGS`` on ``np_`` ranks through yasgd.launch
    (mpirun) with exactly ``env`` (``--no-tuning-defaults``: the caller chose every tuning
    variable, e.g. :func:`horovod_default_env` has none); raises RuntimeError when it fails
    (mpirun ends every rank if one dies)."""
    cmd = [sys.executable, "-m", "yasgd.launch", "-np", str(np_), "--timeout", str(int(timeout)),
           "--no-tuning-defaults",
           "--", sys.executable, "-m", module, "--worker"] + list(args)
    proc = subprocess.run(cmd, env=env, cwd=REPO_ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"{module} on {np_} ranks failed with exit status {proc.returncode} "
                           f"({' '.join(cmd)})")


def run_process(module: str, args: Sequence[str], env: Dict[str, str],
                timeout: float = 600.0, log: Optional[str] = None) -> None:
    """Run ``python -m module --worker ARGS`` as one process (its own OMP settings).
    ``log``: a file that takes the process's stdout and stderr (for processes that run
    side by side); its last lines are in the error when the process fails."""
    cmd = [sys.executable, "-m", module, "--worker"] + list(args)
    if log is None:
        proc = subprocess.run(cmd, env=env, cwd=REPO_ROOT, timeout=timeout)
    else:
        with open(log, "w") as f:
            proc = subprocess.run(cmd, env=env, cwd=REPO_ROOT, timeout=timeout, stdout=f,
                                  stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = ""
        if log is not None:
            with open(log, errors="replace") as f:
                tail = "; last lines of " + log + ":\n" + "".join(f.readlines()[-8:])
        raise RuntimeError(f"{module} failed with exit status {proc.returncode} "
                           f"({' '.join(cmd)}){tail}")


def read_json(path: str) -> Dict[str, object]:
    with open(path) as f:
        return json.load(f)


def write_json(path: str, obj: object) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, default=str)
    os.replace(tmp, path)


def say(msg: str) -> None:
    print(msg, flush=True)


def bench_main(prog: str, run, worker, argv=None, **worker_defaults) -> int:
    """The script entry of a benchmark module (``python -m yasgd.bench.NAME``).

    ``--out DIR [--quick]`` calls ``run(out_dir=, quick=)``; ``--worker`` (internal:
    how ``run`` launches its own timed processes, e.g. under mpirun) calls
    ``worker(**options)`` with ``--result PATH`` and one ``--NAME VALUE`` option per
    entry of ``worker_defaults`` (typed by its default value).
    """
    import argparse
    ap = argparse.ArgumentParser(prog=prog)
    ap.add_argument("--out", default="results")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    for name, default in worker_defaults.items():
        ap.add_argument(f"--{name}", type=type(default), default=default, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(result=args.result, **{name: getattr(args, name) for name in worker_defaults})
    else:
        run(out_dir=args.out, quick=args.quick)
    return 0


def slowest_rank_ms(comm, times: Dict[str, "Timing"], digits: int = 2) -> Optional[Dict[str, dict]]:
    """Per arm, each round's time on the slower rank, and their median, in ms (on rank 0;
    None elsewhere). ``comm``: an mpi4py communicator; ``times``: interleaved_times()."""
    import statistics
    mine = {k: t.samples for k, t in times.items()}
    everyone = comm.gather(mine, root=0)
    if comm.Get_rank() != 0:
        return None
    out = {}
    for k, samples in mine.items():
        worst = [max(r[k][i] for r in everyone) for i in range(len(samples))]
        out[k] = {"median_ms": round(statistics.median(worst) * 1e3, digits),
                  "samples_ms": [round(s * 1e3, digits) for s in worst]}
    return out
