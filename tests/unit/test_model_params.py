"""Model shapes, the structure rule for LARS/WD, and the static allreduce groups."""
import mxnet as mx
import numpy as np
import pytest

from yasgd import allreduce, model, params


def test_resnet50_v15_parameter_count():
    net = model.build("resnet50_v1.5", classes=1000)
    assert model.count_parameters(net) == 25_557_032       # torchvision/GluonCV ResNet-50
    lars, plain = params.split_by_structure(net.collect_params().values())
    assert len(lars) == 54 and len(plain) == 107            # 53 conv + 1 dense; 53 BN x 2 + 1 bias
    assert all(p.shape[0] > 0 and len(p.shape) >= 2 for p in lars)


def test_small_resnet_forward_and_zero_gamma():
    net = model.build("resnet20", classes=10, width=16, in_channels=1, zero_init_last_gamma=True)
    net.initialize(model.default_initializer())
    out = net(mx.nd.ones((2, 1, 28, 28)))
    assert out.shape == (2, 10)
    # last BN of every residual block starts at gamma = 0 (the block is the identity)
    zero = [p for n, p in net.collect_params().items() if n.endswith("gamma")
            and float(np.abs(p.data().asnumpy()).sum()) == 0.0]
    assert len(zero) == 9                                   # 3 stages x 3 blocks


def test_bn_momentum_rule():
    assert model.bn_momentum_for(16) == pytest.approx(1 - 1 / 16)
    assert model.bn_momentum_for(1) == 0.5                   # clipped
    assert model.bn_momentum_for(10 ** 6) == 0.999


def test_unknown_model():
    from yasgd import UsageError
    with pytest.raises(UsageError, match="unknown model.name"):
        model.build("vgg16")


def test_groups_cover_every_parameter_once_in_backward_order():
    net = model.build("resnet50_v1.5")
    plist = [p for p in net.collect_params().values() if p.grad_req != "null"]
    budget = 4 << 20
    groups = allreduce.group_params(net.collect_params(), budget)
    flat = [p for g in groups for p in g]
    assert [id(p) for p in flat] == [id(p) for p in reversed(plist)]   # backward order, once each
    for g in groups:
        nbytes = sum(int(np.prod(p.shape)) * 4 for p in g)
        assert nbytes <= budget or len(g) == 1                         # within budget or a lone giant
    # maximal packing: adding the next group's first tensor would overflow
    for g, nxt in zip(groups, groups[1:]):
        assert sum(int(np.prod(p.shape)) * 4 for p in g) + int(np.prod(nxt[0].shape)) * 4 > budget


def test_num_groups_split_is_balanced():
    net = model.build("resnet50_v1.5")
    groups = allreduce.group_params(net.collect_params(), num_groups=8)
    assert len(groups) == 8
    sizes = [sum(int(np.prod(p.shape)) for p in g) for g in groups]
    assert sum(sizes) == 25_557_032
    assert max(sizes) < 2.5 * (25_557_032 / 8)   # a single 2.36M-float tensor limits balance
