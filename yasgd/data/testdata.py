"""Small ImageNet-layout folders of real JPEGs, made on the spot for tests and benches.

    make_imagenet_folder(dst, per_class_train=20, per_class_val=5)

writes ``dst/train/<wnid>/*.JPEG`` and ``dst/val/<wnid>/*.JPEG`` for the 10
Fashion-MNIST classes: each 28x28 grey image is tinted into RGB (a random colour
per image, so the three channels differ), resized with bicubic interpolation to
a random width and height drawn from ``sizes`` (varied aspect ratios, like
ImageNet photos) and JPEG-encoded. Training images come from Fashion-MNIST's
training file, validation images from its test file, so the two never share an
image. The same arguments give the same files, byte for byte.

When the Fashion-MNIST IDX files are absent (``/usr/share/datasets/fashion-mnist``,
Debian's ``dataset-fashion-mnist``) a procedural pattern per class stands in, so
the function works anywhere; ``source`` in ``dst/testdata.json`` says which.
"""
from __future__ import annotations

import functools
import gzip
import json
import os
from typing import Dict, Optional, Sequence, Tuple

import numpy as np

FASHION_MNIST = "/usr/share/datasets/fashion-mnist"
FASHION_CLASSES = ("tshirt", "trouser", "pullover", "dress", "coat",
                   "sandal", "shirt", "sneaker", "bag", "boot")


def wnid(label: int) -> str:
    """An ImageNet-like folder name for class ``label`` (sorts in label order)."""
    return f"n{label:08d}"


@functools.lru_cache(maxsize=4)
def _idx_images(root: str, split: str) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    prefix = "train" if split == "train" else "t10k"
    img_path = os.path.join(root, f"{prefix}-images-idx3-ubyte.gz")
    lab_path = os.path.join(root, f"{prefix}-labels-idx1-ubyte.gz")
    if not (os.path.isfile(img_path) and os.path.isfile(lab_path)):
        return None
    with gzip.open(img_path, "rb") as f:
        raw = f.read()
    n, h, w = (int.from_bytes(raw[i:i + 4], "big") for i in (4, 8, 12))
    images = np.frombuffer(raw, np.uint8, count=n * h * w, offset=16).reshape(n, h, w)
    with gzip.open(lab_path, "rb") as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    return images, labels


def _procedural(label: int, k: int, rng: np.random.RandomState) -> np.ndarray:
    """A 28x28 grey stand-in image: class-dependent stripes plus noise."""
    yy, xx = np.mgrid[0:28, 0:28].astype(np.float32)
    angle = np.pi * label / 10.0
    wave = np.sin((xx * np.cos(angle) + yy * np.sin(angle)) * (0.3 + 0.05 * label) + k)
    img = 127.5 + 100 * wave + rng.normal(0, 20, (28, 28))
    return np.clip(img, 0, 255).astype(np.uint8)


def _render(grey: np.ndarray, size_wh: Tuple[int, int], rng: np.random.RandomState) -> np.ndarray:
    import cv2
    colour = rng.uniform(0.3, 1.0, size=3).astype(np.float32)
    background = rng.uniform(0, 80, size=3).astype(np.float32)
    g = grey.astype(np.float32)[:, :, None] / 255.0
    rgb = background * (1 - g) + 255.0 * colour * g
    big = cv2.resize(np.clip(rgb, 0, 255).astype(np.uint8), size_wh, interpolation=cv2.INTER_CUBIC)
    return big  # treated as BGR by cv2 below; the order does not matter for test data


def make_imagenet_folder(dst: str, per_class_train: int, per_class_val: int,
                         sizes: Sequence[int] = (64, 96, 128, 160), seed: int = 0,
                         num_classes: int = 10, quality: int = 90,
                         exts: Sequence[str] = (".JPEG",),
                         source: str = FASHION_MNIST) -> str:
    """Write an ImageNet-layout folder of real JPEG files and return ``dst``.

    Width and height of each image are drawn independently from
    ``[min(sizes), max(sizes)]``; ``exts`` are cycled over the files of a class
    (``".png"`` writes a PNG, every other extension a JPEG), to exercise
    readers that must accept ``.JPEG``/``.jpg``/``.png``.
    """
    import cv2
    if not 1 <= num_classes <= 10:
        raise ValueError("num_classes must be 1..10 (Fashion-MNIST has 10 classes)")
    lo, hi = min(sizes), max(sizes)
    rng = np.random.RandomState(seed)
    counts: Dict[str, int] = {}
    used_source = "fashion-mnist"
    for split, per_class in (("train", per_class_train), ("val", per_class_val)):
        data = _idx_images(source, split)
        if data is None:
            used_source = "procedural"
        for label in range(num_classes):
            folder = os.path.join(dst, split, wnid(label))
            os.makedirs(folder, exist_ok=True)
            if data is not None:
                pool = np.flatnonzero(data[1] == label)
                picks = pool[rng.choice(len(pool), size=per_class, replace=per_class > len(pool))]
            for k in range(per_class):
                grey = data[0][picks[k]] if data is not None else _procedural(label, k, rng)
                w, h = (int(v) for v in rng.randint(lo, hi + 1, size=2))
                img = _render(grey, (w, h), rng)
                ext = exts[k % len(exts)]
                if ext.lower() == ".png":
                    ok, buf = cv2.imencode(".png", img)
                else:
                    ok, buf = cv2.imencode(".jpg", img, [int(cv2.IMWRITE_JPEG_QUALITY), quality])
                assert ok
                name = f"{wnid(label)}_{split}_{k:05d}{ext}"
                buf.tofile(os.path.join(folder, name))
            counts[split] = counts.get(split, 0) + per_class
    with open(os.path.join(dst, "testdata.json"), "w") as f:
        json.dump({"source": used_source, "classes": num_classes, "images": counts,
                   "sizes": [lo, hi], "seed": seed, "quality": quality,
                   "class_names": list(FASHION_CLASSES[:num_classes])}, f, indent=1)
    return dst


# -- photo-like ImageNet-sized JPEGs (loader benchmarks at real decode cost) -------------
#: (long side / short side, probability): ImageNet's common shapes, 4:3 the most frequent
PHOTO_ASPECTS = ((4 / 3, 0.6), (3 / 2, 0.25), (5 / 4, 0.05), (1.0, 0.05), (16 / 9, 0.05))
PHOTO_LONG_SIDE = 500       # most ImageNet photos are 500 px on their long side
PHOTO_LONG_RANGE = (350, 640)  # the others (one in five here), drawn uniformly
PHOTO_PORTRAIT = 0.25       # share of portrait orientation


def _pink(rng: np.random.Generator, h: int, w: int, beta: float) -> np.ndarray:
    """A zero-mean, unit-std field with amplitude spectrum 1/f^beta (beta 1: power 1/f^2,
    the spectrum of natural images)."""
    spec = np.fft.rfft2(rng.standard_normal((h, w), dtype=np.float32))
    f = np.hypot(np.fft.fftfreq(h)[:, None], np.fft.rfftfreq(w)[None, :])
    f[0, 0] = 1.0
    spec *= f ** -beta
    spec[0, 0] = 0.0
    field = np.fft.irfft2(spec, s=(h, w)).astype(np.float32)
    return field / (field.std() + 1e-6)


def photo_size(rng: np.random.Generator) -> Tuple[int, int]:
    """(width, height) of one photo: long side 500 (4 in 5) or in PHOTO_LONG_RANGE, an
    ImageNet-like aspect ratio, portrait one time in four."""
    long = PHOTO_LONG_SIDE if rng.random() < 0.8 else int(rng.integers(*PHOTO_LONG_RANGE,
                                                                      endpoint=True))
    ratios, probs = zip(*PHOTO_ASPECTS)
    short = int(round(long / ratios[int(rng.choice(len(ratios), p=probs))]))
    return (short, long) if rng.random() < PHOTO_PORTRAIT else (long, short)


def photo(rng: np.random.Generator, w: int, h: int, grain: float = 10.0) -> np.ndarray:
    """A BGR uint8 image with natural-image statistics: a 1/f^2 luminance field over a smooth
    gradient, smoother colour fields, 3-8 occluding shapes (ellipses, polygons: sharp edges)
    each with its own 1/f texture and colour, and sensor-like grain (std ``grain`` levels)."""
    import cv2
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    angle = rng.uniform(0, 2 * np.pi)
    ramp = np.cos(angle) * (xx / w - 0.5) + np.sin(angle) * (yy / h - 0.5)
    ycc = np.stack([128 + 40 * _pink(rng, h, w, 1.0) + rng.uniform(20, 80) * ramp,
                    rng.uniform(-20, 20) + 18 * _pink(rng, h, w, 1.3),
                    rng.uniform(-20, 20) + 18 * _pink(rng, h, w, 1.3)], axis=-1)
    textures = [_pink(rng, h, w, b) for b in (0.7, 1.0)]
    for k in range(int(rng.integers(3, 9))):
        mask = np.zeros((h, w), np.uint8)
        if rng.random() < 0.5:
            centre = (int(rng.uniform(0, w)), int(rng.uniform(0, h)))
            axes = (int(rng.uniform(0.05, 0.35) * w), int(rng.uniform(0.05, 0.35) * h))
            cv2.ellipse(mask, centre, axes, float(rng.uniform(0, 180)), 0, 360, 1, -1)
        else:
            pts = np.stack([rng.uniform(0, w, 5), rng.uniform(0, h, 5)], -1).astype(np.int32)
            cv2.fillPoly(mask, [pts], 1)
        inside = mask.astype(bool)
        tex = np.roll(textures[k % 2], (int(rng.integers(h)), int(rng.integers(w))), (0, 1))[inside]
        base = np.array([rng.uniform(40, 220), rng.uniform(-40, 40), rng.uniform(-40, 40)],
                        np.float32)
        ycc[inside] = base + np.stack([30 * tex, 5 * tex, 5 * tex], -1)
    ycc[..., 0] += grain * rng.standard_normal((h, w), dtype=np.float32)
    ycc[..., 1:] += 128
    return cv2.cvtColor(np.clip(ycc, 0, 255).astype(np.uint8), cv2.COLOR_YCrCb2BGR)


def make_photo_folder(dst: str, n_train: int, n_val: int, seed: int = 0, num_classes: int = 10,
                      quality: int = 90, grain: float = 10.0) -> str:
    """Write an ImageNet-layout folder of ImageNet-sized, photo-like JPEGs; return ``dst``.

    ``n_train`` / ``n_val`` images, dealt round-robin into ``num_classes`` class folders,
    each drawn by :func:`photo_size` and :func:`photo` from its own generator
    ``default_rng([seed, split, k])`` and JPEG-encoded at ``quality`` (ImageNet's photos
    are mostly quality 90-ish JPEGs of about 110 kB; these land near that mean, see
    ``dst/photos.json``: ``mean_kb`` (1 kB = 1000 bytes) and ``mean_px`` per split). The
    same arguments give the same files, byte for byte. OpenCV runs single-threaded meanwhile:
    a process that forks later (``im2rec`` workers) must not inherit its thread pool.
    """
    import cv2
    threads = cv2.getNumThreads()
    cv2.setNumThreads(1)
    try:
        return _write_photos(dst, n_train, n_val, seed, num_classes, quality, grain)
    finally:
        cv2.setNumThreads(threads)


def _write_photos(dst: str, n_train: int, n_val: int, seed: int, num_classes: int, quality: int,
                  grain: float) -> str:
    import cv2
    stats: Dict[str, Dict[str, float]] = {}
    for s, (split, n) in enumerate((("train", n_train), ("val", n_val))):
        nbytes, npx = [], []
        for label in range(num_classes):
            os.makedirs(os.path.join(dst, split, wnid(label)), exist_ok=True)
        for k in range(n):
            rng = np.random.default_rng([seed, s, k])
            w, h = photo_size(rng)
            ok, buf = cv2.imencode(".jpg", photo(rng, w, h, grain),
                                   [int(cv2.IMWRITE_JPEG_QUALITY), quality])
            assert ok
            label = k % num_classes
            buf.tofile(os.path.join(dst, split, wnid(label), f"{wnid(label)}_{split}_{k:05d}.JPEG"))
            nbytes.append(buf.size)
            npx.append(w * h)
        stats[split] = {"images": n,
                        "mean_kb": round(float(np.mean(nbytes)) / 1e3, 1) if n else 0.0,
                        "mean_px": round(float(np.mean(npx))) if n else 0}
    with open(os.path.join(dst, "photos.json"), "w") as f:
        json.dump({"source": "synthetic photo-like (1/f^2 fields, shapes, grain)", "seed": seed,
                   "quality": quality, "grain": grain, "classes": num_classes, **stats}, f,
                  indent=1)
    return dst
