"""The ResNet-50 tensor list of the optimizer benchmark: yasgd.model's trainable tensors,
told apart by structure, so that MXNet's name-based LARS splits them as yasgd's LARS does."""
import mxnet as mx
import numpy as np

from yasgd import params


def test_optimizer_bench_tensors_are_named_by_structure():
    from yasgd.bench import optimizer
    names, ws, gs = optimizer._tensors()
    assert len(names) == len(ws) == len(gs) == 161
    assert sum(w.size for w in ws) == 25_557_032
    assert [n.endswith("_weight") for n in names] == [params.is_lars_param(w.shape) for w in ws]
    assert sum(n.endswith("_weight") for n in names) == 54
    opt = mx.optimizer.LARS(learning_rate=0.1, wd=1e-4, param_idx2name=dict(enumerate(names)))
    for i, w in enumerate(ws):   # MXNet's rule by name = yasgd's rule by shape
        assert (opt.wd_mult.get(names[i], 1.0) == 0.0) == (w.ndim <= 1)
        skipped = opt._get_lars(i, mx.nd.array(w), mx.nd.array(gs[i]), 1.0, 0.0) == 1.0
        assert skipped == (not params.is_lars_param(w.shape))
    assert all(np.isfinite(g).all() for g in gs)
