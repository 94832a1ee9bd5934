"""A real one-node Slurm for tests: munged + slurmctld + slurmd in a temporary folder.

Debian's ``slurm-wlm`` (22.05) and ``munge``, configured as the install notes
describe: a private munge key and socket (the system's munged, if any, is left
alone), ``SlurmUser=root``, ``proctrack/linuxproc``, ``task/none``,
``select/cons_tres``, free ports, one node named after this host with 2 CPUs
and 2 GPUs (GRES backed by /dev/null and /dev/zero, so that scripts asking for
``--gpus-per-node`` are scheduled on a machine without GPUs), one partition.
Every daemon is stopped through its pid file when the harness stops, always.

    with LocalSlurm() as slurm:
        job = slurm.sbatch(script, cwd=..., env=...)
        state, exit_code = slurm.wait(job, timeout=300)
"""
from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import Dict, Optional, Tuple

import pytest

SLURMCTLD = shutil.which("slurmctld") or "/usr/sbin/slurmctld"
SLURMD = shutil.which("slurmd") or "/usr/sbin/slurmd"
MUNGED = shutil.which("munged") or "/usr/sbin/munged"
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
            "BOOT_FAIL", "DEADLINE", "PREEMPTED"}


def available() -> Optional[str]:
    """None when a local Slurm can be started here, else the reason it cannot."""
    if not os.path.exists(SLURMCTLD):
        return "slurmctld is not installed (apt-get install slurm-wlm munge)"
    return None  # a missing slurmd or munged is a failure, not a skip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (daemon whose parent does not reap) has stopped
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


class LocalSlurm:
    def __init__(self, cpus: int = 2, gpus: int = 2, start_timeout: float = 60.0):
        self.cpus, self.gpus, self.start_timeout = cpus, gpus, start_timeout
        self.root: Optional[str] = None
        self.jobs: list = []
        self.node = socket.gethostname().split(".")[0]

    # -- paths and environment ---------------------------------------------------------
    def path(self, *parts: str) -> str:
        assert self.root is not None
        return os.path.join(self.root, *parts)

    @property
    def conf(self) -> str:
        return self.path("etc", "slurm.conf")

    def env(self, base: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        """``base`` (default: this process's environment) with SLURM_CONF set."""
        env = dict(os.environ if base is None else base)
        env["SLURM_CONF"] = self.conf
        return env

    def _run(self, *args: str, timeout: float = 30.0, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(list(args), env=self.env(), capture_output=True, text=True,
                              timeout=timeout, check=check)

    # -- start --------------------------------------------------------------------------
    def start(self) -> "LocalSlurm":
        # Under /tmp, mode 755: munged (user munge) must reach its socket.
        self.root = tempfile.mkdtemp(prefix="yasgd-slurm-", dir="/tmp")
        os.chmod(self.root, 0o755)
        for d in ("etc", "state", "spool", "log", "munge"):
            os.makedirs(self.path(d))
        self._start_munged()
        self._write_conf()
        env = self.env()
        subprocess.run([SLURMCTLD, "-f", self.conf], env=env, check=True, timeout=30)
        subprocess.run([SLURMD, "-f", self.conf], env=env, check=True, timeout=30)
        self._wait_idle()
        return self

    def _start_munged(self) -> None:
        key = self.path("munge", "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(128))
        os.chmod(key, 0o400)
        args = [MUNGED, f"--key-file={key}", f"--socket={self.path('munge', 'munge.sock')}",
                f"--pid-file={self.path('munge', 'munged.pid')}",
                f"--log-file={self.path('munge', 'munged.log')}",
                f"--seed-file={self.path('munge', 'munged.seed')}"]
        if os.geteuid() == 0:  # munged refuses to run as root: run it as user munge
            user = pwd.getpwnam("munge")
            for p in (self.path("munge"), key):
                os.chown(p, user.pw_uid, user.pw_gid)
            args = ["runuser", "-u", "munge", "--"] + args
        subprocess.run(args, check=True, timeout=30)
        self._wait_for_file(self.path("munge", "munged.pid"), "munged")

    def _write_conf(self) -> None:
        user = pwd.getpwuid(os.geteuid()).pw_name
        gres = f" Gres=gpu:{self.gpus}" if self.gpus else ""
        with open(self.conf, "w") as f:
            f.write(f"""ClusterName=yasgdtest
SlurmctldHost={self.node}(127.0.0.1)
SlurmUser={user}
SlurmdUser={user}
AuthType=auth/munge
AuthInfo=socket={self.path('munge', 'munge.sock')}
CredType=cred/munge
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
StateSaveLocation={self.path('state')}
SlurmdSpoolDir={self.path('spool')}
SlurmctldPidFile={self.path('slurmctld.pid')}
SlurmdPidFile={self.path('slurmd.pid')}
SlurmctldLogFile={self.path('log', 'slurmctld.log')}
SlurmdLogFile={self.path('log', 'slurmd.log')}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
MinJobAge=600
GresTypes=gpu
NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus}{gres} State=UNKNOWN
PartitionName=debug Nodes={self.node} Default=YES MaxTime=INFINITE State=UP
""")
        # Stand-in GPU devices: GRES needs character devices, any will do.
        devices = ["/dev/null", "/dev/zero", "/dev/full", "/dev/random",
                   "/dev/urandom", "/dev/tty", "/dev/ptmx", "/dev/console"]
        with open(self.path("etc", "gres.conf"), "w") as f:
            for dev in devices[:self.gpus]:
                f.write(f"NodeName={self.node} Name=gpu File={dev}\n")

    def _wait_for_file(self, path: str, what: str) -> None:
        deadline = time.time() + self.start_timeout
        while not os.path.exists(path):
            if time.time() > deadline:
                raise RuntimeError(f"{what} did not start: no {path}\n{self.logs()}")
            time.sleep(0.2)

    def _wait_idle(self) -> None:
        deadline = time.time() + self.start_timeout
        state = ""
        while time.time() < deadline:
            r = self._run("sinfo", "-h", "-N", "-o", "%T", check=False)
            state = r.stdout.strip()
            if state in ("idle", "mixed", "allocated"):
                return
            time.sleep(0.5)
        raise RuntimeError(f"slurm node did not become idle (state {state!r})\n{self.logs()}")

    # -- jobs ----------------------------------------------------------------------------
    def sbatch(self, script: str, cwd: str, env: Optional[Dict[str, str]] = None,
               args: Tuple[str, ...] = ()) -> str:
        r = subprocess.run(["sbatch", "--parsable", *args, script], cwd=cwd, env=self.env(env),
                           capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            raise RuntimeError(f"sbatch failed ({r.returncode}): {r.stderr}\n{self.logs()}")
        job = r.stdout.strip().split(";")[0]
        self.jobs.append(job)
        return job

    def job_info(self, job: str) -> Dict[str, str]:
        r = self._run("scontrol", "show", "job", "-o", job, check=False)
        return dict(re.findall(r"(\w+)=(\S*)", r.stdout))

    def wait(self, job: str, timeout: float) -> Tuple[str, int]:
        """(final state, exit status of the batch script); cancels the job on timeout."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            info = self.job_info(job)
            if info.get("JobState") in TERMINAL:
                code, _, sig = info.get("ExitCode", "255:0").partition(":")
                return info["JobState"], int(code) if sig in ("", "0") else 128 + int(sig)
            time.sleep(1.0)
        self._run("scancel", job, check=False)
        raise TimeoutError(f"slurm job {job} did not finish in {timeout:.0f} s: {self.job_info(job)}")

    def logs(self) -> str:
        out = []
        for name in ("log/slurmctld.log", "log/slurmd.log", "munge/munged.log"):
            try:
                with open(self.path(name)) as f:
                    out.append(f"--- {name}\n" + "".join(f.readlines()[-15:]))
            except OSError:
                pass
        return "\n".join(out)

    # -- stop ----------------------------------------------------------------------------
    def stop(self) -> None:
        if self.root is None:
            return
        for job in self.jobs:
            try:
                self._run("scancel", job, check=False, timeout=10)
            except (OSError, subprocess.SubprocessError):
                pass
        for pidfile in ("slurmd.pid", "slurmctld.pid", "munge/munged.pid"):
            self._kill_from(self.path(pidfile))
        shutil.rmtree(self.root, ignore_errors=True)
        self.root = None

    @staticmethod
    def _kill_from(pidfile: str, grace: float = 10.0) -> None:
        try:
            with open(pidfile) as f:
                pid = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            return
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.time() + grace
        while _alive(pid) and time.time() < deadline:
            time.sleep(0.1)
        if _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def __enter__(self) -> "LocalSlurm":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()


@pytest.fixture(scope="module")
def local_slurm():
    """A running one-node Slurm (module scope); skipped only when Slurm is not installed."""
    reason = available()
    if reason:
        pytest.skip(reason)
    with LocalSlurm() as slurm:
        yield slurm
