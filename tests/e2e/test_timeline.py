"""One allreduce per static group and step, read from Horovod's own timeline.

Two CPU ranks train a small ResNet for a few steps with yasgd's DistributedTrainer under the
Horovod settings of GPU hosts (jobs/common.sh: HOROVOD_DISABLE_GROUP_FUSION=1 and a fusion
threshold of at least the largest padded group) and HOROVOD_TIMELINE. The timeline (a Chrome
trace written by rank 0: one "process" per tensor name, B/E events per activity, in the order
Horovod's background thread recorded them) shows each fused operation as a run of
MPI_ALLREDUCE (or GLOO_ALLREDUCE) starts, one per tensor, followed by their ends. The test
asserts that every such operation holds exactly the tensors of one trainer group (Horovod names
them ``horovod_allreduce.<name>_<i>of<n>``, ``name`` = ``{prefix}yasgd.g{gi}``) and that there
are exactly groups x steps of them.
"""
from __future__ import annotations

import json
import os
import re
import sys
from collections import Counter

from test_preflight import _run as run_bounded   # same folder: pytest puts it on sys.path

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEPS = 3
BUDGET = 20000          # bytes: several groups of resnet8's tensors, some of several tensors

WORKER = r"""
import json, os, sys
import numpy as np
import mxnet as mx
from yasgd import dist, preflight
from yasgd.allreduce import DistributedTrainer
from yasgd.model import build, trainable_params
steps, budget, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
world = dist.world()
assert world.size == 2, world
mx.random.seed(1)
net = build("resnet8", classes=10)
net.initialize(mx.init.Xavier())
net(mx.nd.zeros((1, 3, 32, 32)))
trainer = DistributedTrainer(trainable_params(net), "sgd", {"learning_rate": 0.01},
                             group_budget_bytes=budget, prefix="tl.")
assert preflight.fusion_guard(trainer.groups) is None, preflight.fusion_guard(trainer.groups)
loss_fn = mx.gluon.loss.SoftmaxCrossEntropyLoss()
rng = np.random.RandomState(world.rank)
for _ in range(steps):
    x = mx.nd.array(rng.rand(4, 3, 32, 32))
    y = mx.nd.array(rng.randint(0, 10, 4))
    with mx.autograd.record():
        loss = loss_fn(net(x), y)
    loss.backward()
    trainer.step(4)
mx.nd.waitall()   # every allreduce done: Horovod queues an op's end event before its callback
if world.rank == 0:
    with open(out, "w") as f:
        json.dump([len(g) for g in trainer.groups], f)
import horovod.mxnet as hvd
# stop_timeline() returns once the writer thread has written every queued event and closed
# the file; shutdown() alone stops that thread without draining its queue, which loses the
# last step's events when the writer lags (a loaded host).
hvd.stop_timeline()
hvd.shutdown()
"""

NAME = re.compile(r"^horovod_allreduce\.tl\.yasgd\.g(\d+)(?:_(\d+)of(\d+))?$")


def tensor_names(trace):
    """{pid: tensor name}: the timeline models each tensor as a Chrome-trace "process" (pid 0,
    the trace's start, has no name)."""
    return {e["pid"]: e["args"]["name"] for e in trace
            if e.get("ph") == "M" and e.get("name") == "process_name" and "name" in e["args"]}


def fused_operations(trace):
    """The tensor-name sets of the fused allreduce operations, in order: each operation is a
    run of MPI_/GLOO_ALLREDUCE begin events (one per tensor) closed by their end events."""
    names = tensor_names(trace)
    open_acts = {}
    ops, current, closing = [], None, False
    for e in trace:
        ph, pid = e.get("ph"), e.get("pid")
        if ph == "B":
            open_acts.setdefault(pid, []).append(e["name"])
            if e["name"] in ("MPI_ALLREDUCE", "GLOO_ALLREDUCE"):
                if current is None or closing:
                    current, closing = set(), False
                    ops.append(current)
                current.add(names[pid])
        elif ph == "E" and open_acts.get(pid):
            if open_acts[pid].pop() in ("MPI_ALLREDUCE", "GLOO_ALLREDUCE"):
                closing = True
    return ops


def test_each_allreduce_is_one_static_group(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    timeline = tmp_path / "timeline.json"
    groups_file = tmp_path / "groups.json"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HOROVOD_", "OMPI_", "PMIX_", "MXNET_"))}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=REPO, HOROVOD_TIMELINE=str(timeline),
               HOROVOD_DISABLE_GROUP_FUSION="1", HOROVOD_FUSION_THRESHOLD="67108864",
               HOROVOD_CYCLE_TIME="5")
    cmd = [sys.executable, "-m", "yasgd.launch", "-np", "2", "--timeout", "150", "--",
           sys.executable, str(script), str(STEPS), str(BUDGET), str(groups_file)]
    r = run_bounded(cmd, env, timeout=180)     # the 2-rank run, killed whole on timeout
    assert r.returncode == 0, r.stdout[-3000:]
    sizes = json.loads(groups_file.read_text())
    assert len(sizes) >= 3 and max(sizes) > 1, sizes       # several groups, some fused

    text = timeline.read_text().rstrip()
    trace = json.loads(text if text.endswith("]") else text.rstrip(",") + "]")
    ops = [op for op in fused_operations(trace) if any(NAME.match(n) for n in op)]
    seen = Counter()
    for op in ops:
        parsed = [NAME.match(n) for n in op]
        assert all(parsed), sorted(op)                       # no foreign tensor in a group's op
        gis = {int(m.group(1)) for m in parsed}
        assert len(gis) == 1, f"one operation spans groups {sorted(gis)}: {sorted(op)}"
        gi = gis.pop()
        n = sizes[gi]
        want = {f"horovod_allreduce.tl.yasgd.g{gi}"} if n == 1 else \
            {f"horovod_allreduce.tl.yasgd.g{gi}_{i}of{n}" for i in range(1, n + 1)}
        assert op == want, f"group {gi}: operation holds {sorted(op)}, group is {sorted(want)}"
        seen[gi] += 1
    print(f"\ntimeline: {len(sizes)} groups (tensors per group {sizes}), {STEPS} steps, "
          f"{len(ops)} allreduce operations, each exactly one group")
    assert len(ops) == len(sizes) * STEPS, (len(ops), len(sizes), STEPS)
    assert seen == {gi: STEPS for gi in range(len(sizes))}, seen
