"""MXNet's bound on a tensor's size, as the commands check a config against it before any
work (yasgd.config_device): the bound itself on this MXNet, the closed forms of the largest
parameter of yasgd's ResNets and of the largest tensor one image makes in them against
MXNet's own shape inference, and the commands' line."""
import os
import subprocess
import sys

import mxnet as mx
import numpy as np
import pytest

from yasgd import config, config_device, model

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
YASGD = os.path.join(os.path.dirname(sys.executable), "yasgd")
TINY = os.path.join(ROOT, "examples", "configs", "tiny.yaml")
DEMO = os.path.join(ROOT, "examples", "configs", "demo.yaml")
LIMIT = config_device.TENSOR_LIMIT


def test_the_bound_is_mxnets():
    # refused before any memory is taken; one element fewer is made (lazily: empty)
    with pytest.raises(mx.base.MXNetError, match="larger than 2\\^31 elements"):
        mx.nd.empty((LIMIT,))
    assert mx.nd.empty((LIMIT - 1,)).shape == (LIMIT - 1,)
    # an operator's output past it fails too (its element count overflows), without memory
    with pytest.raises(mx.base.MXNetError):
        mx.nd.broadcast_to(mx.nd.zeros((1, 1)), shape=(1 << 16, 1 << 15)).wait_to_read()


def _largest_by_mxnet(name, width, classes, in_channels):
    net = model.build(name, classes=classes, width=width, in_channels=in_channels)
    sym = net(mx.sym.var("data"))
    args, _, aux = sym.infer_shape(data=(1, in_channels, 32, 32))
    sizes = [int(np.prod(s)) for n, s in zip(sym.list_arguments(), args) if n != "data"]
    return max(sizes + [int(np.prod(s)) for s in aux])


@pytest.mark.parametrize("name, width, classes, in_channels", [
    ("resnet8", 4, 10, 1), ("resnet8", 16, 10, 3), ("resnet8", 16, 5000, 1),
    ("resnet20", 8, 100, 3), ("resnet8", 1, 10, 3),          # the stem is the largest
    ("resnet18", 16, 10, 3), ("resnet18", 16, 20000, 3),
    ("resnet34", 64, 1000, 1), ("resnet50", 64, 1000, 3), ("resnet50_v1.5", 8, 10, 1),
])
def test_the_closed_form_is_mxnets_largest_parameter(name, width, classes, in_channels):
    size, what, key = config_device.largest_parameter(name, width, classes, in_channels)
    assert size == _largest_by_mxnet(name, width, classes, in_channels), (name, what)


def _cli(*args, cwd=ROOT):
    p = subprocess.run([YASGD, *args], capture_output=True, text=True, cwd=cwd, timeout=120)
    return p.returncode, p.stdout, p.stderr


@pytest.mark.parametrize("override, words", [
    # 9 x (4 x 3862)^2 = 2,147,766,336 elements; 3861 gives 2,146,654,224
    ("model.width=3862", "config key model.width=3862: the widest 3x3 convolution's weight "
                         "would have 2,147,766,336 elements; MXNet (built without large-tensor "
                         "support) allocates no tensor of 2,147,483,647 or more"),
    ("model.classes=67108864", "config key model.classes=67108864: the classifier's weight "
                               "(67108864 classes x 32 features) would have 2,147,483,648 "
                               "elements"),
])
@pytest.mark.parametrize("command", ["train", "check-config", "jobs render"])
def test_a_parameter_past_the_bound_is_one_line_before_any_work(tmp_path, override, words,
                                                                command):
    head = {"train": ["train", TINY], "check-config": ["check-config", TINY],
            "jobs render": ["jobs", "render", "--scheduler", "pbs", "--nodes", "1", "--config",
                            TINY, "-o", str(tmp_path / "job.sh")]}[command]
    rc, out, err = _cli(*head, override, f"run.dir={tmp_path}/runs")
    assert rc == 2 and out == "" and err.startswith(f"yasgd: error: {words}"), err
    assert err.count("\n") == 1 and os.listdir(tmp_path) == []


def test_the_largest_config_under_the_bound_passes():
    for overrides in (["model.width=3861"], ["model.classes=67108863"],
                      ["model.name=resnet50", "model.classes=1048575"]):
        cfg = config.load(TINY, overrides)
        config_device.check_tensors(cfg)
        assert config_device.largest_parameter(
            cfg.model.name, cfg.model.width, cfg.model.classes, 1)[0] < LIMIT
    cfg = config.load(TINY, ["model.name=resnet50", "model.classes=1048576"])
    with pytest.raises(config.UsageError, match="1048576 classes x 2048 features"):
        config_device.check_tensors(cfg)


def _largest_output_by_mxnet(name, width, stem_stride, image, classes):
    """The largest output of any layer (and the input) for one image, by MXNet's shape
    inference over every node of the network's graph."""
    net = model.build(name, classes=classes, width=width, stem_stride=stem_stride)
    nodes = net(mx.sym.var("data")).get_internals()
    _, shapes, _ = nodes.infer_shape(data=(1, 3, image, image))
    return max(int(np.prod(s)) for n, s in zip(nodes.list_outputs(), shapes)
               if n == "data" or n.endswith("_output"))


@pytest.mark.parametrize("name, width, stem_stride, image, classes", [
    ("resnet50", 64, 1, 224, 1000), ("resnet50_v1.5", 64, 1, 225, 10),
    ("resnet50", 64, 1, 31, 10), ("resnet18", 64, 1, 100, 10), ("resnet34", 64, 1, 7, 10),
    ("resnet101", 64, 1, 1, 10),             # sides of 1: the last stage is the largest
    ("resnet152", 64, 1, 9, 5000),           # the logits are
    ("resnet8", 16, 1, 28, 10), ("resnet8", 16, 2, 33, 10), ("resnet20", 8, 3, 50, 10),
    ("resnet8", 1, 4, 40, 10),               # the input is: 3 x 40 x 40
    ("resnet14", 8, 64, 1, 3),               # a stem of stride 64: stage 3 (32 x 1 x 1) is
])
def test_the_closed_form_is_mxnets_largest_tensor_of_an_image(name, width, stem_stride, image,
                                                              classes):
    size, what = config_device.largest_activation(name, width, stem_stride, image, 3, classes)
    assert size == _largest_output_by_mxnet(name, width, stem_stride, image, classes), what


def _demo(*more):
    return ["check-config", DEMO, "data.kind=synthetic", *more]


def test_a_step_past_the_bound_is_one_line_before_any_work(tmp_path):
    # demo.yaml: resnet8 of width 16, a stem of stride 2; a rank's micro-batch is
    # 4096 / (ranks x 4). At 1 rank: 1,024 x 16 x s x s with s = (S - 1) // 2 + 1, which
    # first reaches the bound at s = 363, S = 725
    assert 1024 * 16 * 362 ** 2 < LIMIT <= 1024 * 16 * 363 ** 2
    rc, out, err = _cli(*_demo("data.image_size=724"))
    assert rc == 0, err
    rc, out, err = _cli(*_demo("data.image_size=725"))
    assert (rc, out) == (2, "") and err == (
        "yasgd: error: config key data.image_size=725: on a rank's micro-batch of 1,024 images "
        "(1 rank), the stem's output (16 x 363 x 363) would have 2,158,903,296 elements; "
        "MXNet (built without large-tensor support) allocates no tensor of 2,147,483,647 or "
        "more (lower data.image_size, or the micro-batch: train.global_batch, "
        "train.accumulate)\n")
    rc, out, err = _cli(*_demo("data.image_size=725", "--world-size", "2"))   # 512 a rank
    assert rc == 0, err
    # train (at the launcher's world size, here 1) and jobs render (2 nodes x 4 GPUs: 128 a
    # rank) on one image size: refused at 1 rank, rendered at 8
    over = ["data.kind=synthetic", "data.image_size=725", "data.synthetic_samples=8192",
            f"run.dir={tmp_path}/runs"]
    rc, out, err = _cli("train", DEMO, *over)
    assert rc == 2 and err.startswith("yasgd: error: config key data.image_size=725: on a "
                                      "rank's micro-batch of 1,024 images"), err
    assert err.count("\n") == 1 and os.listdir(tmp_path) == []
    rc, out, err = _cli("jobs", "render", "--scheduler", "pbs", "--nodes", "2", "--config",
                        DEMO, "-o", str(tmp_path / "job.sh"), *over[:3])
    assert rc == 0 and os.listdir(tmp_path) == ["job.sh"], err
    # Fashion-MNIST's images keep their 28 x 28 (yasgd.data.fit): no step rule here
    config_device.check_tensors(config.load(DEMO, ["data.image_size=100000"]))
