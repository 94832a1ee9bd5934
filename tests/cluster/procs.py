"""Process helpers of the two-node harness: commands, liveness, killing by pid only,
the processes of a network namespace, and the cgroup mounts a slurmd needs."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Iterable, List


def sh(*args: str, check: bool = True, timeout: float = 30.0) -> subprocess.CompletedProcess:
    r = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
    return r


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def kill_pids(pids: Iterable[int], grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after ``grace`` seconds, each pid given (and only those)."""
    pids = [p for p in set(pids) if p > 1 and p != os.getpid()]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.time() + (grace if sig == signal.SIGTERM else 5.0)
        while time.time() < deadline and any(alive(p) for p in pids):
            time.sleep(0.05)
        pids = [p for p in pids if alive(p)]
        if not pids:
            return


def kill_pidfile(path: str, grace: float = 5.0) -> None:
    try:
        with open(path) as f:
            pid = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return
    kill_pids([pid], grace)


def netns_pids(ns: str) -> List[int]:
    r = sh("ip", "netns", "pids", ns, check=False)
    return [int(p) for p in r.stdout.split() if p.isdigit()] if r.returncode == 0 else []


def cmdline(pid: int) -> List[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def cgroup_prelude() -> str:
    """Shell commands that mount again, inside a node's private mount namespace, the
    cgroup file systems this host has under /sys/fs/cgroup (``ip netns exec`` mounts a
    fresh /sys without them, and slurmd will not start without its cgroup plugin)."""
    cmds = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            point = left.split()[4]
            fstype, source, opts = (right.split() + ["", "", ""])[:3]
            if not point.startswith("/sys/fs/cgroup") or fstype not in ("tmpfs", "cgroup",
                                                                           "cgroup2"):
                continue
            cmds.append(f"mkdir -p {point} && mount -t {fstype} -o {opts} {source} {point}")
    return " && ".join(cmds) or "true"
