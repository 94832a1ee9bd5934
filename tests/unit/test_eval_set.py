"""``data.eval_set=holdout``: evaluation reads the Fashion-MNIST training images after the
first ``data.limit`` (a validation split never trained on); refused, one line, where there
is no such split."""
import numpy as np
import pytest

from yasgd import UsageError, config as config_mod
from yasgd.data import fashion_mnist


def test_holdout_is_the_training_images_after_the_limit():
    cfg = config_mod.load(None, ["data.kind=fashion_mnist", "data.limit=50000",
                                 "data.eval_set=holdout"])
    train, val = fashion_mnist.build(cfg.data, rank=0, size=1, batch_size=500, ctx=None,
                                     seed=0, num_classes=10)
    xtr, ytr = fashion_mnist.load(cfg.data.root, "train")
    assert len(train.images) == 50000 and len(val.images) == 10000
    np.testing.assert_array_equal(val.images, xtr[50000:])
    np.testing.assert_array_equal(val.labels, ytr[50000:].astype(val.labels.dtype))
    test_cfg = config_mod.load(None, ["data.kind=fashion_mnist", "data.limit=50000"])
    _, test = fashion_mnist.build(test_cfg.data, 0, 1, 500, None, 0, 10)
    xte, _ = fashion_mnist.load(cfg.data.root, "test")
    np.testing.assert_array_equal(test.images, xte)


@pytest.mark.parametrize("overrides,message", [
    (["data.eval_set=holdout"], "data.eval_set=holdout needs data.kind=fashion_mnist and "
                                "data.limit > 0"),
    (["data.eval_set=holdout", "data.kind=recordio", "data.limit=10"], "data.eval_set=holdout"),
    (["data.eval_set=val"], "data.eval_set"),
])
def test_holdout_without_a_split_is_refused(overrides, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(".", r"\.")):
        config_mod.load(None, overrides)


def test_a_limit_that_leaves_nothing_out_is_refused():
    cfg = config_mod.load(None, ["data.limit=60000", "data.eval_set=holdout"])
    with pytest.raises(UsageError, match="leaves none of the 60,000 training images out"):
        fashion_mnist.build(cfg.data, 0, 1, 500, None, 0, 10)


def test_eval_limit_takes_the_first_images_of_either_set():
    cfg = config_mod.load(None, ["data.limit=50000", "data.eval_set=holdout",
                                 "data.eval_limit=300"])
    _, val = fashion_mnist.build(cfg.data, 0, 1, 500, None, 0, 10)
    xtr, _ = fashion_mnist.load(cfg.data.root, "train")
    np.testing.assert_array_equal(val.images, xtr[50000:50300])
    cfg = config_mod.load(None, ["data.eval_limit=300"])
    _, test = fashion_mnist.build(cfg.data, 0, 1, 500, None, 0, 10)
    np.testing.assert_array_equal(test.images, fashion_mnist.load(cfg.data.root, "test")[0][:300])
    with pytest.raises(UsageError, match="data.eval_limit needs data.kind=fashion_mnist"):
        config_mod.load(None, ["data.kind=synthetic", "data.eval_limit=5"])
