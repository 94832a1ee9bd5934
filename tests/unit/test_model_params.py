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

    def layer(p):
        return p.name.rsplit("_", 1)[0]

    def nbytes(ps):
        return sum(int(np.prod(p.shape)) * 4 for p in ps)
    for g in groups:
        assert nbytes(g) <= budget or len({layer(p) for p in g}) == 1  # within budget or a lone giant
    # a layer's tensors travel together; maximal packing: the next group's first layer overflows
    for g, nxt in zip(groups, groups[1:]):
        assert layer(g[-1]) != layer(nxt[0])
        assert nbytes(g) + nbytes([p for p in nxt if layer(p) == layer(nxt[0])]) > budget


def test_num_groups_split_is_balanced():
    net = model.build("resnet50_v1.5")
    groups = allreduce.group_params(net.collect_params(), num_groups=8)
    assert len(groups) == 8
    sizes = [sum(int(np.prod(p.shape)) for p in g) for g in groups]
    assert sum(sizes) == 25_557_032
    assert max(sizes) < 2.5 * (25_557_032 / 8)   # a single 2.36M-float tensor limits balance


def _reference_group_params(params, budget_bytes=4 << 20, num_groups=0):
    """An independent copy of yasgd.allreduce.group_params's rule: trainable parameters in
    backward order, merged into layers (consecutive parameters whose names share the block
    prefix before the last '_'), the layers split greedily by budget or into num_groups
    groups of nearly equal bytes."""
    def nbytes(p):
        return int(np.prod(p.shape)) * np.dtype(p.dtype).itemsize
    plist = list(params.values()) if hasattr(params, "values") else list(params)
    backward = [p for p in reversed(plist) if p.grad_req != "null"]
    if not backward:
        return []
    layers = []
    for p in backward:
        if layers and layers[-1][0].name.rsplit("_", 1)[0] == p.name.rsplit("_", 1)[0]:
            layers[-1].append(p)
        else:
            layers.append([p])
    if num_groups > 0:
        sizes = np.array([sum(nbytes(p) for p in lay) for lay in layers], dtype=np.float64)
        bounds = np.cumsum(sizes) / sizes.sum() * num_groups
        groups = [[] for _ in range(num_groups)]
        for lay, b in zip(layers, bounds):
            groups[min(num_groups - 1, int(np.ceil(b - 1e-9)) - 1)].extend(lay)
        return [g for g in groups if g]
    if budget_bytes <= 0:
        raise ValueError(f"group budget must be positive, got {budget_bytes}")
    groups, cur, cur_bytes = [], [], 0
    for lay in layers:
        n = sum(nbytes(p) for p in lay)
        if cur and cur_bytes + n > budget_bytes:
            groups.append(cur)
            cur, cur_bytes = [], 0
        cur.extend(lay)
        cur_bytes += n
    groups.append(cur)
    return groups


class _P:
    def __init__(self, shape, dtype="float32", grad_req="write", name="layer0_weight"):
        self.shape, self.dtype, self.grad_req, self.name = shape, dtype, grad_req, name


def test_group_params_uses_the_one_grouping_rule():
    from yasgd import grouping
    assert allreduce.DEFAULT_BUDGET_BYTES is grouping.DEFAULT_BUDGET_BYTES
    from yasgd.config import CommCfg
    assert CommCfg().group_budget_bytes == grouping.DEFAULT_BUDGET_BYTES
    net = model.build("resnet50_v1.5")
    cases = [(net.collect_params(), b, ng) for b in (1, 1 << 20, 4 << 20, 64 << 20, 1 << 40)
             for ng in (0, 1, 3, 8, 161, 500)]
    rng = np.random.default_rng(7)
    for _ in range(40):   # mixed dtypes, frozen parameters, budgets around the tensor sizes
        ps = [_P((int(rng.integers(1, 5000)),), str(rng.choice(["float16", "float32"])),
                 str(rng.choice(["write", "write", "null"])),
                 f"layer{i // int(rng.integers(1, 4))}_{rng.choice(['weight', 'bias'])}")
              for i in range(int(rng.integers(1, 40)))]
        cases.append((ps, int(rng.integers(1, 30000)), int(rng.choice([0, 0, 1, 2, 5]))))
    for ps, budget, ng in cases:
        got = allreduce.group_params(ps, budget_bytes=budget, num_groups=ng)
        want = _reference_group_params(ps, budget_bytes=budget, num_groups=ng)
        assert [[id(p) for p in g] for g in got] == [[id(p) for p in g] for g in want]
    assert allreduce.group_params([_P((4,), grad_req="null")], budget_bytes=0) == []
    with pytest.raises(ValueError, match="budget must be positive"):
        allreduce.group_params([_P((4,))], budget_bytes=0)


def test_resnet50_tensors_are_the_trainable_ones_split_by_structure():
    net, plist = model.resnet50_tensors(seed=0)
    assert plist == model.trainable_params(net)
    assert [id(p) for p in plist] == [id(p) for p in net.collect_params().values()
                                      if p.grad_req != "null"]
    assert len(plist) == 161 and sum(int(np.prod(p.shape)) for p in plist) == 25_557_032
    lars, plain = params.split_by_structure(plist)
    assert (len(lars), len(plain)) == (54, 107)
    assert all(p.data().context == mx.cpu() for p in plist)


@pytest.mark.parametrize("exclude_1d,lars_1d,wd_1d", [("lars_and_wd", False, False),
                                                      ("wd", True, False), ("none", True, True)])
def test_exclude_1d_decides_for_1d_tensors_only(exclude_1d, lars_1d, wd_1d):
    """ResNet-50's tensors: every conv/dense weight gets LARS and WD whatever the choice; the
    BN gamma/beta and biases get what ``optim.exclude_1d`` leaves them."""
    net = model.build("resnet50_v1.5", classes=1000)
    shapes = [tuple(p.shape) for p in net.collect_params().values() if p.grad_req != "null"]
    assert {len(s) for s in shapes} == {1, 2, 4}
    for s in shapes:
        assert params.gets_lars(s, exclude_1d) == (len(s) >= 2 or lars_1d), s
        assert params.gets_wd(s, exclude_1d) == (len(s) >= 2 or wd_1d), s
