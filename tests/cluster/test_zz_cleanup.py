"""Runs last (file order): every cluster of the modules before has been removed by its
fixture; nothing with the prefix ysgdc- remains (namespaces, links, /etc/netns
entries, run directories, processes), no sshd runs in the host's namespace; and a
cluster whose user fails half-way is removed all the same."""
import pytest

import netns
from netns import NODES


def test_nothing_is_left_after_the_modules():
    reason = netns.unavailable()
    if reason:
        pytest.skip(reason)
    assert netns.leftovers() == []


def test_cleanup_also_on_failure():
    reason = netns.unavailable()
    if reason:
        pytest.skip(reason)
    with pytest.raises(RuntimeError, match="half-way"):
        with netns.Cluster() as c:
            assert sorted(netns.our_namespaces()) == [netns.netns_name(n) for n in NODES]
            p = c.popen("node2", ["sleep", "600"])   # a process the failure leaves behind
            raise RuntimeError("failed half-way")
    assert p.wait(timeout=10) != 0
    assert netns.leftovers() == []
