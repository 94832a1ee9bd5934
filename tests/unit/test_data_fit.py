"""A config against the dataset on this host (yasgd.data.fit), checked before any work: a
label the model has no output for, a Fashion-MNIST image size or crop pad its images cannot
give, and a training set too small for one step, are refused in one line by yasgd train and
by yasgd check-config --data, on IDX files written here and on a RecordIO folder."""
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

from yasgd import UsageError, config
from yasgd.data import fit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = os.path.join(ROOT, "examples", "configs", "tiny.yaml")


def _idx(path, array):
    """An IDX file of unsigned bytes (the format of Fashion-MNIST's files)."""
    with open(path, "wb") as f:
        f.write(struct.pack(">I", 0x0800 | array.ndim) + struct.pack(">" + "I" * array.ndim,
                                                                     *array.shape))
        f.write(array.astype(np.uint8).tobytes())


@pytest.fixture
def fashion(tmp_path):
    """A Fashion-MNIST-layout folder: 64 training images labelled 0..3, 32 test images
    labelled 0..4 (the test split needs one class more)."""
    rng = np.random.RandomState(0)
    for prefix, n, top in (("train", 64, 3), ("t10k", 32, 4)):
        y = np.arange(n) % (top + 1)
        _idx(tmp_path / f"{prefix}-labels-idx1-ubyte", rng.permutation(y))
        _idx(tmp_path / f"{prefix}-images-idx3-ubyte", rng.randint(0, 256, (n, 28, 28)))
    return tmp_path


def _cfg(root, classes, *more):
    return config.load(TINY, [f"data.root={root}", f"model.classes={classes}", "data.limit=0",
                              "data.eval_limit=0", "train.global_batch=16", *more])


def test_the_training_loss_takes_a_label_past_its_outputs_without_a_word():
    """The rule's premise: yasgd's loss (MXNet's pick, which clips the index) scores a
    label of 9 on 5 outputs as class 4, with no error, so only a check before the run
    stops it. Closed form: no smoothing, uniform logits give log(5) for any label
    (relative 1e-5: float32)."""
    import mxnet as mx
    from yasgd.loss import LabelSmoothingCE
    pred = mx.nd.array(np.random.RandomState(0).randn(3, 5))
    loss = LabelSmoothingCE(epsilon=0.0)
    np.testing.assert_allclose(loss(pred, mx.nd.array([9, 4, 7])).asnumpy()[[0, 2]],
                               loss(pred, mx.nd.array([4, 4, 4])).asnumpy()[[0, 2]], rtol=1e-6)
    np.testing.assert_allclose(loss(mx.nd.zeros((1, 5)), mx.nd.array([9])).asnumpy(),
                               [np.log(5.0)], rtol=1e-5)   # float32


def test_labels_past_model_classes_are_refused_naming_the_file(fashion):
    for classes in (1, 4):           # the test split's label 4 has no output below 5
        with pytest.raises(UsageError) as e:
            fit.check(_cfg(fashion, classes))
        assert str(e.value) == (f"config key model.classes={classes} is too few for the labels "
                                f"of {fashion}/t10k-labels-idx1-ubyte: they run to 4 (5 classes); "
                                f"set model.classes=5 or more")
    for classes in (5, 6, 1000):     # the boundary, and more outputs than labels: allowed
        fit.check(_cfg(fashion, classes))
    # the file with the largest label is named: its number is enough for both
    _idx(fashion / "train-labels-idx1-ubyte", np.array([0, 7, 1]))
    with pytest.raises(UsageError, match=r"train-labels-idx1-ubyte: they run to 7 \(8 classes\)"):
        fit.check(_cfg(fashion, 5))


def test_only_the_files_that_are_there_are_read(fashion):
    os.remove(fashion / "t10k-labels-idx1-ubyte")   # the data check names it, not this one
    fit.check(_cfg(fashion, 4))
    _idx(fashion / "t10k-labels-idx1-ubyte", np.zeros(0))   # no label at all: nothing to fit,
    with pytest.raises(UsageError, match="test has 32 images but 0 labels"):    # but the
        fit.check(_cfg(fashion, 4))                             # loader would refuse them
    with pytest.raises(UsageError, match="dataset directory not found"):
        from yasgd import data
        cfg = _cfg(fashion / "gone", 4)
        fit.check(cfg)
        data.check_data(cfg)
    fit.check(_cfg(fashion, 1, "data.kind=synthetic"))   # its labels come from the config


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "yasgd.cli", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)


@pytest.mark.parametrize("more,message", [
    (["model.classes=4"], "config key model.classes=4 is too few for the labels of "
                          "{root}/t10k-labels-idx1-ubyte: they run to 4 (5 classes); set "
                          "model.classes=5 or more"),
    (["data.limit=10"], "config key data.limit=10 keeps 10 training images, fewer than one step "
                        "of train.global_batch=16: an epoch would have no step (raise "
                        "data.limit, or lower train.global_batch)"),
    (["data.image_size=32"], "config key data.image_size=32: the images of "
                             "{root}/train-images-idx3-ubyte are 28 x 28 and train at that size "
                             "(the Fashion-MNIST loader crops from a padded copy, it does not "
                             "resize); set data.image_size=28"),
    (["data.pad_crop=28"], "config key data.pad_crop=28: the images of "
                           "{root}/train-images-idx3-ubyte are 28 x 28, and a pad of their side "
                           "or more lets a random crop hold no pixel of the image; use 0 to 27")])
def test_train_and_check_config_refuse_in_one_line_and_make_nothing(fashion, tmp_path, more,
                                                                    message):
    over = [f"data.root={fashion}", "data.limit=0", "data.eval_limit=0", "train.global_batch=16",
            f"run.dir={tmp_path}/runs", *more]
    line = f"yasgd: error: {message.format(root=fashion)}\n"
    for args in (["train", TINY, *over], ["check-config", TINY, *over, "--data"]):
        p = _cli(*args)
        assert (p.returncode, p.stdout, p.stderr) == (2, "", line), args
    assert not os.path.exists(tmp_path / "runs")
    p = _cli("check-config", TINY, *over)              # the data are checked only when asked
    assert p.returncode == 0, p.stderr


def _header_cut(root):
    (root / "train-images-idx3-ubyte").write_bytes(struct.pack(">I", 0x0803) + b"\0" * 6)
    return f"{root}/train-images-idx3-ubyte is truncated: its header ends before its dimensions"


def _labels_more(root):
    _idx(root / "t10k-labels-idx1-ubyte", np.arange(40) % 5)
    return f"{root}: test has 32 images but 40 labels"


@pytest.mark.parametrize("damage", [_header_cut, _labels_more], ids=["header-cut", "labels"])
def test_files_the_loader_would_refuse_are_refused_before_any_work(fashion, tmp_path, damage):
    """What the loader refuses only once the run's folder is made (or, a header cut short,
    with a traceback) is one line first, from train and from check-config --data."""
    line = f"yasgd: error: {damage(fashion)}\n"
    over = [f"data.root={fashion}", "data.limit=0", "data.eval_limit=0", "train.global_batch=16",
            f"run.dir={tmp_path}/runs"]
    for args in (["train", TINY, *over], ["check-config", TINY, *over, "--data"]):
        p = _cli(*args)
        assert (p.returncode, p.stdout, p.stderr) == (2, "", line), args
    assert not os.path.exists(tmp_path / "runs")


def _crops(pad, epochs=10):
    """The training crops the Fashion-MNIST loader gives from 64 white 28 x 28 images
    zero-padded by ``pad``, as a (crops, 28, 28) array of 0 (padding) and 1 (image)."""
    import mxnet as mx
    from yasgd.data.fashion_mnist import MEAN, STD, ArrayLoader
    loader = ArrayLoader(np.full((64, 28, 28), 255, np.uint8), np.zeros(64, np.int64), 16,
                         mx.cpu(), 0, 1, seed=0, train=True, pad=pad, flip=False)
    got = []
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        got += [x.asnumpy()[:, 0] for x, _ in loader]
    return np.round(np.concatenate(got) * STD + MEAN).astype(int)


def test_the_loader_keeps_the_images_size_and_a_pad_of_their_side_gives_empty_crops():
    """The rules' premises, on the loader itself: its crops are the images' 28 x 28 whatever
    data.image_size says (the loader is never given it); with a pad p every crop's offset is
    in 0..2p on each axis, so it holds a pixel of the image exactly when p < 28 (closed form),
    and at p = 28 an offset of 0 or 56 on either axis, 1 - (55/57)^2 of the crops, is all
    padding (640 crops: some are)."""
    for pad in (0, 2, 27):
        crops = _crops(pad)
        assert crops.shape == (640, 28, 28) and crops.reshape(640, -1).max(axis=1).min() == 1
    empty = _crops(28).reshape(640, -1).max(axis=1) == 0
    assert 0 < empty.sum() < 640


def test_fashion_mnist_images_fix_the_image_size_and_bound_the_pad(fashion):
    fit.check(_cfg(fashion, 5, "data.image_size=28", "data.pad_crop=27"))
    for more, words in ((["data.image_size=27"], "data.image_size=27: the images of"),
                        (["data.image_size=224"], "are 28 x 28 and train at that size"),
                        (["data.pad_crop=28"], "pad of their side or more"),
                        (["data.pad_crop=100000"], "use 0 to 27")):
        with pytest.raises(UsageError, match=words):
            fit.check(_cfg(fashion, 5, *more))
    # images that are not square: no one data.image_size names them; the pad is bounded by
    # the shorter side
    _idx(fashion / "train-images-idx3-ubyte", np.zeros((64, 20, 30)))
    fit.check(_cfg(fashion, 5, "data.image_size=28", "data.pad_crop=19"))
    with pytest.raises(UsageError, match=r"are 20 x 30, and a pad .* use 0 to 19$"):
        fit.check(_cfg(fashion, 5, "data.pad_crop=20"))
    # not images, or not there: the loader and the data check name the file
    _idx(fashion / "train-images-idx3-ubyte", np.zeros(64))
    fit.check(_cfg(fashion, 5, "data.image_size=32"))
    os.remove(fashion / "train-images-idx3-ubyte")
    fit.check(_cfg(fashion, 5, "data.pad_crop=28"))
    fit.check(_cfg(fashion, 5, "data.kind=synthetic", "data.image_size=32"))


def test_a_recordio_class_index_of_another_size_is_refused(tmp_path):
    root = tmp_path / "rec"
    root.mkdir()
    (root / "classes.txt").write_text("".join(f"{i}\tn{i:08d}\n" for i in range(10)))
    over = ["data.kind=recordio", "data.image_size=32", "data.val_resize=40"]
    with pytest.raises(UsageError, match=r"classes\.txt lists 10 classes but model\.classes is 12"):
        fit.check(_cfg(root, 12, *over))
    fit.check(_cfg(root, 10, *over))
    fit.check(_cfg(tmp_path / "none", 12, *over))   # no class index: the data check's


def test_a_training_set_too_small_for_one_step_is_refused(fashion):
    # 64 training images: 64 // train.global_batch steps an epoch
    for batch, more in ((64, ()), (32, ("train.accumulate=2", "train.batch_per_rank=16")),
                        (16, ("data.limit=16",)), (64, ("data.limit=100",))):
        fit.check(_cfg(fashion, 5, f"train.global_batch={batch}", *more))   # a step or more
    with pytest.raises(UsageError) as e:
        fit.check(_cfg(fashion, 5, "data.limit=10"))
    assert str(e.value) == ("config key data.limit=10 keeps 10 training images, fewer than one "
                            "step of train.global_batch=16: an epoch would have no step (raise "
                            "data.limit, or lower train.global_batch)")
    for more in ((), ("data.limit=100",)):      # a limit past the set reads the whole set
        with pytest.raises(UsageError) as e:
            fit.check(_cfg(fashion, 5, "train.global_batch=128", *more))
        assert str(e.value) == (f"the training set in {fashion} holds 64 images, fewer than one "
                                f"step of train.global_batch=128: an epoch would have no step "
                                f"(lower train.global_batch)")


@pytest.mark.parametrize("ranks,batch,accumulate", [(1, 16, 1), (3, 5, 1), (2, 4, 3), (4, 1, 7)])
def test_one_step_is_what_the_sampler_gives(fashion, ranks, batch, accumulate):
    """The rule (n // train.global_batch steps an epoch) against the loaders' sampler: each
    rank's full micro-batches (EpochSampler.batches) over train.accumulate, for every n of
    the fixture's 64 images (data.limit=n)."""
    from yasgd.data.sampler import EpochSampler
    whole = ranks * batch * accumulate
    for n in range(1, 65):
        steps = EpochSampler(n, 0, ranks, batch, seed=0).batches // accumulate
        cfg = _cfg(fashion, 5, f"data.limit={n}", f"train.global_batch={whole}",
                   f"train.accumulate={accumulate}")
        try:
            fit.check(cfg)
        except UsageError:
            assert steps == 0, (n, steps)
        else:
            assert steps >= 1, (n, steps)
