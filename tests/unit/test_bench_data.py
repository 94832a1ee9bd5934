"""``yasgd bench data``: the ImageNet-sized photo generator and the cores-per-GPU plan.

Fast (a few seconds): a handful of photos, no timing; the measurement itself runs in
``make bench-data``.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest

from yasgd.bench import data_imagenet
from yasgd.data import testdata

cv2 = pytest.importorskip("cv2")

#: A small sample's mean JPEG size must stay in this band (kB, 1 kB = 1000 bytes) around
#: ImageNet's mean of about 110 kB; single photos vary more.
MEAN_KB_BAND = (85.0, 140.0)


def _files(root):
    out = {}
    for folder, _, names in os.walk(root):
        for n in names:
            if n.endswith(".JPEG"):
                with open(os.path.join(folder, n), "rb") as f:
                    out[os.path.relpath(os.path.join(folder, n), root)] = f.read()
    return out


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    root = tmp_path_factory.mktemp("photos")
    a = testdata.make_photo_folder(str(root / "a"), n_train=8, n_val=2, seed=3)
    b = testdata.make_photo_folder(str(root / "b"), n_train=8, n_val=2, seed=3)
    return a, b


def test_photos_are_deterministic_by_seed(photos, tmp_path):
    a, b = photos
    fa, fb = _files(a), _files(b)
    assert len(fa) == 10 and fa == fb
    other = testdata.make_photo_folder(str(tmp_path / "c"), n_train=2, n_val=0, seed=4)
    fc = _files(other)
    assert all(fc[k] != fa[k] for k in fc)


def test_photos_decode_with_imagenet_sizes(photos):
    a, _ = photos
    lo, hi = testdata.PHOTO_LONG_RANGE
    ratios = [r for r, _ in testdata.PHOTO_ASPECTS]
    for name, payload in _files(a).items():
        img = cv2.imdecode(np.frombuffer(payload, np.uint8), cv2.IMREAD_COLOR)
        assert img is not None and img.ndim == 3 and img.shape[2] == 3, name
        long, short = max(img.shape[:2]), min(img.shape[:2])
        assert long == testdata.PHOTO_LONG_SIDE or lo <= long <= hi, (name, img.shape)
        assert any(abs(long / r - short) <= 1 for r in ratios), (name, img.shape)
        assert img.std() > 10, f"{name}: a flat image"
    assert {n.split(os.sep)[0] for n in _files(a)} == {"train", "val"}


def test_photos_weigh_like_imagenet(photos):
    a, _ = photos
    with open(os.path.join(a, "photos.json")) as f:
        made = json.load(f)
    sizes = [len(p) / 1e3 for n, p in _files(a).items() if n.startswith("train")]
    assert made["train"]["mean_kb"] == pytest.approx(np.mean(sizes), abs=0.1)
    assert MEAN_KB_BAND[0] <= made["train"]["mean_kb"] <= MEAN_KB_BAND[1], made["train"]
    assert 100_000 <= made["train"]["mean_px"] <= 300_000, made["train"]


def test_statistic_fixed_in_advance():
    assert data_imagenet.PASSES >= 5
    assert "median of the five" in data_imagenet.__doc__
    assert "warm-up" in data_imagenet.__doc__


def test_gpu_demand_from_published_figures():
    paper = {"images_per_s": 1.73e6, "gpus": 2048}
    d = data_imagenet.gpu_demand(paper)
    assert d["V100"]["images_per_s"] == pytest.approx(844.7, abs=0.1)
    assert 7_900 <= d["H200"]["images_per_s"] <= 8_000
    nodes = {n["gpu"]: n for n in data_imagenet.NODES}
    assert nodes["V100"]["cores"] / nodes["V100"]["gpus"] == 10
    assert nodes["H200"]["cores"] / nodes["H200"]["gpus"] == 12


def _section(train, train_256):
    return {"image": {"n": 8, "mean_kb": 110.0, "mean_px": 187_000, "quality": 90},
            "per_core": {"train": train, "val": 2 * train, "decode": 3 * train,
                         "train_256": train_256},
            "setup": {"batch": 32, "passes": 5, "warmup_passes": 1,
                      "resized_records": "shorter side 256, quality 90"}}


def test_cores_per_gpu_arithmetic():
    paper = {"images_per_s": 1.73e6, "gpus": 2048}
    rows = {r["gpu"]: r for r in data_imagenet.feeds(_section(100.0, 1000.0), paper)}
    assert rows["V100"]["needed"] == pytest.approx(8.447, abs=1e-3) and rows["V100"]["enough"]
    assert rows["H200"]["needed"] > 12 and not rows["H200"]["enough"]
    assert rows["H200"]["enough_256"]


class _Rec:
    def __init__(self, data):
        self.data = data

    def bench(self, name):
        assert name == "data"
        return self.data

    def json(self, name):
        assert name == "paper.json"
        return {"yasgd": {"images_per_s": 1.73e6, "gpus": 2048}}


def test_block_renders_verdicts_and_fallback():
    hw = {"cpu": "Test CPU", "cores": 2}
    assert "Not recorded yet" in data_imagenet.loader_feeds_gpu(_Rec({"hardware": hw}))
    text = data_imagenet.loader_feeds_gpu(_Rec({"hardware": hw,
                                                "imagenet_sized": _section(100.0, 1000.0)}))
    assert "ABCI 3.0" in text and "**not enough**" in text and "DALI" in text
    assert "nvidia-dali-cuda120<=1.39" in text
    enough = data_imagenet.loader_feeds_gpu(_Rec({"hardware": hw,
                                                  "imagenet_sized": _section(1e4, 2e4)}))
    assert "**not enough**" not in enough and "DALI" not in enough


def test_recorded_bench_keeps_both_parts():
    path = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "results",
                        "bench_data.json")
    with open(path) as f:
        d = json.load(f)
    assert {r["loader"] for r in d["results"]} >= {"yasgd RecordTrainLoader",
                                                   "mx.io.ImageRecordIter"}
    s = d.get("imagenet_sized")
    if s is None:
        pytest.skip("examples/results/bench_data.json predates the ImageNet-sized part")
    assert set(s["per_core"]) == {"train", "val", "decode", "train_256"}
    assert all(len(v) == data_imagenet.PASSES for v in s["passes_images_per_s"].values())


# multiprocessing's temporary folder for gluon's DataLoader workers (bench data's
# _socket_folder), in a fresh interpreter each: a real Listener binds a socket there, as a
# worker does to hand a batch over
SOCKET_PROBE = """
import os, sys
from multiprocessing.connection import Listener
from yasgd.bench.data import _socket_folder
folder = _socket_folder()
listener = Listener(family="AF_UNIX")
print(folder, listener.address, os.path.isdir(folder))
listener.close()
"""


def _socket_probe(tmpdir):
    out = subprocess.run([sys.executable, "-c", SOCKET_PROBE], env=dict(os.environ, TMPDIR=tmpdir),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    folder, address, made = out.stdout.split()
    assert made == "True" and os.path.dirname(address) == folder
    assert not os.path.exists(folder)                      # removed at the process's exit
    return folder


def test_the_socket_folder_is_made_under_a_short_temporary_folder(tmp_path):
    assert os.path.dirname(_socket_probe(str(tmp_path))) == str(tmp_path)


def test_a_temporary_folder_too_long_for_a_socket_gives_way_to_tmp(tmp_path):
    long = tmp_path / ("d" * 100)
    long.mkdir()
    folder = _socket_probe(str(long))           # a socket's path there would not fit
    assert os.path.dirname(folder) == "/tmp", folder
    assert os.listdir(long) == []


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                    reason="needs root and unshare (a mount namespace of its own)")
def test_no_folder_that_can_hold_the_sockets_is_one_line(tmp_path):
    # a mount namespace of its own in which /tmp and /var/tmp are read-only (bound on
    # themselves: what they hold, this checkout perhaps, stays there); TMPDIR under /dev/shm
    # (a tmpfs), too long for a socket's path
    base = tempfile.mkdtemp(prefix="yasgd-test-", dir="/dev/shm")
    try:
        long = os.path.join(base, "d" * 100)
        os.mkdir(long)
        yasgd = os.path.join(os.path.dirname(sys.executable), "yasgd")
        script = " && ".join([f"mount --bind {d} {d} && mount -o remount,bind,ro {d}"
                              for d in ("/tmp", "/var/tmp")]
                             + [f"exec {yasgd} bench data --quick --out {base}/out"])
        out = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                             env=dict(os.environ, TMPDIR=long, OMP_NUM_THREADS="1"),
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 2, out.stderr
        assert out.stderr == (f"yasgd: error: bench data: the temporary folder {long} is too "
                              "long to hold the worker processes' sockets (a socket's path is "
                              "at most 107 bytes) and /tmp and /var/tmp cannot be written; set "
                              "TMPDIR to a shorter folder\n")
        assert os.listdir(base) == ["d" * 100] and os.listdir(long) == []
    finally:
        shutil.rmtree(base)
