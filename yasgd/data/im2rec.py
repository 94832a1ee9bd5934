"""ImageNet-layout folder -> MXNet RecordIO (``yasgd data im2rec SRC DST``).

Input: ``SRC/train/<wnid>/*`` and ``SRC/val/<wnid>/*`` (``.jpeg``, ``.jpg``, ``.png``
in any case; ImageNet's flat ``val/`` must first be sorted into class folders,
e.g. with the usual ``valprep.sh``). Output in ``DST``:

    train.rec, train.idx   one record per training image
    val.rec,   val.idx     one record per validation image
    classes.txt            "<index>\\t<folder name>" per line, index = label

The files are what MXNet's ``tools/im2rec.py`` writes (read them with
``mx.recordio.MXIndexedRecordIO`` or ``mx.io.ImageRecordIter``): each record is
``mx.recordio.pack(IRHeader(flag=0, label=class index, id=running index, id2=0),
JPEG bytes)`` and the ``.idx`` maps the running index to the byte offset. Class
indices follow the sorted folder names. Like im2rec's list maker, the training
records are shuffled once (fixed seed 0) so that any prefix is a random subset;
validation records stay in class order.

Each image is decoded, its shorter side resized to ``resize`` pixels (bilinear up,
area down; ``resize=0`` keeps the size and passes JPEG bytes through untouched)
and re-encoded at JPEG ``quality``; ``workers`` processes do this in parallel and
the records are written in order. The files are written under temporary names
and renamed at the end, so an interrupted conversion leaves no half-written
``train.rec`` behind.
"""
from __future__ import annotations

import os
import time
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from yasgd import UsageError

IMAGE_EXTS = (".jpeg", ".jpg", ".png")
TRAIN_SHUFFLE_SEED = 0


# -- listing ---------------------------------------------------------------------
def _class_folders(split_dir: str) -> List[str]:
    return sorted(e.name for e in os.scandir(split_dir) if e.is_dir())


def _images_in(folder: str) -> List[str]:
    return sorted(e.name for e in os.scandir(folder)
                  if e.is_file() and os.path.splitext(e.name)[1].lower() in IMAGE_EXTS)


def list_images(src: str) -> Tuple[List[str], Dict[str, List[Tuple[str, int]]]]:
    """(class names, {"train": [(path, label)], "val": [...]}); UsageError on a bad layout."""
    if not os.path.isdir(src):
        raise UsageError(f"im2rec: source folder {src} does not exist")
    splits = {}
    for split in ("train", "val"):
        d = os.path.join(src, split)
        if not os.path.isdir(d):
            raise UsageError(f"im2rec: {d} is missing (expected {src}/train/<class>/*.JPEG "
                             f"and {src}/val/<class>/*.JPEG)")
        splits[split] = d
    classes = _class_folders(splits["train"])
    if not classes:
        raise UsageError(f"im2rec: {splits['train']} holds no class folders "
                         f"(expected {splits['train']}/<class>/*.JPEG)")
    val_classes = _class_folders(splits["val"])
    if val_classes != classes:
        only_train = sorted(set(classes) - set(val_classes))
        only_val = sorted(set(val_classes) - set(classes))
        if not val_classes and any(os.path.splitext(n)[1].lower() in IMAGE_EXTS
                                   for n in os.listdir(splits["val"])):
            raise UsageError(f"im2rec: {splits['val']} holds images but no class folders; sort "
                             "them into val/<class>/ first (e.g. with ImageNet's valprep.sh)")
        raise UsageError(
            f"im2rec: class folders of {splits['val']} do not match {splits['train']}: "
            f"{len(only_train)} only in train {only_train[:3]}, "
            f"{len(only_val)} only in val {only_val[:3]}")
    items: Dict[str, List[Tuple[str, int]]] = {}
    for split, d in splits.items():
        items[split] = []
        for label, name in enumerate(classes):
            folder = os.path.join(d, name)
            files = _images_in(folder)
            if not files:
                raise UsageError(f"im2rec: class folder {folder} holds no images "
                                 f"({', '.join(IMAGE_EXTS)})")
            items[split] += [(os.path.join(folder, f), label) for f in files]
    return classes, items


# -- one image (runs in a worker process) -------------------------------------------
def _encode(job: Tuple[str, int, int]) -> bytes:
    path, resize, quality = job
    import cv2
    raw = np.fromfile(path, dtype=np.uint8)
    img = cv2.imdecode(raw, cv2.IMREAD_COLOR)
    if img is None:
        raise UsageError(f"im2rec: {path} does not decode as an image")
    is_jpeg = raw.size > 2 and raw[0] == 0xFF and raw[1] == 0xD8
    if resize <= 0 and is_jpeg:
        return raw.tobytes()
    if resize > 0:
        h, w = img.shape[:2]
        short = min(h, w)
        if short != resize:
            nh, nw = (resize, max(1, round(w * resize / h))) if h <= w else \
                     (max(1, round(h * resize / w)), resize)
            interp = cv2.INTER_AREA if resize < short else cv2.INTER_LINEAR
            img = cv2.resize(img, (nw, nh), interpolation=interp)
    ok, buf = cv2.imencode(".jpg", img, [int(cv2.IMWRITE_JPEG_QUALITY), int(quality)])
    if not ok:
        raise UsageError(f"im2rec: cannot encode {path} as JPEG")
    return buf.tobytes()


def _init_worker() -> None:
    import cv2
    cv2.setNumThreads(1)


def _write_split(items: Sequence[Tuple[str, int]], prefix: str, resize: int, quality: int,
                 workers: int, progress: bool, desc: str) -> Dict[str, int]:
    import mxnet as mx
    from tqdm import tqdm
    tmp_rec, tmp_idx = prefix + ".rec.part", prefix + ".idx.part"
    writer = mx.recordio.MXIndexedRecordIO(tmp_idx, tmp_rec, "w")
    jobs = [(path, resize, quality) for path, _ in items]
    pool = None
    try:
        if workers > 1:
            import multiprocessing as mp
            method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
            pool = mp.get_context(method).Pool(workers, initializer=_init_worker)
            results = pool.imap(_encode, jobs, chunksize=8)  # imap keeps the order
        else:
            _init_worker()
            results = map(_encode, jobs)
        nbytes = 0
        with tqdm(total=len(jobs), desc=desc, unit="img", disable=not progress,
                  dynamic_ncols=True) as bar:
            for i, ((_, label), payload) in enumerate(zip(items, results)):
                header = mx.recordio.IRHeader(0, float(label), i, 0)
                writer.write_idx(i, mx.recordio.pack(header, payload))
                nbytes += len(payload)
                bar.update(1)
    except BaseException:
        writer.close()
        for p in (tmp_rec, tmp_idx):
            if os.path.exists(p):
                os.remove(p)
        raise
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
    writer.close()
    os.replace(tmp_rec, prefix + ".rec")
    os.replace(tmp_idx, prefix + ".idx")
    return {"records": len(items), "jpeg_bytes": nbytes,
            "rec_bytes": os.path.getsize(prefix + ".rec")}


def convert(src: str, dst: str, resize: int = 256, quality: int = 95, workers: int = 2,
            verify: bool = False, progress: bool = True) -> dict:
    """Convert ``src`` (ImageNet layout) into ``dst``; returns a JSON-able summary."""
    if resize < 0:
        raise UsageError(f"im2rec: --resize must be >= 0, got {resize}")
    if not 1 <= quality <= 100:
        raise UsageError(f"im2rec: --quality must be 1..100, got {quality}")
    if workers < 1:
        raise UsageError(f"im2rec: --workers must be >= 1, got {workers}")
    t0 = time.time()
    classes, items = list_images(src)
    os.makedirs(dst, exist_ok=True)
    order = np.random.RandomState(TRAIN_SHUFFLE_SEED).permutation(len(items["train"]))
    items["train"] = [items["train"][i] for i in order]
    summary = {"src": os.path.abspath(src), "dst": os.path.abspath(dst), "classes": len(classes),
               "resize": resize, "quality": quality, "workers": workers,
               "train_shuffle_seed": TRAIN_SHUFFLE_SEED}
    for split in ("train", "val"):
        summary[split] = _write_split(items[split], os.path.join(dst, split), resize, quality,
                                      workers, progress, desc=f"im2rec {split}")
    with open(os.path.join(dst, "classes.txt"), "w") as f:
        for i, name in enumerate(classes):
            f.write(f"{i}\t{name}\n")
    if verify:
        for split in ("train", "val"):
            summary[split]["verified"] = verify_records(os.path.join(dst, split),
                                                        threads=workers, progress=progress)
    summary["seconds"] = round(time.time() - t0, 2)
    return summary


def verify(prefix: str) -> int:
    """Read every record of ``prefix``.rec/.idx back and decode it; returns the count.

    Checks the RecordIO framing of every record, that every payload decodes as
    an image, and - when ``classes.txt`` lies next to the files - that every
    label is a class index it lists (for ``train``, that every class occurs).
    Raises :class:`yasgd.UsageError` naming the file and the record otherwise.
    """
    return verify_records(prefix)


def verify_records(prefix: str, threads: int = 2, progress: Optional[bool] = None) -> int:
    """:func:`verify` with ``threads`` decoding threads; ``progress=None``: a bar on a terminal."""
    from concurrent.futures import ThreadPoolExecutor

    import cv2
    from tqdm import tqdm

    from yasgd.data.recordio import RecordFile, RecordIOError, read_classes
    for ext in (".rec", ".idx"):
        if prefix.endswith(ext):
            prefix = prefix[:-len(ext)]
    rf = RecordFile(prefix)
    classes_path = os.path.join(os.path.dirname(os.path.abspath(prefix)), "classes.txt")
    num_classes: Optional[int] = None
    if os.path.isfile(classes_path):
        num_classes = len(read_classes(classes_path))

    def check(i: int) -> Tuple[int, float]:
        label, _, payload = rf.read(i)
        img = cv2.imdecode(np.frombuffer(payload, np.uint8), cv2.IMREAD_COLOR)
        if img is None:
            raise RecordIOError(f"{rf._where(i)} is corrupted: its {len(payload)}-byte payload "
                                "does not decode as an image")
        return i, label

    labels = np.empty(len(rf), np.float64)
    with ThreadPoolExecutor(max(1, threads)) as pool, \
            tqdm(total=len(rf), desc=f"verify {os.path.basename(prefix)}", unit="rec",
                 disable=None if progress is None else not progress, dynamic_ncols=True) as bar:
        for start in range(0, len(rf), 4096):  # blocks: at most 4096 futures at a time
            for i, label in pool.map(check, range(start, min(start + 4096, len(rf)))):
                labels[i] = label
            bar.update(min(4096, len(rf) - start))
    if num_classes is not None:
        bad = np.flatnonzero((labels < 0) | (labels >= num_classes) | (labels != np.round(labels)))
        if bad.size:
            i = int(bad[0])
            raise RecordIOError(f"{rf.rec_path}: record {i} has label {labels[i]:g} but "
                                f"{classes_path} lists {num_classes} classes "
                                f"(0..{num_classes - 1}): the class index does not match these records")
        if os.path.basename(prefix) == "train":
            missing = sorted(set(range(num_classes)) - set(labels.astype(np.int64).tolist()))
            if missing:
                raise RecordIOError(f"{classes_path} lists {num_classes} classes but {rf.rec_path} "
                                    f"has no record of {len(missing)} of them (first: {missing[:3]}): "
                                    "the class index does not match these records")
    return len(rf)
