"""ImageNet RecordIO pipeline on real JPEGs made at test time (Fashion-MNIST rendered to RGB).

im2rec round trip (read back with MXNet's own reader), verify, the loaders'
transforms and sharding, the final-polishing switch, and every error case
(truncated .rec, missing .idx, corrupted record, class layout / class index
mismatch) both in-process and through the CLI (file + record named; exit status 1
for damaged records, 2 for files that cannot be checked). More cases of
``data im2rec`` / ``data verify`` are in test_data_tools.py.
"""
import os
import shutil
import subprocess
import sys
from dataclasses import replace

import cv2
import mxnet as mx
import numpy as np
import pytest

from yasgd import UsageError
from yasgd.config import DataCfg
from yasgd.data import im2rec, recordio, synthetic
from yasgd.data.recordio import RecordFile, RecordIOError, RecordTrainLoader, RecordValLoader
from yasgd.data.testdata import make_imagenet_folder, wnid

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PER_TRAIN, PER_VAL, RESIZE = 8, 3, 48


def cli(*args):
    env = dict(os.environ, PYTHONPATH=REPO, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "yasgd.cli", *args], capture_output=True,
                          text=True, env=env, timeout=120)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    base = tmp_path_factory.mktemp("imagenet")
    src = make_imagenet_folder(str(base / "src"), PER_TRAIN, PER_VAL,
                               exts=(".JPEG", ".jpg", ".png", ".jpeg"))
    rec = str(base / "rec")
    summary = im2rec.convert(src, rec, resize=RESIZE, quality=90, workers=2, verify=True,
                             progress=False)
    return src, rec, summary


def cfg_for(rec, **kw):
    base = dict(kind="recordio", root=rec, image_size=32, val_resize=40, threads=2)
    base.update(kw)
    return DataCfg(**base)


def copy_rec(rec, tmp_path):
    dst = str(tmp_path / "rec")
    shutil.copytree(rec, dst)
    return dst


# -- im2rec ---------------------------------------------------------------------------
def test_im2rec_round_trip_with_mxnet_reader(data):
    src, rec, summary = data
    assert summary["train"]["records"] == 10 * PER_TRAIN and summary["train"]["verified"] == 80
    assert summary["val"]["records"] == 10 * PER_VAL and summary["val"]["verified"] == 30
    with open(os.path.join(rec, "classes.txt")) as f:
        assert [ln.split("\t")[1].strip() for ln in f] == [wnid(i) for i in range(10)]
    classes, items = im2rec.list_images(src)
    order = np.random.RandomState(im2rec.TRAIN_SHUFFLE_SEED).permutation(len(items["train"]))
    expected = {"train": [items["train"][i] for i in order], "val": items["val"]}
    for split in ("train", "val"):
        r = mx.recordio.MXIndexedRecordIO(os.path.join(rec, split + ".idx"),
                                          os.path.join(rec, split + ".rec"), "r")
        assert sorted(r.keys) == list(range(len(expected[split])))
        for i, (path, label) in enumerate(expected[split]):
            header, payload = mx.recordio.unpack(r.read_idx(i))
            assert (header.label, header.id) == (label, i)
            assert payload[:2] == b"\xff\xd8"  # JPEG, also for the .png sources
            img = cv2.imdecode(np.frombuffer(payload, np.uint8), cv2.IMREAD_COLOR)
            assert min(img.shape[:2]) == RESIZE
            ref = cv2.imdecode(np.fromfile(path, np.uint8), cv2.IMREAD_COLOR)
            ref = cv2.resize(ref, img.shape[1::-1], interpolation=cv2.INTER_AREA)
            assert np.abs(ref.astype(int) - img).mean() < 8, path  # same picture, JPEG-lossy
        r.close()
    assert cli("data", "verify", os.path.join(rec, "train")).stdout.strip().endswith("80 records ok")


def test_im2rec_resize_0_passes_jpeg_bytes_through(data, tmp_path):
    src, _, _ = data
    rec = str(tmp_path / "rec0")
    im2rec.convert(src, rec, resize=0, workers=1, progress=False)
    rf = RecordFile(os.path.join(rec, "val"))
    for i, (path, _) in enumerate(im2rec.list_images(src)[1]["val"]):
        payload = rf.read(i)[2]
        raw = open(path, "rb").read()
        if path.lower().endswith(".png"):
            assert payload[:2] == b"\xff\xd8"
        else:
            assert payload == raw


def test_multipart_records_are_joined(tmp_path):
    """dmlc's writer splits a payload at an aligned RecordIO magic; the reader must rejoin it."""
    m = recordio._MAGIC_BYTES
    payloads = [b"abcd" + m + b"xyz", m + m + b"12345678" + m, b"q" * 13, m]
    w = mx.recordio.MXIndexedRecordIO(str(tmp_path / "mp.idx"), str(tmp_path / "mp.rec"), "w")
    for i, p in enumerate(payloads):
        w.write_idx(i, mx.recordio.pack(mx.recordio.IRHeader(0, float(i), i, 0), p))
    w.close()
    rf = RecordFile(str(tmp_path / "mp"))
    assert [rf.read(i) for i in range(4)] == [(float(i), i, p) for i, p in enumerate(payloads)]
    assert [rf.unindexed_after(i) for i in range(4)] == [0] * 4    # the parts tile the file


def test_im2rec_layout_errors(data, tmp_path):
    src, _, _ = data
    with pytest.raises(UsageError, match="does not exist"):
        im2rec.convert(str(tmp_path / "nowhere"), str(tmp_path / "o"), progress=False)
    bad = str(tmp_path / "bad")
    shutil.copytree(src, bad)
    shutil.rmtree(os.path.join(bad, "val", wnid(3)))
    with pytest.raises(UsageError, match=r"do not match .*1 only in train \['n00000003'\]"):
        im2rec.convert(bad, str(tmp_path / "o"), progress=False)
    p = cli("data", "im2rec", bad, str(tmp_path / "o"), "--no-progress")
    assert p.returncode == 2 and "do not match" in p.stderr and "n00000003" in p.stderr
    os.makedirs(os.path.join(bad, "val", wnid(3)))
    with pytest.raises(UsageError, match=f"{wnid(3)} holds no images"):
        im2rec.convert(bad, str(tmp_path / "o"), progress=False)
    assert not os.path.exists(str(tmp_path / "o" / "train.rec"))


# -- damaged files: clear error (file, record) in-process and exit 2 from the CLI --------
def test_truncated_rec(data, tmp_path):
    rec = copy_rec(data[1], tmp_path)
    path = os.path.join(rec, "train.rec")
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 100)
    last = int(np.argmax(RecordFile(os.path.join(rec, "train")).offsets))
    with pytest.raises(RecordIOError, match=rf"train\.rec: truncated: record {last} .*file ends"):
        recordio.check(cfg_for(rec))
    p = cli("data", "verify", os.path.join(rec, "train"))  # damaged data: a finding, status 1
    assert p.returncode == 1 and "train.rec: 1 of 80 records damaged" in p.stderr
    assert f"truncated: record {last} " in p.stderr and "Traceback" not in p.stderr
    with open(path, "r+b") as f:  # cut inside the index's range: records lost
        f.truncate(2000)
    with pytest.raises(RecordIOError, match=r"truncated: .* puts record \d+ .* records lost"):
        recordio.check(cfg_for(rec))


def test_missing_idx(data, tmp_path):
    rec = copy_rec(data[1], tmp_path)
    os.remove(os.path.join(rec, "val.idx"))
    with pytest.raises(RecordIOError, match=r"val\.idx: missing"):
        recordio.check(cfg_for(rec))
    p = cli("data", "verify", os.path.join(rec, "val"))
    assert p.returncode == 2 and "val.idx: missing" in p.stderr
    with pytest.raises(RecordIOError, match="no such folder"):
        recordio.check(cfg_for(str(tmp_path / "absent")))


def test_corrupted_record(data, tmp_path):
    rec = copy_rec(data[1], tmp_path)
    rf = RecordFile(os.path.join(rec, "train"))
    k = 37
    with open(os.path.join(rec, "train.rec"), "r+b") as f:  # garbage over the JPEG, framing intact
        f.seek(int(rf.offsets[k]) + 8 + 24)
        f.write(b"\x00" * 64)
    with pytest.raises(im2rec.DamagedRecords,
                       match=rf"train\.rec: 1 of 80 records damaged; first: record {k} .* "
                             "corrupted: .*differ.* and .*does not decode"):
        im2rec.verify(os.path.join(rec, "train"))
    p = cli("data", "verify", os.path.join(rec, "train"))
    assert p.returncode == 1 and f"record {k} " in p.stderr and "corrupted" in p.stderr
    # the loader meets it mid-epoch and stops with the same message
    loader = RecordTrainLoader(os.path.join(rec, "train"), rank=0, size=1, batch_size=8,
                               ctx=mx.cpu(), seed=0, num_classes=10, image_size=16)
    with pytest.raises(RecordIOError, match=rf"record {k} .* corrupted"):
        for _ in loader:
            pass
    j = 5  # a record whose RecordIO framing (magic) is destroyed
    with open(os.path.join(rec, "train.rec"), "r+b") as f:
        f.seek(int(rf.offsets[j]))
        f.write(b"\xde\xad\xbe\xef")
    p = cli("data", "verify", os.path.join(rec, "train"))  # the first of the two is named
    assert p.returncode == 1 and "2 of 80 records damaged" in p.stderr
    assert f"first: record {j} " in p.stderr and "no RecordIO magic" in p.stderr


def test_class_index_mismatch(data, tmp_path):
    rec = copy_rec(data[1], tmp_path)
    classes = os.path.join(rec, "classes.txt")
    lines = open(classes).read().splitlines(keepends=True)
    with open(classes, "w") as f:  # a class index of 9 classes for records labelled 0..9
        f.writelines(lines[:9])
    with pytest.raises(RecordIOError, match=r"label 9 but .*classes\.txt lists 9 classes"):
        im2rec.verify(os.path.join(rec, "train"))
    p = cli("data", "verify", os.path.join(rec, "val"))
    assert p.returncode == 2 and "classes.txt lists 9 classes" in p.stderr
    with pytest.raises(RecordIOError, match=r"label 9 but .*classes\.txt gives 9 classes"):
        recordio.check(cfg_for(rec))  # start-up check (a sample of records)
    with open(classes, "w") as f:
        f.writelines(lines)
    with pytest.raises(RecordIOError, match="lists 10 classes but model.classes is 12"):
        recordio.build(cfg_for(rec), 0, 1, 8, mx.cpu(), 0, num_classes=12)
    with open(classes, "w") as f:  # an index with more classes than the records use
        f.writelines(lines + ["10\tn00000010\n"])
    with pytest.raises(RecordIOError, match="no record of 1 of them"):
        im2rec.verify(os.path.join(rec, "train"))
    with open(classes, "w") as f:
        f.write("0\tn0\n2\tn2\n")
    with pytest.raises(RecordIOError, match="line 2 is not '1<TAB><class name>'"):
        recordio.check(cfg_for(rec))


# -- loaders ------------------------------------------------------------------------------
def test_build_shapes_and_normalisation(data):
    _, rec, _ = data
    train, val = recordio.build(cfg_for(rec), rank=0, size=1, batch_size=8, ctx=mx.cpu(), seed=0,
                                num_classes=10)
    assert (len(train), len(val)) == (10, 4)
    x, y = next(iter(train))
    assert x.shape == (8, 3, 32, 32) and x.dtype == np.float32 and y.shape == (8,)
    assert y.dtype == np.float32 and set(y.asnumpy()) <= set(range(10))
    # val: shorter side 40, centre 32x32, RGB, ImageNet mean/std - against a plain reference
    vx, vy, ids = next(iter(RecordValLoader(os.path.join(rec, "val"), 0, 1, 4, mx.cpu(), 10,
                                            image_size=32, val_resize=40, with_ids=True)))
    label, _, payload = RecordFile(os.path.join(rec, "val")).read(int(ids[0]))
    img = cv2.imdecode(np.frombuffer(payload, np.uint8), cv2.IMREAD_COLOR)[:, :, ::-1]
    h, w = img.shape[:2]
    s = 40 / min(h, w)
    big = cv2.resize(np.ascontiguousarray(img), (round(w * s), round(h * s)),
                     interpolation=cv2.INTER_LINEAR)
    t, lft = (big.shape[0] - 32) // 2, (big.shape[1] - 32) // 2
    ref = (big[t:t + 32, lft:lft + 32] / 255.0 - recordio.MEAN_RGB) / recordio.STD_RGB
    assert vy.asnumpy()[0] == label
    assert np.abs(ref.transpose(2, 0, 1) - vx.asnumpy()[0]).mean() < 0.15


def test_crop_box_ranges():
    rng = np.random.RandomState(0)
    for _ in range(300):
        h, w = rng.randint(20, 200, size=2)
        x, y, cw, ch = recordio.crop_box(h, w, rng.rand(10, 4), 0.08)
        assert 0 <= x and x + cw <= w and 0 <= y and y + ch <= h
        assert 0.07 * h * w <= cw * ch <= h * w * 1.0001
    x, y, cw, ch = recordio.crop_box(100, 400, rng.rand(10, 4), 1.0)  # 4:1, cannot fit
    assert (cw, ch) == (133, 100) and x == (400 - 133) // 2


def test_polishing_switch(data):
    _, rec, _ = data
    loader = RecordTrainLoader(os.path.join(rec, "train"), rank=0, size=1, batch_size=8,
                               ctx=mx.cpu(), seed=0, num_classes=10, image_size=24,
                               min_area=0.08, polish_min_area=1.0, flip=True, with_ids=True)
    u, flips, area = loader._params(0, 64)
    assert area == 0.08 and 10 < flips.sum() < 54

    def per_id(epoch, polish):
        loader.set_epoch(epoch, polish=polish)
        return {int(i): x for xs, _, ids in loader for x, i in zip(xs.asnumpy(), ids)}

    normal = [per_id(e, False) for e in (0, 1)]
    polish = [per_id(e, True) for e in (0, 1)]
    assert loader._params(0, 64)[2] == 1.0 and not loader._params(0, 64)[1].any()
    common = set(polish[0]) & set(polish[1])
    assert len(common) >= 60
    diff = lambda views, k: np.abs(views[0][k] - views[1][k]).mean()  # noqa: E731
    # polish (area 1.0, no flip): the same record gives (almost always exactly) the same
    # tensor in any epoch - the whole image, at most a one-pixel rounding of the box ...
    dp = np.array([diff(polish, k) for k in common])
    assert (dp == 0).mean() > 0.9 and dp.max() < 0.2
    # ... while normal augmentation differs from epoch to epoch and from the polished view
    dn = np.array([diff(normal, k) for k in common])
    assert (dn > 0).mean() > 0.95 and np.median(dn) > 0.3
    assert np.median([np.abs(normal[0][k] - polish[0][k]).mean() for k in common]) > 0.3


@pytest.mark.parametrize("size,batch,limit", [(1, 8, 0), (2, 8, 0), (3, 4, 0), (4, 8, 64), (3, 8, 50)])
def test_train_sharding(data, size, batch, limit):
    """Ranks simulated in one process: disjoint, equal length, remainder skipped, reshuffled."""
    _, rec, _ = data
    loaders = [RecordTrainLoader(os.path.join(rec, "train"), rank=r, size=size, batch_size=batch,
                                 ctx=mx.cpu(), seed=7, num_classes=10, image_size=16,
                                 limit=limit, threads=1) for r in range(size)]
    n = limit or 80
    nb = n // (size * batch)
    orders = []
    for epoch in (0, 1):
        parts = []
        for ld in loaders:
            ld.set_epoch(epoch)
            assert len(ld) == nb
            parts.append(ld.indices())
        allx = np.concatenate(parts)
        assert len(allx) == nb * batch * size == len(set(allx.tolist()))  # disjoint
        assert n - len(allx) < size * batch                             # remainder skipped
        if n % (size * batch) == 0:                                     # whole (limited) set
            assert sorted(allx.tolist()) == sorted(loaders[0].records.tolist())
        orders.append(allx)
    assert not np.array_equal(orders[0], orders[1])
    # what the loader yields is what indices() announced
    ld = loaders[-1]
    ld.with_ids = True
    ld.set_epoch(1)
    yielded = np.concatenate([ids for _, _, ids in ld])
    assert np.array_equal(yielded, ld.rf.keys[ld.indices()])


@pytest.mark.parametrize("size", [1, 2, 3, 4, 7, 33])  # 33 ranks > 30 records: some get none
def test_val_shards_cover_once(data, size):
    _, rec, _ = data
    seen = []
    for r in range(size):
        vl = RecordValLoader(os.path.join(rec, "val"), r, size, 4, mx.cpu(), 10, image_size=16,
                             val_resize=20, with_ids=True, threads=1)
        batches = list(vl)
        assert len(batches) == len(vl) == -(-((r + 1) * 30 // size - r * 30 // size) // 4)
        if batches:
            assert all(b[0].shape[0] == 4 for b in batches[:-1]) and 0 < batches[-1][0].shape[0] <= 4
        seen += [int(i) for b in batches for i in b[2]]
    assert sorted(seen) == list(range(30))


def test_threads_do_not_change_batches(data):
    _, rec, _ = data
    outs = []
    for threads in (0, 3):
        ld = RecordTrainLoader(os.path.join(rec, "train"), 0, 1, 8, mx.cpu(), 3, 10,
                               image_size=16, threads=threads)
        ld.set_epoch(2)
        outs.append(np.concatenate([x.asnumpy() for x, _ in ld]))
    assert np.array_equal(outs[0], outs[1])


def test_synthetic_loader():
    cfg = DataCfg(kind="synthetic", image_size=16, synthetic_samples=100)
    train, val = synthetic.build(cfg, rank=1, size=3, batch_size=8, ctx=mx.cpu(), seed=0,
                                 num_classes=5)
    assert len(train) == 100 // 24
    x, y = next(iter(train))
    assert x.shape == (8, 3, 16, 16) and x.dtype == np.float32 and y.shape == (8,)
    assert 0 <= y.min().asscalar() and y.max().asscalar() < 5
    total = 0
    for r in range(3):
        _, v = synthetic.build(cfg, rank=r, size=3, batch_size=8, ctx=mx.cpu(), seed=0,
                               num_classes=5)
        batches = [b[0].shape[0] for b in v]
        assert len(batches) == len(v)
        total += sum(batches)
    assert total == 100
    with pytest.raises(UsageError, match="less than one batch"):
        synthetic.build(replace(cfg, synthetic_samples=10), 0, 2, 8, mx.cpu(), 0, 5)


def test_testdata_is_deterministic(tmp_path):
    a = make_imagenet_folder(str(tmp_path / "a"), 1, 1, num_classes=3)
    b = make_imagenet_folder(str(tmp_path / "b"), 1, 1, num_classes=3)
    for split in ("train", "val"):
        for c in range(3):
            fa = sorted(os.listdir(os.path.join(a, split, wnid(c))))
            assert fa == sorted(os.listdir(os.path.join(b, split, wnid(c))))
            for name in fa:
                assert open(os.path.join(a, split, wnid(c), name), "rb").read() == \
                    open(os.path.join(b, split, wnid(c), name), "rb").read()
