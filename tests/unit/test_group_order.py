"""The trainer's static allreduce groups follow backward, checked against an independent order.

Reference: the order in which the layers' forward calls happen, recorded with Gluon forward
hooks on every layer that owns parameters (the network run imperatively). Backward writes
gradients in the reverse of that order, so the groups, read one after another, must be that
reversed list: every group a contiguous run of layers in backward order, the first group
holding the classifier. The name-sorted list that ``gluon.Trainer`` keeps fails this check
(the test shows it does, so the check can fail).
"""
import mxnet as mx
import pytest

from yasgd import allreduce, config, model


def _forward_call_order(net, x):
    """Trainable parameters in the order of their layers' forward calls (hooks on every block
    that owns parameters; a block's own parameters in its registration order)."""
    order, hooks = [], []

    def visit(block):
        own = [p for p in block._reg_params.values() if p.grad_req != "null"]
        if own:
            hooks.append(block.register_forward_hook(
                lambda blk, inp, out, own=own: order.extend(own)))
        for child in block._children.values():
            visit(child)

    visit(net)
    net(x)
    for h in hooks:
        h.detach()
    return order


def _layer_runs(groups, backward):
    """Check that ``groups`` concatenated are exactly ``backward`` (each parameter once, in
    order): so each group is a contiguous run of it. Returns the group boundaries."""
    flat = [p.name for g in groups for p in g]
    assert flat == [p.name for p in backward], "groups are not contiguous runs in backward order"
    return [(g[0].name, g[-1].name) for g in groups]


def _demo_net():
    cfg = config.load("examples/configs/demo.yaml")
    return model.from_config(cfg.model, in_channels=1), mx.nd.ones((2, 1, 28, 28))


def _resnet50():
    return model.build("resnet50_v1.5"), mx.nd.ones((1, 3, 64, 64))


@pytest.mark.parametrize("make", [_resnet50, _demo_net], ids=["resnet50_v1.5", "demo"])
@pytest.mark.parametrize("budget,num_groups", [(4 << 20, 0), (1 << 20, 0), (16 << 10, 0),
                                               (4 << 20, 8)])
def test_trainer_groups_follow_backward(make, budget, num_groups):
    net, x = make()
    net.initialize(model.default_initializer())
    backward = list(reversed(_forward_call_order(net, x)))
    tr = allreduce.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1},
                                      group_budget_bytes=budget, num_groups=num_groups)
    total = sum(p.data().size * 4 for p in backward)
    assert len(tr.groups) > 1 or (num_groups == 0 and total <= budget)
    _layer_runs(tr.groups, backward)
    classifier = [p.name for p in net.output.collect_params().values()]
    assert set(classifier) <= {p.name for p in tr.groups[0]}, "the first group holds the classifier"
    # the same groups from the trainable list that yasgd.model hands the benchmarks
    assert [[p.name for p in g] for g in allreduce.group_params(
        model.trainable_params(net), budget, num_groups)] == [[p.name for p in g] for g in tr.groups]


def test_name_sorted_order_fails_the_check():
    """The order gluon.Trainer keeps (sorted by name) is not backward order: grouping it
    breaks contiguity, which the check above detects."""
    net, x = _resnet50()
    net.initialize(model.default_initializer())
    backward = list(reversed(_forward_call_order(net, x)))
    tr = allreduce.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    by_name = allreduce.group_params(tr._params)
    with pytest.raises(AssertionError, match="not contiguous"):
        _layer_runs(by_name, backward)
