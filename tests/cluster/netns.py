"""A two-node cluster inside one machine: network + UTS namespaces, a veth link, sshd.

    with Cluster() as c:                      # node1 and node2, ssh between them works
        c.run("node1", ["ssh", "-F", c.ssh_config, "node2", "hostname"])   # -> node2
        p = c.popen("node1", ["mpirun", ...], env=c.mpi_env(os.environ))

The hosts (every name starts with ``PREFIX``, ``ysgdc-``):

=============  ======================  ===========================================
node           node1                   node2
netns          ysgdc-node1             ysgdc-node2
link           ysgdc-eth0 10.213.0.1/24 ysgdc-eth0 10.213.0.2/24 (one veth pair)
hostname       node1 (a UTS namespace per process started there)
/etc/hosts     /etc/netns/ysgdc-node1/hosts (``ip netns exec`` bind-mounts it): both nodes
sshd           10.213.0.1:22           10.213.0.2:22 (Debian's /usr/sbin/sshd -D)
=============  ======================  ===========================================

The veth pair is created with both ends already inside the namespaces, the
addresses exist only there, and no route is ever added to the host's namespace:
nothing here can reach or be reached from outside the two namespaces. Each
sshd has a host key made for the run, accepts root by that run's key only, and
keeps its pid file and log in the run directory (``/tmp/ysgdc-run-XXXX``,
shared by both nodes like a cluster's shared file system). The ssh client uses
the run's own config (``ssh -F RUN/ssh_config``) and known_hosts; ``~/.ssh`` is
never read or written.

(ssh keys and configs: tests/cluster/sshd.py; process helpers: tests/cluster/procs.py.)
Every process is started with ``ip netns exec NS unshare --uts`` (plus
``--mount`` for sshd, which gets a private tmpfs on /run for its privilege
separation directory, so that the host needs no /run/sshd) and sets its
hostname there. ``stop()`` (also run when ``start()`` fails, and from the
context manager whatever happens) kills every process left in the two
namespaces (``ip netns pids``: only processes this harness started can be in
them), the daemons by their pid files, deletes the namespaces (which removes
the veth pair), ``/etc/netns/ysgdc-*`` and the run directory.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
import time
from typing import Dict, List, Optional, Sequence

import sshd
from procs import (alive, cgroup_prelude, cmdline, kill_pidfile, kill_pids,  # noqa: F401
                   netns_pids, sh)

PREFIX = "ysgdc-"
NODES = ("node1", "node2")
SUBNET = "10.213.0"            # a /24 that exists only inside the two namespaces
IFACE = PREFIX + "eth0"        # the veth end's name in either namespace
LOCK = f"/tmp/{PREFIX}lock"    # one cluster at a time on a machine
ETC_NETNS = "/etc/netns"


def netns_name(node: str) -> str:
    return PREFIX + node


def address(node: str) -> str:
    return f"{SUBNET}.{NODES.index(node) + 1}"


def unavailable() -> Optional[str]:
    """None when namespaces can be made here, else the one-line reason to skip."""
    try:
        r = subprocess.run(["unshare", "--net", "--uts", "true"], capture_output=True,
                           text=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as e:
        return f"unshare --net --uts fails here: {e}"
    if r.returncode != 0:
        return f"unshare --net --uts fails here: {r.stderr.strip() or r.returncode}"
    if os.geteuid() != 0:   # (unshare --net without a user namespace already needs root)
        return "the two-node cluster needs root (network namespaces, sshd)"
    return None


def our_namespaces() -> List[str]:
    r = sh("ip", "netns", "list", check=False)
    return [line.split()[0] for line in r.stdout.splitlines()
            if line.split() and line.split()[0].startswith(PREFIX)]


def leftovers() -> List[str]:
    """Everything of this harness that still exists (empty when all is clean): namespaces,
    links in the host namespace, /etc/netns entries, run directories, the lock, processes
    in our namespaces or with a run directory in their command line, and any sshd in the
    host's own network namespace."""
    found = [f"netns {ns}" for ns in our_namespaces()]
    r = sh("ip", "-o", "link", "show", check=False)
    found += [f"host link {line.split(':')[1].strip()}" for line in r.stdout.splitlines()
              if PREFIX in line]
    if os.path.isdir(ETC_NETNS):
        found += [f"{ETC_NETNS}/{d}" for d in os.listdir(ETC_NETNS) if d.startswith(PREFIX)]
    found += [f"/tmp/{d}" for d in os.listdir("/tmp") if d.startswith(PREFIX)]
    host_net = os.readlink("/proc/self/ns/net")
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        args = cmdline(int(entry))
        if any(f"/tmp/{PREFIX}" in a for a in args):
            found.append(f"process {entry}: {' '.join(args)[:120]}")
            continue
        try:
            comm = open(f"/proc/{entry}/comm").read().strip()
            net = os.readlink(f"/proc/{entry}/ns/net")
        except OSError:
            continue
        if comm == "sshd" and net == host_net and alive(int(entry)):
            found.append(f"sshd {entry} in the host's network namespace: {' '.join(args)[:120]}")
    return found


class Cluster:
    """Two namespace nodes joined by a veth pair, each with an sshd (see the module doc)."""

    def __init__(self, ssh_alive_s: int = 5, tcp_retries2: Optional[int] = None,
                 start_timeout: float = 30.0):
        # ssh keep-alives (client ServerAlive*, server ClientAlive*: interval x 3 probes):
        # how long a partitioned ssh session (mpirun's remote daemons) lives on.
        self.ssh_alive_s = ssh_alive_s
        # net.ipv4.tcp_retries2 inside both namespaces (per network namespace): how long
        # TCP retransmits unacknowledged data across a partition before it gives up
        # (None: the kernel's default, 15 = about 15 minutes; 5 = 12.6 s, the least that
        # still rides out a 6 s outage: its retransmits come 0.2, 0.6, 1.4, 3.0, 6.2 s
        # after the first send).
        self.tcp_retries2 = tcp_retries2
        self.start_timeout = start_timeout
        self.root: Optional[str] = None
        self.procs: Dict[str, subprocess.Popen] = {}
        self.daemon_pidfiles: List[str] = []   # further daemons (Slurm's) register theirs
        self._lock = None

    # -- paths -----------------------------------------------------------------------
    def path(self, *parts: str) -> str:
        assert self.root is not None, "the cluster is not started"
        return os.path.join(self.root, *parts)

    @property
    def ssh_config(self) -> str:
        return self.path("ssh", "ssh_config")

    @property
    def rsh_agent(self) -> str:
        """OpenMPI's plm_rsh_agent: ssh with this cluster's config."""
        return f"ssh -F {self.ssh_config}"

    # -- commands in a node ----------------------------------------------------------
    def argv(self, node: str, args: Sequence[str], mount: bool = False,
             prelude: str = "") -> List[str]:
        """``args`` as a process of ``node``: its network namespace, a UTS namespace with
        the node's hostname; with ``mount`` also a private mount namespace in which the
        shell commands ``prelude`` run first (as root, before the exec)."""
        ns = ["--uts", "--mount"] if mount else ["--uts"]
        script = 'hostname "$0" && ' + (prelude + " && " if prelude else "") + 'exec "$@"'
        return ["ip", "netns", "exec", netns_name(node), "unshare", *ns, "sh", "-c", script,
                node, *args]

    def popen(self, node: str, args: Sequence[str], mount: bool = False, prelude: str = "",
              **kw) -> subprocess.Popen:
        kw.setdefault("start_new_session", True)
        return subprocess.Popen(self.argv(node, args, mount, prelude), **kw)

    def run(self, node: str, args: Sequence[str], timeout: float = 60.0, check: bool = False,
            **kw) -> subprocess.CompletedProcess:
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        r = subprocess.run(self.argv(node, args), timeout=timeout, **kw)
        if check and r.returncode != 0:
            raise RuntimeError(f"{node}: {' '.join(args)} failed ({r.returncode}): "
                               f"{r.stdout}{r.stderr}")
        return r

    def ssh(self, src: str, dst: str, command: str, timeout: float = 30.0) -> subprocess.CompletedProcess:
        return self.run(src, ["ssh", "-F", self.ssh_config, dst, command], timeout=timeout)

    def mpi_env(self, base: Optional[Dict[str, str]] = None, **extra: str) -> Dict[str, str]:
        """``base`` plus what OpenMPI needs here: ssh with our config as its remote agent,
        TCP only over the veth (BTL and ORTE's out-of-band channel), root allowed."""
        env = dict(os.environ if base is None else base)
        env.pop("SSH_AUTH_SOCK", None)
        env.update(OMPI_MCA_plm_rsh_agent=self.rsh_agent,
                   OMPI_MCA_btl_tcp_if_include=IFACE, OMPI_MCA_oob_tcp_if_include=IFACE,
                   OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        env.update(extra)
        return env

    def tx_bytes(self, node: str) -> int:
        """The veth's transmitted bytes, read inside the node (its own /sys)."""
        r = self.run(node, ["cat", f"/sys/class/net/{IFACE}/statistics/tx_bytes"], check=True)
        return int(r.stdout.strip())

    def link(self, node: str, up: bool) -> None:
        """Take the node's end of the veth down (a network partition) or up again."""
        sh("ip", "-n", netns_name(node), "link", "set", IFACE, "up" if up else "down")
        if up:  # carrier back on both ends
            deadline = time.time() + 10
            while time.time() < deadline:
                r = sh("ip", "-n", netns_name(node), "-o", "link", "show", IFACE, check=False)
                if "LOWER_UP" in r.stdout:
                    return
                time.sleep(0.05)

    def daemon_pids(self) -> set:
        """The cluster's daemons: the sshd listeners and what registered a pid file."""
        pids = {p.pid for p in self.procs.values()}
        for path in self.daemon_pidfiles + [self.path(n, "sshd.pid") for n in NODES]:
            try:
                with open(path) as f:
                    pids.add(int(f.read().split()[0]))
            except (OSError, ValueError, IndexError):
                pass
        return pids

    def pids(self, node: str) -> List[int]:
        return netns_pids(netns_name(node))

    # -- start -----------------------------------------------------------------------
    def start(self) -> "Cluster":
        self._lock = open(LOCK, "w")
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        self._remove_stale()
        self.root = tempfile.mkdtemp(prefix=PREFIX + "run-", dir="/tmp")
        os.chmod(self.root, 0o755)   # munged (user munge) reaches its socket below it
        self._network()
        self._ssh_keys()
        for node in NODES:
            self._start_sshd(node)
        for node in NODES:
            self._wait_ssh(node)
        return self

    def _remove_stale(self) -> None:
        """What an earlier run killed before its clean-up left: our namespaces' processes
        (only ours can be there), the namespaces, /etc/netns entries, run directories."""
        for ns in our_namespaces():
            kill_pids(netns_pids(ns), grace=2.0)
            sh("ip", "netns", "delete", ns, check=False)
        for node in NODES:
            shutil.rmtree(os.path.join(ETC_NETNS, netns_name(node)), ignore_errors=True)
        for d in os.listdir("/tmp"):
            if d.startswith(PREFIX + "run-"):
                shutil.rmtree(os.path.join("/tmp", d), ignore_errors=True)

    def _network(self) -> None:
        for node in NODES:
            sh("ip", "netns", "add", netns_name(node))
            # IPv4 only: no self-assigned IPv6 link-local addresses on our link
            sh("ip", "netns", "exec", netns_name(node), "sysctl", "-q", "-w",
               "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
        n1, n2 = (netns_name(n) for n in NODES)
        # both ends created directly inside their namespaces: never in the host's
        sh("ip", "link", "add", IFACE, "netns", n1, "type", "veth", "peer", "name", IFACE,
           "netns", n2)
        hosts = "127.0.0.1 localhost\n" + "".join(f"{address(n)} {n}\n" for n in NODES)
        for node in NODES:
            ns = netns_name(node)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", ns, "addr", "add", f"{address(node)}/24", "dev", IFACE)
            sh("ip", "-n", ns, "link", "set", IFACE, "up")
            os.makedirs(os.path.join(ETC_NETNS, ns), exist_ok=True)
            with open(os.path.join(ETC_NETNS, ns, "hosts"), "w") as f:
                f.write(hosts)
            if self.tcp_retries2 is not None:
                sh("ip", "netns", "exec", ns, "sysctl", "-q", "-w",
                   f"net.ipv4.tcp_retries2={self.tcp_retries2}")


    def _ssh_keys(self) -> None:
        sshd.write_keys_and_configs(self.root, NODES, address, netns_name, self.ssh_alive_s)

    def _start_sshd(self, node: str) -> None:
        d = self.path(node)
        # A private tmpfs on /run (in the sshd's own mount namespace) holds sshd's
        # privilege separation directory /run/sshd: nothing is created in the host's /run.
        prelude = "mount -t tmpfs -o mode=755,size=1m ysgdc-run /run && mkdir -m 755 /run/sshd"
        args = ["/usr/sbin/sshd", "-D", "-f", os.path.join(d, "sshd_config"),
                "-o", f"ListenAddress={address(node)}", "-E", os.path.join(d, "sshd.log")]
        log = open(os.path.join(d, "sshd.out"), "w")
        self.procs[f"sshd-{node}"] = self.popen(node, args, mount=True, prelude=prelude,
                                                stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def _wait_ssh(self, node: str) -> None:
        deadline = time.time() + self.start_timeout
        other = NODES[1 - NODES.index(node)]
        last = None
        while time.time() < deadline:
            p = self.procs[f"sshd-{node}"]
            if p.poll() is not None:
                break
            last = self.ssh(other, node, "hostname", timeout=15)
            if last.returncode == 0 and last.stdout.strip() == node:
                return
            time.sleep(0.2)
        logs = ""
        for name in ("sshd.log", "sshd.out"):
            try:
                logs += open(self.path(node, name)).read()[-2000:]
            except OSError:
                pass
        raise RuntimeError(f"sshd of {node} does not answer: "
                           f"{last.stderr if last else ''}\n{logs}")

    # -- stop ------------------------------------------------------------------------
    def stop(self) -> None:
        try:
            for ns in (netns_name(n) for n in NODES):
                if ns in our_namespaces():
                    kill_pids(netns_pids(ns), grace=3.0)
            if self.root:
                for node in NODES:
                    kill_pidfile(self.path(node, "sshd.pid"))
            for p in self.procs.values():
                if p.poll() is None:
                    kill_pids([p.pid])
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            self.procs.clear()
            for node in NODES:
                ns = netns_name(node)
                if ns in our_namespaces():
                    sh("ip", "netns", "delete", ns, check=False)
                shutil.rmtree(os.path.join(ETC_NETNS, ns), ignore_errors=True)
            try:
                os.rmdir(ETC_NETNS)   # only when empty (it did not exist before us)
            except OSError:
                pass
            if self.root:
                shutil.rmtree(self.root, ignore_errors=True)
                self.root = None
        finally:
            if self._lock is not None:
                try:
                    os.unlink(LOCK)
                except OSError:
                    pass
                self._lock.close()
                self._lock = None

    def __enter__(self) -> "Cluster":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()
