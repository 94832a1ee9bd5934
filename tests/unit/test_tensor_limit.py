"""MXNet's bound on a tensor's size, as the commands check a config against it before any
work (yasgd.config_device): the bound itself on this MXNet, the closed form of the largest
parameter of yasgd's ResNets against MXNet's own shape inference, and the commands' line."""
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
LIMIT = config_device.TENSOR_LIMIT


def test_the_bound_is_mxnets():
    # refused before any memory is taken; one element fewer is made (lazily: empty)
    with pytest.raises(mx.base.MXNetError, match="larger than 2\\^31 elements"):
        mx.nd.empty((LIMIT,))
    assert mx.nd.empty((LIMIT - 1,)).shape == (LIMIT - 1,)


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
