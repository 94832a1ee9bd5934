"""The host-memory rule of a CPU training (yasgd.hostmem): the closed form of what one image
keeps for the backward pass against MXNet's shape inference, the premise that a real step
needs at least that much, this host's memory, the ranks a launcher announces, and the
commands' line."""
import json
import os
import subprocess
import sys
import textwrap

import mxnet as mx
import numpy as np
import pytest

from yasgd import UsageError, config, hostmem, model

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
YASGD = os.path.join(os.path.dirname(sys.executable), "yasgd")
DEMO = os.path.join(ROOT, "examples", "configs", "demo.yaml")


def _held_by_mxnet(name, width, stem_stride, image, in_channels):
    """The input and every Convolution node's output for one image, by MXNet's shape
    inference over the network's graph."""
    net = model.build(name, classes=10, width=width, stem_stride=stem_stride,
                      in_channels=in_channels)
    nodes = net(mx.sym.var("data")).get_internals()
    _, shapes, _ = nodes.infer_shape(data=(1, in_channels, image, image))
    ops = {n["name"]: n["op"] for n in json.loads(nodes.tojson())["nodes"]}
    convs = [int(np.prod(s)) for n, s in zip(nodes.list_outputs(), shapes)
             if n.endswith("_output") and ops.get(n[:-len("_output")]) == "Convolution"]
    return in_channels * image * image + sum(convs), len(convs)


@pytest.mark.parametrize("name, width, stem_stride, image, in_channels", [
    ("resnet8", 16, 1, 28, 1), ("resnet8", 16, 2, 28, 1), ("resnet8", 16, 2, 600, 3),
    ("resnet20", 8, 3, 50, 3), ("resnet14", 8, 64, 1, 3), ("resnet56", 4, 1, 33, 3),
    ("resnet18", 64, 1, 100, 3), ("resnet34", 64, 1, 7, 1), ("resnet50", 64, 1, 224, 3),
    ("resnet50_v1.5", 64, 1, 225, 3), ("resnet101", 64, 1, 1, 3), ("resnet152", 64, 1, 9, 3),
])
def test_the_closed_form_is_mxnets(name, width, stem_stride, image, in_channels):
    held, convs = _held_by_mxnet(name, width, stem_stride, image, in_channels)
    assert held == hostmem.held_for_backward(name, width, stem_stride, image, in_channels)
    assert convs == len(list(hostmem.conv_outputs(name, width, stem_stride, image,
                                                  in_channels)))


_STEP = textwrap.dedent("""
    import sys
    import mxnet as mx
    from mxnet import autograd
    from yasgd import model
    name, image, batch, hybrid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    net = model.build(name, classes=10, width=16, stem_stride=1)
    net.initialize(mx.init.Xavier())
    if hybrid == "1":
        net.hybridize(static_alloc=True, static_shape=True)
    loss = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    x, y = mx.nd.random.uniform(shape=(batch, 3, image, image)), mx.nd.zeros((batch,))
    def peak():     # this process's peak resident memory (getrusage's would count the
        with open("/proc/self/status") as f:     # parent's at the fork)
            return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM:"))
    for n in (2, batch):      # a step on 2 images first: the kernels and the graph, warm
        with autograd.record():
            out = loss(net(x[:n]), y[:n])
        out.backward()
        mx.nd.waitall()
        if n == 2:
            before = peak()
    print(peak() - before)
""")


@pytest.mark.parametrize("name, image, batch, hybrid", [
    ("resnet8", 64, 128, "0"), ("resnet8", 64, 128, "1"), ("resnet50", 64, 32, "0"),
    ("resnet50", 64, 32, "1"),
])
def test_a_real_step_needs_at_least_the_bound(name, image, batch, hybrid):
    # the premise of the rule: the peak resident memory of one forward and backward pass on
    # a micro-batch grows by at least what the closed form says it keeps (imperative, as the
    # small ResNets train, and hybridized, as ResNet-50 does)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-c", _STEP, name, str(image), str(batch), hybrid],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    grew = int(p.stdout.split()[-1])
    bound = hostmem.held_for_backward(name, 16, 1, image, 3) * batch * 4
    assert bound > 50e6 and grew >= bound, (grew, bound)


def test_this_hosts_memory_is_meminfos():
    with open("/proc/meminfo") as f:
        info = {k: int(v.split()[0]) * 1024 for k, v in (line.split(":", 1) for line in f)}
    have, what = hostmem.host_memory()
    assert 0 < have <= info["MemTotal"] + info["SwapTotal"]
    assert what in ("RAM and swap", "RAM, no swap", "its cgroup's memory limit")


@pytest.mark.parametrize("env, ranks", [
    ({}, 1), ({"OMPI_COMM_WORLD_LOCAL_SIZE": "4"}, 4), ({"HOROVOD_LOCAL_SIZE": "8"}, 8),
    ({"MPI_LOCALNRANKS": "3"}, 3),
    ({"SLURM_NODEID": "1", "SLURM_STEP_TASKS_PER_NODE": "4(x2),3"}, 4),
    ({"SLURM_NODEID": "2", "SLURM_STEP_TASKS_PER_NODE": "4(x2),3"}, 3),
    ({"SLURM_NODEID": "0", "SLURM_STEP_TASKS_PER_NODE": "bad"}, 1),
    # "²" passes str.isdigit and fails int(): not a count (envcheck refuses it first)
    ({"OMPI_COMM_WORLD_LOCAL_SIZE": "\u00b2", "HOROVOD_LOCAL_SIZE": "2"}, 2),
    ({"SLURM_NODEID": "0", "SLURM_STEP_TASKS_PER_NODE": "\u00b2"}, 1),
    ({"SLURM_NODEID": "0", "SLURM_STEP_TASKS_PER_NODE": "2(x\u00b2)"}, 1),
    ({"SLURM_NODEID": "\u00b2", "SLURM_STEP_TASKS_PER_NODE": "2,3"}, 1),
    ({"SLURM_NODEID": "1", "SLURM_STEP_TASKS_PER_NODE": "2(x3"}, 1),
])
def test_the_ranks_a_launcher_announces_on_this_host(monkeypatch, env, ranks):
    for var in ("OMPI_COMM_WORLD_LOCAL_SIZE", "HOROVOD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                "SLURM_NODEID", "SLURM_STEP_TASKS_PER_NODE"):
        monkeypatch.delenv(var, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert hostmem.ranks_on_host() == ranks


def test_the_rule_at_its_edge():
    cfg = config.load(DEMO, ["data.kind=synthetic", "data.image_size=600"])
    rank = hostmem.held_for_backward("resnet8", 16, 2, 600, 3) * 512 * 4
    hostmem.check(cfg, 512, 2, memory=(2 * rank, "RAM, no swap"))
    with pytest.raises(UsageError) as e:
        hostmem.check(cfg, 512, 2, memory=(2 * rank - 1, "RAM, no swap"))
    assert str(e.value).startswith("config key data.image_size=600: a training step on a "
                                   "rank's micro-batch of 512 images of 600 x 600 px keeps "
                                   f"at least {rank / 1e9:,.9f} GB")
    # the figures take as many decimals as it takes to tell the two apart
    assert (f"2 ranks on this host: {2 * rank / 1e9:,.9f} GB), more than the "
            f"{(2 * rank - 1) / 1e9:,.9f} GB this host has (RAM, no swap)") in str(e.value)
    with pytest.raises(UsageError, match=f"at least {rank / 1e9:,.1f} GB .* on this host: "
                                         f"{2 * rank / 1e9:,.1f} GB.* than the 1.0 GB"):
        hostmem.check(cfg, 512, 2, memory=(10 ** 9, "RAM, no swap"))
    fmnist = config.load(DEMO, [])     # Fashion-MNIST: its own 28 x 28, one channel
    one = hostmem.held_for_backward("resnet8", 16, 2, 28, 1)
    with pytest.raises(UsageError, match="config key train.global_batch=4096: .* 512 images "
                                         "of 28 x 28 px"):
        hostmem.check(fmnist, 512, 1, memory=(one * 512 * 4 - 1, "RAM, no swap"))


def _cli(*args, cwd=ROOT, env=None):
    p = subprocess.run([YASGD, *args], capture_output=True, text=True, cwd=cwd, timeout=120,
                       env=env)
    return p.returncode, p.stdout, p.stderr


def _over(ranks):
    """The smallest image size of demo.yaml on synthetic data whose ``ranks`` ranks on this
    host (a micro-batch of 4096 / (ranks x 4) each) would hold more than its memory."""
    have, _ = hostmem.host_memory()
    batch = 4096 // (ranks * 4)
    image = 8
    while ranks * hostmem.held_for_backward("resnet8", 16, 2, image, 3) * batch * 4 <= have:
        image += 1
    if batch * 16 * ((image - 1) // 2 + 1) ** 2 >= (1 << 31) - 1:
        pytest.skip("this host's memory is past MXNet's tensor bound: that rule comes first")
    return image


def test_check_config_train_and_launch_refuse_in_one_line_before_any_work(tmp_path):
    at2 = _over(2)
    over = ["data.kind=synthetic", f"data.image_size={at2}", f"run.dir={tmp_path}/runs"]
    head = ["check-config", DEMO, *over, "--world-size", "2"]
    rc, out, err = _cli(*head)                         # where the ranks run: not said
    assert rc == 0, err
    assert _cli(*head[:-2], f"data.image_size={at2 - 1}", "--world-size", "2",
                "--ranks-on-host", "2")[0] == 0
    rc, out, err = _cli(*head, "--ranks-on-host", "2")
    assert (rc, out) == (2, "") and err.count("\n") == 1, err
    assert err.startswith(f"yasgd: error: config key data.image_size={at2}: a training step "
                          f"on a rank's micro-batch of 512 images of {at2} x {at2} px"), err
    assert "; 2 ranks on this host: " in err
    rc, out, err = _cli("launch", "-np", "2", "--", YASGD, "train", DEMO, *over)
    assert (rc, out) == (2, "") and err.count("\n") == 1, err
    assert "a training step on a rank's micro-batch of 512 images" in err
    at1 = _over(1)                    # one rank, as yasgd train alone runs: 1,024 images
    rc, out, err = _cli("train", DEMO, *over[:1], f"data.image_size={at1}", *over[2:])
    assert (rc, out) == (2, "") and err.count("\n") == 1, err
    assert "micro-batch of 1,024 images" in err and "ranks on this host" not in err
    env = dict(os.environ, OMPI_COMM_WORLD_LOCAL_SIZE="2", OMPI_COMM_WORLD_SIZE="2")
    rc, out, err = _cli("train", DEMO, *over, env=env)     # as a rank under mpirun
    assert rc == 2 and "; 2 ranks on this host: " in err, err
    assert os.listdir(tmp_path) == []


def test_more_ranks_on_the_host_than_in_the_job_is_one_line():
    rc, out, err = _cli("check-config", DEMO, "--world-size", "2", "--ranks-on-host", "3")
    assert (rc, out) == (2, "") and err == (
        "yasgd: error: --ranks-on-host 3 is more than the job's ranks (--world-size 2): a "
        "host runs at most all of them\n")
    assert _cli("check-config", DEMO, "--world-size", "2", "--ranks-on-host", "2")[0] == 0
