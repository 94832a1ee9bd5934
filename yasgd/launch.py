"""Launch N ranks of a command on this host through mpirun (OpenMPI).

    yasgd launch -np 2 [--timeout S] [--gloo] [--no-tuning-defaults] -- yasgd train CONFIG ...
    python -m yasgd.launch -np 2 ...   (the same, without the console script)

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

Signals: the first SIGINT (Ctrl-C) or SIGTERM to the launcher goes, as that
same signal, straight to every rank (not through mpirun, which would start
killing them): the ranks stop together at the next step, write a checkpoint,
leave a stop marker (``YASGD_STOP_FILE``, see yasgd.faults) and exit 0, so that
mpirun ends at once; the launcher then exits 130 (SIGINT) or 143 (SIGTERM). A
SIGHUP (the terminal or the ssh session closed) stops the ranks as SIGTERM does,
unless the launcher was started with SIGHUP ignored (``nohup``). A second
signal kills the whole job at once (exit 128 + its number; the previous
checkpoint is intact), and so does ``--stop-timeout`` (default 120 s) when the job
has not ended that long after the first: the launcher never waits for good on
ranks that do not stop. A signal before any rank started ends the launcher at once
(exit 128 + its number) with one line; its own helpers (the checks of a yasgd command)
run in a session of their own and end with it (:func:`run_helper`). A rank of a yasgd
command that is still starting gets SIGTERM, not SIGINT (:func:`signal_for_yasgd`). A
launcher killed outright (SIGKILL, the out-of-memory killer) takes its job with it:
mpirun gets SIGTERM when the launcher dies (``PR_SET_PDEATHSIG``) and ends its ranks.
A job that finished before the signal took effect exits 0. A bad argument
(``-np 0``, more than 8 ranks a core, no command, one that is not found) is one
``yasgd: error: launch: ...`` line and exit status 2; so is a ``yasgd`` command whose
arguments its own parser refuses, and a ``yasgd train`` command whose config or overrides
are bad for ``-np`` ranks (each checked once, before mpirun). A launcher that has had no rank
running for 30 s and still not exited (OpenMPI 4.1 at times hangs so when many ranks that
never start MPI end at once) is killed, with one line saying so, and the exit status is 1.
``--grace`` is mpirun's delay between its own SIGTERM and SIGKILL to the ranks
(OpenMPI's ``odls_base_sigkill_timeout``), used when mpirun aborts a job (a rank
died, exited non-zero or called MPI_Abort): the ranks' checkpoint does not depend
on it here, so it is short, and OpenMPI 4.1, which waits about twice this delay
before it exits, ends a failed job soon after the failure.
"""
from __future__ import annotations

from yasgd.importing import ctrl_c_ends_imports

with ctrl_c_ends_imports():          # until main() takes the stop signals
    import argparse
    import contextlib
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import tempfile
    from typing import List, Optional

    from yasgd import UsageError, argtypes, usage
    from yasgd.supervise import (STOP_FILE_ENV, STOP_TIMEOUT_S, Stopped, child_setup, say,
                                 stop_by_unwinding, stop_signals, supervise)

SINGLE_COPY_VAR = "OMPI_MCA_btl_vader_single_copy_mechanism"


def single_copy_allowed() -> bool:
    """Whether this host lets one process read another's memory with
    ``process_vm_readv`` (Linux cross-memory attach, CMA): OpenMPI's shared-memory
    transport (vader) then moves a large message with one copy instead of two, which
    makes large allreduces on one host markedly faster. Containers often forbid it
    (seccomp, no CAP_SYS_PTRACE, Yama), and then OpenMPI's large shared-memory
    transfers fail, so this checks first, the way vader
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
    ``OMPI_MCA_btl_vader_single_copy_mechanism`` in ``env`` (default: os.environ) wins.
    UsageError where no mpirun is on PATH."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise UsageError("mpirun not found on PATH (apt-get install openmpi-bin, or module "
                         "load an MPI)")
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


def run_helper(cmd: List[str], env: dict, timeout: Optional[float] = None,
               **popen) -> subprocess.CompletedProcess:
    """``subprocess.run`` for the launcher's own helpers, before any rank starts. A helper
    runs in a session of its own: a Ctrl-C (SIGINT to the terminal's process group)
    reaches the launcher alone, which stops (:class:`Stopped`) and kills the helper; one
    that got the signal itself would print its interpreter's traceback (or, early in its
    start, "Fatal Python error: init_import_site") beside the launcher's one line. It is
    started with the stop signals blocked, so that a stop cannot land inside ``Popen``,
    where nothing would end the helper, and it is tied to the launcher (SIGTERM when the
    launcher dies, however it dies)."""
    sigs = stop_signals()
    signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    try:
        proc = subprocess.Popen(cmd, env=env, start_new_session=True,
                                preexec_fn=child_setup(sigs), **popen)
    except BaseException:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, sigs)
        raise
    with proc:
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, sigs)  # a stop held back lands here
            out, err = proc.communicate(timeout=timeout)
        except BaseException:
            with contextlib.suppress(ProcessLookupError):     # its session, all of it
                os.killpg(proc.pid, signal.SIGKILL)
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


COMMON_SH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                         "jobs", "common.sh")


def with_tuning_defaults(env: dict) -> dict:
    """``env`` plus the defaults of jobs/common.sh for every variable it does not set
    (the file only fills in unset variables). Unchanged when the file is absent."""
    if not os.path.isfile(COMMON_SH):
        return env
    try:
        out = run_helper(["bash", "-c", 'source "$1" && env -0', "_", COMMON_SH], env,
                         timeout=30, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"yasgd.launch: error: sourcing {COMMON_SH} took over 30 s")
    if out.returncode != 0:
        raise SystemExit(f"yasgd.launch: error: sourcing {COMMON_SH} failed: "
                         f"{out.stderr.decode(errors='replace').strip()}")
    merged = dict(env)
    for item in out.stdout.split(b"\0"):
        key, sep, value = item.decode(errors="replace").partition("=")
        if sep and key not in env:
            merged[key] = value
    return merged


#: --grace, and the variable that is its default: whole seconds, at most an hour
GRACE = argtypes.integer(0, "seconds", hi=3600)


def parser(prog: str = "python -m yasgd.launch") -> argparse.ArgumentParser:
    """The launcher's arguments (``yasgd launch`` gives ``prog="yasgd launch"``)."""
    p = usage.Parser(prog=prog, description=__doc__.splitlines()[0],
                     usage=f"{prog} -np N [--timeout S] [--gloo] [--grace S] [--stop-timeout S]"
                           f"\n{' ' * len('usage: ' + prog)} [--no-tuning-defaults] -- COMMAND ...",
                     epilog=f"examples:\n  {prog} -np 2 -- yasgd train examples/configs/demo.yaml"
                            f"\n  {prog} -np 2 --timeout 600 -- yasgd preflight",
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-np", type=argtypes.integer(1), default=2, metavar="N",
                   help="ranks (default: 2)")
    p.add_argument("--timeout", type=argtypes.seconds(), default=None, metavar="S",
                   help="kill the job after S seconds, exit status 124 (default: no limit)")
    p.add_argument("--gloo", action="store_true", help="use horovodrun --gloo instead of mpirun")
    p.add_argument("--grace", type=GRACE, default=None, metavar="S",
                   help="seconds between mpirun's SIGTERM and SIGKILL to the ranks (default: "
                        "$OMPI_MCA_odls_base_sigkill_timeout, else 3)")
    p.add_argument("--stop-timeout", type=argtypes.seconds(), default=STOP_TIMEOUT_S,
                   metavar="S", help="after a SIGINT or SIGTERM to the launcher, kill the job "
                   "if it has not ended within S seconds (default: %(default).0f); the ranks "
                   "stop at the next step and write a checkpoint long before")
    p.add_argument("--no-tuning-defaults", action="store_true",
                   help="do not fill in jobs/common.sh's tuning variables (HOROVOD_*, MXNET_*, "
                        "...): run with the environment exactly as given")
    p.add_argument("command", nargs=argparse.REMAINDER,
                   help="the command every rank runs, after --")
    return p


def main(argv: Optional[List[str]] = None, prog: str = "python -m yasgd.launch") -> int:
    previous = stop_by_unwinding()
    try:
        p = parser(prog)
        return _launch(p, p.parse_args(argv))
    except Stopped as stop:
        say(f"yasgd.launch: stopped by {signal.Signals(stop.signum).name} before any rank "
             "started")
        return 128 + stop.signum
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _launch(p: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """main() after its arguments are parsed; a stop signal raises Stopped until
    :func:`yasgd.supervise.supervise` takes the signals over."""
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("no command given (put it after --)")
    cores = os.cpu_count() or 1
    # every rank runs on this host: past argtypes.MAX_PER_CORE a core it is a typo (a cluster
    # job's -np), and the host would be brought down by the ranks' memory before mpirun
    # reported anything
    if args.np > argtypes.MAX_PER_CORE * cores:
        p.error(f"argument -np: {args.np} ranks on this host's {cores} CPU core(s) is more than "
                f"{argtypes.MAX_PER_CORE} a core; yasgd launch starts every rank here (a job "
                "across hosts: mpirun with a hostfile, docs/cluster.md)")
    env = dict(os.environ)
    # every rank runs on this host: a command it cannot find is one line here, before mpirun
    if shutil.which(command[0], path=env.get("PATH")) is None:
        p.error(f"command not found or not executable: {command[0]!r}")
    argv = yasgd_arguments(command)
    if argv is not None and argv[:1] != ["launch"]:   # a launch in a launch parses itself
        # a yasgd command's arguments are checked once, here, by its own parser: one line
        # (or its --help, its --version, once), not the same line from every rank and then
        # mpirun's report of the failed job (in a child: yasgd.cli imports this module)
        parsed = run_helper([sys.executable, "-c", "import sys; from yasgd.cli import parse; "
                             "parse(sys.argv[1:])", *argv], env)
        if parsed.returncode != 0 or {"-h", "--help", "--version"} & set(argv):
            return parsed.returncode
    train = argv[1:] if argv is not None and argv[:1] == ["train"] else None
    if train is not None:
        # a training's config for this world size, its run directory, its data and its
        # ranks' memory on this host are checked once, here, too
        check = run_helper([sys.executable, "-m", "yasgd.cli", "check-config", *train,
                            "--world-size", str(args.np), "--run-dir", "--data",
                            "--ranks-on-host", str(args.np)], env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if check.returncode == 2:
            sys.stderr.write(check.stderr)
            return 2
    from yasgd.envcheck import problem     # what every rank gets, checked once, here:
    bad_env = problem(env)                 # what the user set, before jobs/common.sh reads it
    if bad_env:
        p.error(bad_env)
    user_grace = env.get("OMPI_MCA_odls_base_sigkill_timeout")
    if args.grace is None and user_grace:   # --grace's default: the same rule as --grace
        try:
            GRACE(user_grace)
        except argparse.ArgumentTypeError as e:
            p.error(f"environment variable OMPI_MCA_odls_base_sigkill_timeout (--grace's "
                    f"default) {e}")
    env.setdefault("OMP_NUM_THREADS", str(max(1, cores // args.np)))
    if not args.no_tuning_defaults:
        env = with_tuning_defaults(env)
    env.setdefault("PYTHONUNBUFFERED", "1")
    bad_env = problem(env)                 # and with jobs/common.sh's defaults
    if bad_env:
        p.error(bad_env)
    # not jobs/common.sh's longer delay: that one is for a scheduler signalling mpirun
    env["OMPI_MCA_odls_base_sigkill_timeout"] = str(args.grace if args.grace is not None
                                                    else user_grace or 3)
    exported = sorted(k for k in env if k.startswith(("OMP_", "MXNET_", "HOROVOD_", "NCCL_",
                                                       "PYTHON", "YASGD_", "KMP_")))
    if args.gloo:
        hvdrun = os.path.join(os.path.dirname(sys.executable), "horovodrun")
        if not os.access(hvdrun, os.X_OK):
            p.error(f"--gloo: {hvdrun} not found (Horovod is not installed in this Python)")
        cmd = [hvdrun, "--gloo", "-np", str(args.np), "-H", f"localhost:{args.np}"] + command
    else:
        try:
            cmd = mpirun_command(args.np, command, exported, env=env)
        except UsageError as e:
            p.error(str(e))
    with tempfile.TemporaryDirectory(prefix="yasgd-launch-") as tmp:
        env[STOP_FILE_ENV] = os.path.join(tmp, "stopped")
        ranks = {"signal_for": signal_for_yasgd} if argv is not None else {}
        return supervise(cmd, env, args.timeout, stop_timeout=args.stop_timeout, **ranks)


def signal_for_yasgd(pid: int, signum: int) -> int:
    """What a stop sends a rank of a yasgd command: ``signum`` once the rank catches
    SIGTERM, else SIGTERM. yasgd's stop handlers take both signals from early in every
    command; a rank without them is still starting (the interpreter, its imports), where a
    SIGINT is Python's KeyboardInterrupt, and inside the interpreter's own start-up a fatal
    error with a traceback ("init_import_site"). SIGTERM's default action ends such a rank
    at once, without a word; the launcher reports the stop."""
    return signum if catches(pid, signal.SIGTERM) else signal.SIGTERM


def catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler of its own for ``signum`` (``SigCgt`` in
    ``/proc/PID/status``); False for a process that is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            caught = [line.split()[1] for line in f if line.startswith("SigCgt:")]
        return bool(int(caught[0], 16) >> (signum - 1) & 1)
    except (OSError, IndexError, ValueError):
        return False


def yasgd_arguments(command: List[str]) -> Optional[List[str]]:
    """The arguments of a ``yasgd ...`` command after ``yasgd`` (also of ``python -m
    yasgd.cli ...``), else None."""
    if os.path.basename(command[0]) == "yasgd":
        return command[1:]
    if os.path.basename(command[0]).startswith("python") and command[1:3] == ["-m", "yasgd.cli"]:
        return command[3:]
    return None


if __name__ == "__main__":
    sys.exit(usage.run(main))
