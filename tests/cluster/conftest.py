"""Fixtures of the two-node tests (tests/cluster): the namespace cluster, its Slurm,
the Fashion-MNIST cut. Nothing here runs at import: ranks of a two-node launch load
this file too (tests/cluster/rank_checks.py) and use none of it."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import netns  # noqa: E402


def _skip_reason():
    return netns.unavailable()


@pytest.fixture(scope="module")
def cluster():
    """node1 + node2 with their sshd (module scope: every module starts its own and
    removes it at its end, also when a test fails)."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    with netns.Cluster(**CLUSTER_SETTINGS) as c:
        yield c


# The cluster's fault-detection settings, the same for every test (docs/cluster.md):
# ssh keep-alives every 5 s, 3 missed = the session is gone (client and server side);
# TCP gives up on a peer that acknowledges nothing for 12.6 s (tcp_retries2=5 in both
# namespaces; Linux's default, 15, waits about 15 minutes).
CLUSTER_SETTINGS = dict(ssh_alive_s=5, tcp_retries2=5)


@pytest.fixture(scope="module")
def slurm(cluster):
    import slurm_cluster
    reason = slurm_cluster.unavailable()
    if reason:
        pytest.fail(reason)   # installed by `make install`: missing is a failure
    s = slurm_cluster.TwoNodeSlurm(cluster)
    try:
        s.start()
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="session")
def data_root(tmp_path_factory):
    """Fashion-MNIST's first 1,024 training and 512 test images (4 steps an epoch at
    the tiny config's global batch of 256)."""
    import common
    return common.write_fmnist(str(tmp_path_factory.mktemp("fmnist")))


@pytest.fixture
def jobs():
    """Jobs a test started; whatever is still running at its end is killed (its
    session on node1 and every job process on both nodes)."""
    started = []
    yield started
    for job in started:
        if job.proc.poll() is None:
            job.kill()
