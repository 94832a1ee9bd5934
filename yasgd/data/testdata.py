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
