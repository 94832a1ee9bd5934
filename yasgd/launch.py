"""Launch N ranks of a command on this host through mpirun (OpenMPI).

    python -m yasgd.launch -np 2 [--timeout S] [--gloo] [--no-tuning-defaults] -- yasgd train CONFIG ...

Adds what a one-host launch needs: ``--allow-run-as-root`` when root,
``--oversubscribe`` (more ranks than cores), ``--bind-to none``, OpenMPI's
single-copy shared memory switched off only where the host forbids it
(:func:`single_copy_allowed`), one OpenMP
thread per rank unless OMP_NUM_THREADS is set, and the tuning variables of
``jobs/common.sh`` (its defaults for whatever the environment does not set)
exported to every rank (``--no-tuning-defaults``: the environment exactly as given, e.g.
to measure Horovod's own defaults; the benchmarks build each arm's environment
themselves and pass it). The exit status is mpirun's: when
one rank dies, mpirun ends the others and exits non-zero (no hang).
With ``--gloo`` it runs ``horovodrun --gloo`` instead.

Signals: SIGTERM and SIGINT to the launcher are forwarded to mpirun, which
forwards SIGTERM to every rank and kills them ``--grace`` seconds later
(OpenMPI's ``odls_base_sigkill_timeout``: 10 s here instead of OpenMPI's 1 s,
so that ``yasgd train`` can write its SIGTERM checkpoint; see yasgd.faults).
The price: whenever mpirun aborts a job (a rank died or exited non-zero),
OpenMPI 4.1 waits about twice that delay before it exits (measured: 2 s at
--grace 1, 9-10 s at --grace 5), so a failed 2-rank job ends ~20 s after the
failure. After a forwarded SIGTERM the launcher exits 143 (0 if the job still
ended successfully).
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
from typing import List, Optional


SINGLE_COPY_VAR = "OMPI_MCA_btl_vader_single_copy_mechanism"


def single_copy_allowed() -> bool:
    """Whether this host lets one process read another's memory with
    ``process_vm_readv`` (Linux cross-memory attach, CMA): OpenMPI's shared-memory
    transport (vader) then moves a large message with one copy instead of two
    (measured here: a 102 MB MPI_Allreduce on 2 ranks, 107 ms with two copies, 71 ms
    with CMA). Containers often forbid it (seccomp, no CAP_SYS_PTRACE, Yama), and then
    OpenMPI's large shared-memory transfers fail, so this checks first, the way vader
    uses it: a forked child reads a buffer of its parent, which (like vader) has
    allowed any process of its user to attach (Yama's ``PR_SET_PTRACER``)."""
    import ctypes
    import ctypes.util
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        readv = libc.process_vm_readv
    except (OSError, AttributeError):
        return False

    class IOVec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

    readv.restype = ctypes.c_ssize_t
    readv.argtypes = [ctypes.c_int, ctypes.POINTER(IOVec), ctypes.c_ulong,
                      ctypes.POINTER(IOVec), ctypes.c_ulong, ctypes.c_ulong]
    pattern = os.urandom(64)
    src = ctypes.create_string_buffer(pattern, len(pattern))
    pr_set_ptracer, any_process = 0x59616D61, ctypes.c_ulong(-1 & 0xFFFFFFFFFFFFFFFF)
    libc.prctl(pr_set_ptracer, any_process, 0, 0, 0)   # EINVAL without Yama: harmless
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:                                      # child: no Python-level cleanup
        ok = False
        try:
            dst = ctypes.create_string_buffer(len(pattern))
            local = IOVec(ctypes.cast(dst, ctypes.c_void_p), len(pattern))
            remote = IOVec(ctypes.cast(src, ctypes.c_void_p), len(pattern))
            ok = readv(parent, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0) == len(
                pattern) and dst.raw == pattern
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    libc.prctl(pr_set_ptracer, ctypes.c_ulong(0), 0, 0, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def mpirun_command(np_: int, command: List[str], env_vars: Optional[List[str]] = None,
                   hosts: Optional[str] = None, env: Optional[dict] = None) -> List[str]:
    """The mpirun command line for ``command`` on ``np_`` ranks. OpenMPI's single-copy
    shared-memory transport is left to OpenMPI's own choice where this host allows it
    (:func:`single_copy_allowed`) and switched off where it does not; an
    ``OMPI_MCA_btl_vader_single_copy_mechanism`` in ``env`` (default: os.environ) wins."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise SystemExit("yasgd.launch: error: mpirun not found (apt-get install openmpi-bin)")
    cmd = [mpirun, "-np", str(np_), "--oversubscribe", "--bind-to", "none"]
    if SINGLE_COPY_VAR not in (os.environ if env is None else env) and not single_copy_allowed():
        cmd += ["--mca", "btl_vader_single_copy_mechanism", "none"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    if hosts:
        cmd += ["-H", hosts]
    for var in env_vars or []:
        cmd += ["-x", var]
    return cmd + command


COMMON_SH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                         "jobs", "common.sh")


def with_tuning_defaults(env: dict) -> dict:
    """``env`` plus the defaults of jobs/common.sh for every variable it does not set
    (the file only fills in unset variables). Unchanged when the file is absent."""
    if not os.path.isfile(COMMON_SH):
        return env
    out = subprocess.run(["bash", "-c", 'source "$1" && env -0', "_", COMMON_SH], env=env,
                         capture_output=True, timeout=30)
    if out.returncode != 0:
        raise SystemExit(f"yasgd.launch: error: sourcing {COMMON_SH} failed: "
                         f"{out.stderr.decode(errors='replace').strip()}")
    merged = dict(env)
    for item in out.stdout.split(b"\0"):
        key, sep, value = item.decode(errors="replace").partition("=")
        if sep and key not in env:
            merged[key] = value
    return merged


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m yasgd.launch", description=__doc__.splitlines()[0])
    p.add_argument("-np", type=int, default=2)
    p.add_argument("--timeout", type=float, default=None, help="kill the job after S seconds")
    p.add_argument("--gloo", action="store_true", help="use horovodrun --gloo instead of mpirun")
    p.add_argument("--grace", type=int, default=None,
                   help="seconds between mpirun's SIGTERM and SIGKILL to the ranks (default: "
                        "$OMPI_MCA_odls_base_sigkill_timeout, else 10)")
    p.add_argument("--no-tuning-defaults", action="store_true",
                   help="do not fill in jobs/common.sh's tuning variables (HOROVOD_*, MXNET_*, "
                        "...): run with the environment exactly as given")
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("no command given")
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // args.np)))
    if not args.no_tuning_defaults:
        env = with_tuning_defaults(env)
    env.setdefault("PYTHONUNBUFFERED", "1")
    if args.grace is not None:
        env["OMPI_MCA_odls_base_sigkill_timeout"] = str(args.grace)
    env.setdefault("OMPI_MCA_odls_base_sigkill_timeout", "10")
    exported = sorted(k for k in env if k.startswith(("OMP_", "MXNET_", "HOROVOD_", "NCCL_",
                                                       "PYTHON", "YASGD_", "KMP_")))
    if args.gloo:
        hvdrun = os.path.join(os.path.dirname(sys.executable), "horovodrun")
        cmd = [hvdrun, "--gloo", "-np", str(args.np), "-H", f"localhost:{args.np}"] + command
    else:
        cmd = mpirun_command(args.np, command, exported, env=env)
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    forwarded = []

    def forward(signum, frame):
        forwarded.append(signum)
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    try:
        rc = proc.wait(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        print(f"yasgd.launch: error: job exceeded {args.timeout:.0f} s; killing it", file=sys.stderr)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return 124
    if forwarded:
        print(f"yasgd.launch: job stopped by {signal.Signals(forwarded[0]).name} "
              f"(mpirun exit status {rc})", file=sys.stderr)
        return rc if rc == 0 else 128 + signal.SIGTERM
    return rc


if __name__ == "__main__":
    sys.exit(main())
