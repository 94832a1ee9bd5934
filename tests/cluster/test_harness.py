"""The two namespace nodes themselves: names, addresses, the link, ssh, and what OpenMPI
sees of them (two hosts: ranks on different nodes are not local to each other)."""
import os
import subprocess

from common import PYTHON, REPO
from netns import IFACE, NODES, address, netns_name, sh


def test_nodes_names_addresses_and_isolation(cluster):
    for node in NODES:
        assert cluster.run(node, ["hostname"]).stdout.strip() == node
        addrs = cluster.run(node, ["ip", "-o", "-4", "addr", "show"]).stdout
        assert f"inet {address(node)}/24" in addrs and "inet 127.0.0.1/8" in addrs
        assert "inet6" not in cluster.run(node, ["ip", "-o", "addr", "show"]).stdout
        with open(f"/etc/netns/{netns_name(node)}/hosts") as f:
            assert f"{address('node2')} node2" in f.read()
        other = NODES[1 - NODES.index(node)]
        assert cluster.run(node, ["getent", "hosts", other]).stdout.split()[0] == address(other)
    # Nothing of ours in the host's namespace: no link, no address, no route.
    assert IFACE not in sh("ip", "-o", "link", "show").stdout
    assert "10.213.0." not in sh("ip", "-o", "addr", "show").stdout
    assert "10.213.0." not in sh("ip", "route", "show", "table", "all").stdout


def test_ssh_between_nodes_with_the_runs_own_key(cluster, tmp_path):
    for src, dst in (("node1", "node2"), ("node2", "node1")):
        r = cluster.ssh(src, dst, "hostname; cat /proc/sys/kernel/hostname")
        assert r.returncode == 0 and r.stdout.split() == [dst, dst], r.stderr
    # root by the run's key only: with another key (and no password), no way in
    other = str(tmp_path / "other_key")
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", other)
    with open(cluster.ssh_config) as f:
        conf = f.read().replace(f"IdentityFile {cluster.path('ssh', 'id_ed25519')}",
                                f"IdentityFile {other}")
    assert other in conf
    (tmp_path / "ssh_config").write_text(conf)
    r = cluster.run("node1", ["ssh", "-F", str(tmp_path / "ssh_config"), "node2", "true"],
                    timeout=30)
    assert r.returncode == 255 and "Permission denied" in r.stderr, r.stderr
    # and ~/.ssh was neither read nor written by the harness's ssh
    with open(cluster.ssh_config) as f:
        conf = f.read()
    assert "~/.ssh" not in conf and cluster.path("ssh", "known_hosts") in conf


def test_openmpi_sees_two_hosts(cluster):
    """2 ranks over ssh, one per node: OpenMPI's local size 1 on each (its shared
    memory transport, vader, only joins ranks of one host), and the ranks' TCP goes
    over the veth only (btl_tcp_if_include / oob_tcp_if_include)."""
    code = ("import os, socket; os.write(1, ('rank %s %s local %s\\n' % ("
            "os.environ['OMPI_COMM_WORLD_RANK'], socket.gethostname(), "
            "os.environ['OMPI_COMM_WORLD_LOCAL_SIZE'])).encode())")
    r = cluster.run("node1", ["mpirun", "-np", "2", "--host", "node1:1,node2:1",
                              "--bind-to", "none", PYTHON, "-c", code],
                    env=cluster.mpi_env(), cwd=REPO, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(r.stdout.strip().splitlines()) == ["rank 0 node1 local 1",
                                                     "rank 1 node2 local 1"], r.stdout
    env = cluster.mpi_env()
    assert env["OMPI_MCA_btl_tcp_if_include"] == IFACE == env["OMPI_MCA_oob_tcp_if_include"]
    assert "SSH_AUTH_SOCK" not in env and os.geteuid() == 0
    # no rank, no daemon of that job is left on either node
    for node in NODES:
        left = [p for p in cluster.pids(node) if p not in cluster.daemon_pids()]
        assert not left, subprocess.run(["ps", "-o", "pid,args", "-p",
                                         ",".join(map(str, left))], capture_output=True,
                                        text=True).stdout
