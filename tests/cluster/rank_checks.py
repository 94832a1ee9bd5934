"""Run on every rank of a two-node launch, next to tests/multiproc/test_averaging.py:

    mpirun -np 4 --host node1:2,node2:2 ... python -m pytest \\
        tests/multiproc/test_averaging.py tests/cluster/rank_checks.py

(not a ``test_*.py`` file, so the host's own pytest never collects it). Every rank
checks the same things, so no collective waits for a rank that skipped:

- Horovod's communicators: ``local_size`` = ranks per node (YASGD_CLUSTER_PER_NODE),
  ``cross_size`` = 2 nodes, and the ranks' host names are node1 and node2, ranks
  filling node1 first (OpenMPI's by-slot placement);
- the gradients crossed the link: the averaging training of test_averaging.py, run
  again between two readings of this node's veth byte counters
  (/sys/class/net/ysgdc-eth0/statistics, the node's own /sys), raised tx_bytes and
  rx_bytes by at least the gradients' bytes of every step: whatever the allreduce's
  algorithm, each node must send every element of its partial sum to the other at
  least once per step. The counters per rank go to YASGD_CLUSTER_REPORT for the
  host's test to read.
"""
import json
import os
import socket
import sys

import horovod.mxnet as hvd
import mxnet as mx
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "multiproc"))
import test_averaging as avg  # noqa: E402
from yasgd import allreduce  # noqa: E402

IFACE = os.environ.get("YASGD_CLUSTER_IFACE", "ysgdc-eth0")
NODES = ("node1", "node2")


def counters():
    base = f"/sys/class/net/{IFACE}/statistics"
    with open(f"{base}/tx_bytes") as tx, open(f"{base}/rx_bytes") as rx:
        return int(tx.read()), int(rx.read())


def hosts_of_every_rank():
    code = np.frombuffer(socket.gethostname().encode().ljust(16, b"\0")[:16], dtype=np.uint8)
    every = hvd.allgather(mx.nd.array(code.reshape(1, -1), dtype="int32"), name="rc.hosts")
    return [bytes(row.astype(np.uint8)).rstrip(b"\0").decode() for row in every.asnumpy()]


def test_local_and_cross_communicators():
    hvd.init()
    per_node = int(os.environ["YASGD_CLUSTER_PER_NODE"])
    assert hvd.size() == per_node * len(NODES)
    assert hvd.local_size() == per_node, (hvd.rank(), hvd.local_size())
    assert hvd.cross_size() == len(NODES), (hvd.rank(), hvd.cross_size())
    assert hvd.local_rank() == hvd.rank() % per_node
    assert hvd.cross_rank() == hvd.rank() // per_node
    hosts = hosts_of_every_rank()
    assert hosts == [NODES[r // per_node] for r in range(hvd.size())], hosts
    assert socket.gethostname() == NODES[hvd.rank() // per_node]


def test_gradients_cross_the_link():
    hvd.init()
    batches = avg.global_batches(hvd.size())
    lo, hi = hvd.rank() * avg.B, (hvd.rank() + 1) * avg.B
    net = avg.bn_free_net()
    tr = allreduce.DistributedTrainer(net.collect_params(), avg.lars(), group_budget_bytes=2048)
    grad_bytes = sum(int(np.prod(p.shape)) * 4 for p in net.collect_params().values()
                     if p.grad_req != "null")
    hvd.allreduce(mx.nd.zeros(1), name="rc.before").asnumpy()     # sync point: all ready
    tx0, rx0 = counters()
    got = avg.train(net, tr, batches, lo, hi, avg.B)              # .asnumpy() inside: synced
    hvd.allreduce(mx.nd.zeros(1), name="rc.after").asnumpy()      # sync point: all done
    tx1, rx1 = counters()
    ref_net = avg.bn_free_net()                                   # and it is still exact
    ref = avg.train(ref_net, mx.gluon.Trainer(ref_net.collect_params(), avg.lars(), kvstore=None),
                    batches, 0, hvd.size() * avg.B, hvd.size() * avg.B)
    avg.assert_close(got, ref)
    need = avg.STEPS * grad_bytes
    report = {"rank": hvd.rank(), "host": socket.gethostname(), "tx": tx1 - tx0,
              "rx": rx1 - rx0, "gradient_bytes_per_step": grad_bytes, "steps": avg.STEPS,
              "local_size": hvd.local_size(), "cross_size": hvd.cross_size()}
    out = os.environ.get("YASGD_CLUSTER_REPORT")
    if out:
        with open(f"{out}.{hvd.rank()}", "w") as f:
            json.dump(report, f)
    assert tx1 - tx0 >= need and rx1 - rx0 >= need, report
