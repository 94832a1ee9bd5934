"""A real two-node Slurm on the namespace cluster: slurmctld + one slurmd per node.

The approach of tests/e2e/slurm_harness.py (Debian's slurm-wlm 22.05 and munge,
``SlurmUser=root``, ``proctrack/linuxproc``, ``task/none``, ``select/cons_tres``,
stand-in GPUs as GRES), spread over the two nodes of :class:`netns.Cluster`:

==========  =======================================  ===============================
node1       munged (the cluster's one key), slurmctld (port 6817), slurmd node1 (6818)
node2       slurmd node2 (port 6819)
==========  =======================================  ===============================

Every daemon runs in the foreground (``-D``) inside its node's namespaces, with
its pid file, log and spool in the run directory (``RUN/slurm/``: ``spool-%n``,
``slurmd-%n.pid``, ``log/slurmd-%n.log``). The nodes have 2 CPUs and 2
stand-in GPUs each (GRES backed by /dev/null and /dev/zero), one partition
``cluster`` holds both. Client commands (sbatch, scontrol, sinfo, scancel)
run in node1 like on a login node. The cluster's timeouts, chosen so that a
test sees a failure within seconds rather than minutes:

- ``SlurmdTimeout=30``: a slurmd that does not answer for 30 s is DOWN;
- ``SlurmctldTimeout=30``, ``MessageTimeout=10``, ``TCPTimeout=5``;
- ``KillWait=10``: seconds between SIGTERM and SIGKILL when a job or step ends
  (scancel, walltime, a failed task under ``--kill-on-bad-exit``);
- ``InactiveLimit=0``, ``MinJobAge=600`` (finished jobs stay visible).
"""
from __future__ import annotations

import os
import pwd
import re
import subprocess
import time
from typing import Dict, Optional, Tuple

from netns import NODES, Cluster, address, cgroup_prelude, kill_pidfile, kill_pids

SLURMCTLD, SLURMD, MUNGED = "/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/munged"
CTLD_PORT = 6817
SLURMD_PORTS = {"node1": 6818, "node2": 6819}
TIMEOUTS = {"SlurmdTimeout": 30, "SlurmctldTimeout": 30, "MessageTimeout": 10,
            "TCPTimeout": 5, "KillWait": 10, "InactiveLimit": 0}
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
            "BOOT_FAIL", "DEADLINE", "PREEMPTED"}


def unavailable() -> Optional[str]:
    for exe in (SLURMCTLD, SLURMD, MUNGED):
        if not os.path.exists(exe):
            return f"{exe} is not installed (apt-get install slurm-wlm munge)"
    return None


class TwoNodeSlurm:
    def __init__(self, cluster: Cluster, start_timeout: float = 60.0):
        self.c = cluster
        self.start_timeout = start_timeout
        self.root = cluster.path("slurm")
        self.procs: Dict[str, subprocess.Popen] = {}
        self.jobs: list = []

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    @property
    def conf(self) -> str:
        return self.path("etc", "slurm.conf")

    def env(self, base: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        env = dict(os.environ if base is None else base)
        env["SLURM_CONF"] = self.conf
        return env

    def cmd(self, *args: str, timeout: float = 30.0, env=None) -> subprocess.CompletedProcess:
        """A Slurm client command, run in node1."""
        return self.c.run("node1", list(args), timeout=timeout, env=self.env(env))

    # -- start ----------------------------------------------------------------------
    def start(self) -> "TwoNodeSlurm":
        for d in ("etc", "state", "log", "munge", "nodetmp"):
            os.makedirs(self.path(d))
        self._start_munged()
        self._write_conf()
        self._daemon("slurmctld", "node1", [SLURMCTLD, "-D", "-f", self.conf])
        for node in NODES:
            os.makedirs(self.path(f"spool-{node}"))
            os.makedirs(self.path(f"tmp-{node}"))
            # TmpFS: a node-local directory at one path on every node, as a cluster's
            # local /tmp (srun's PMIx plugin makes spmix_appdir_UID_JOB.STEP there,
            # which two nodes sharing one /tmp would both create)
            prelude = (cgroup_prelude() +
                       f" && mount --bind {self.path(f'tmp-{node}')} {self.path('nodetmp')}")
            self._daemon(f"slurmd-{node}", node, [SLURMD, "-D", "-f", self.conf, "-N", node],
                         prelude=prelude)
        self._wait_idle()
        return self

    def _daemon(self, name: str, node: str, args, prelude: str = "") -> None:
        log = open(self.path("log", f"{name}.out"), "w")
        self.procs[name] = self.c.popen(node, args, mount=bool(prelude), prelude=prelude,
                                        env=self.env(), stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self._register(name)

    def _register(self, name: str) -> None:
        """The cluster counts our daemons as daemons, not as a job's leftovers."""
        self.c.procs[f"slurm-{name}"] = self.procs[name]
        pidfile = {"munged": "munge/munged.pid", "slurmctld": "slurmctld.pid"}.get(
            name, f"{name}.pid")
        self.c.daemon_pidfiles.append(self.path(pidfile))

    def _start_munged(self) -> None:
        key = self.path("munge", "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(128))
        os.chmod(key, 0o400)
        user = pwd.getpwnam("munge")
        for p in (self.path("munge"), key):
            os.chown(p, user.pw_uid, user.pw_gid)
        args = ["runuser", "-u", "munge", "--", MUNGED, "--foreground",
                f"--key-file={key}", f"--socket={self.path('munge', 'munge.sock')}",
                f"--pid-file={self.path('munge', 'munged.pid')}",
                f"--log-file={self.path('munge', 'munged.log')}",
                f"--seed-file={self.path('munge', 'munged.seed')}"]
        log = open(self.path("log", "munged.out"), "w")
        self.procs["munged"] = self.c.popen("node1", args, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self._register("munged")
        deadline = time.time() + self.start_timeout
        while not os.path.exists(self.path("munge", "munge.sock")):
            if time.time() > deadline or self.procs["munged"].poll() is not None:
                raise RuntimeError(f"munged did not start\n{self.logs()}")
            time.sleep(0.1)

    def _write_conf(self) -> None:
        timeouts = "".join(f"{k}={v}\n" for k, v in TIMEOUTS.items())
        nodes = "".join(f"NodeName={n} NodeAddr={address(n)} Port={SLURMD_PORTS[n]} CPUs=2 "
                        f"Gres=gpu:2 State=UNKNOWN\n" for n in NODES)
        with open(self.conf, "w") as f:
            f.write(f"""# two-node test cluster (tests/cluster/slurm_cluster.py)
ClusterName=ysgdc
SlurmctldHost=node1({address('node1')})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.path('munge', 'munge.sock')}
CredType=cred/munge
SlurmctldPort={CTLD_PORT}
StateSaveLocation={self.path('state')}
SlurmdSpoolDir={self.path('spool-%n')}
TmpFS={self.path('nodetmp')}
SlurmctldPidFile={self.path('slurmctld.pid')}
SlurmdPidFile={self.path('slurmd-%n.pid')}
SlurmctldLogFile={self.path('log', 'slurmctld.log')}
SlurmdLogFile={self.path('log', 'slurmd-%n.log')}
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
{timeouts}{nodes}PartitionName=cluster Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP
""")
        with open(self.path("etc", "gres.conf"), "w") as f:
            for n in NODES:
                for dev in ("/dev/null", "/dev/zero"):
                    f.write(f"NodeName={n} Name=gpu File={dev}\n")

    def _wait_idle(self) -> None:
        deadline = time.time() + self.start_timeout
        states = ""
        while time.time() < deadline:
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited ({p.returncode})\n{self.logs()}")
            r = self.cmd("sinfo", "-h", "-N", "-o", "%N %T")
            states = r.stdout.strip()
            if sorted(states.split("\n")) == ["node1 idle", "node2 idle"]:
                return
            time.sleep(0.5)
        raise RuntimeError(f"the slurm nodes did not become idle ({states!r})\n{self.logs()}")

    # -- jobs -----------------------------------------------------------------------
    def sbatch(self, script: str, cwd: str, env: Optional[Dict[str, str]] = None,
               args: Tuple[str, ...] = ()) -> str:
        r = self.c.run("node1", ["sbatch", "--parsable", *args, script], cwd=cwd,
                       env=self.env(env), timeout=30)
        if r.returncode != 0:
            raise RuntimeError(f"sbatch failed ({r.returncode}): {r.stderr}\n{self.logs()}")
        job = r.stdout.strip().split(";")[0]
        self.jobs.append(job)
        return job

    def job_info(self, job: str) -> Dict[str, str]:
        r = self.cmd("scontrol", "show", "job", "-o", job)
        return dict(re.findall(r"(\w+)=(\S*)", r.stdout))

    def wait(self, job: str, timeout: float) -> Tuple[str, int]:
        """(final state, exit status of the batch script); cancels the job on timeout."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            info = self.job_info(job)
            if info.get("JobState") in TERMINAL:
                code, _, sig = info.get("ExitCode", "255:0").partition(":")
                return info["JobState"], int(code) if sig in ("", "0") else 128 + int(sig)
            time.sleep(0.5)
        self.cmd("scancel", job)
        raise TimeoutError(f"slurm job {job} did not finish in {timeout:.0f} s: {self.job_info(job)}")

    def wait_running(self, job: str, timeout: float) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.job_info(job).get("JobState") in {"RUNNING"} | TERMINAL:
                return
            time.sleep(0.3)
        raise TimeoutError(f"slurm job {job} did not start: {self.job_info(job)}")

    def logs(self) -> str:
        out = []
        for name in ("log/slurmctld.log", "log/slurmd-node1.log", "log/slurmd-node2.log",
                     "munge/munged.log"):
            try:
                with open(self.path(name)) as f:
                    out.append(f"--- {name}\n" + "".join(f.readlines()[-15:]))
            except OSError:
                pass
        return "\n".join(out)

    # -- stop -----------------------------------------------------------------------
    def stop(self) -> None:
        for job in self.jobs:
            try:
                self.cmd("scancel", job, timeout=10)
            except (OSError, subprocess.SubprocessError):
                pass
        for pidfile in ("slurmd-node2.pid", "slurmd-node1.pid", "slurmctld.pid",
                        "munge/munged.pid"):
            kill_pidfile(self.path(pidfile))
        for p in self.procs.values():
            if p.poll() is None:
                kill_pids([p.pid])
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        for name in self.procs:
            self.c.procs.pop(f"slurm-{name}", None)
        self.procs.clear()
        self.c.daemon_pidfiles = [f for f in self.c.daemon_pidfiles
                                  if not f.startswith(self.root + os.sep)]
