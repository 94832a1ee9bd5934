"""ImageNet-layout folder -> MXNet RecordIO (``yasgd data im2rec SRC DST``), and the check
of the result (``yasgd data verify PREFIX``).

Input: ``SRC/train/<wnid>/*`` and ``SRC/val/<wnid>/*`` (``.jpeg``, ``.jpg``, ``.png``
in any case; ImageNet's flat ``val/`` must first be sorted into class folders,
e.g. with the usual ``valprep.sh``). Output in ``DST``:

    train.rec, train.idx   one record per training image
    train.digests          key, offset, length and SHA-256 of every record (below)
    val.rec, val.idx, val.digests
    classes.txt            "<index>\\t<folder name>" per line, index = label

The ``.rec``/``.idx`` files are what MXNet's ``tools/im2rec.py`` writes (read them with
``mx.recordio.MXIndexedRecordIO`` or ``mx.io.ImageRecordIter``): each record is
``mx.recordio.pack(IRHeader(flag=0, label=class index, id=key, id2=0), JPEG bytes)``
and the ``.idx`` maps the key (0, 1, ... in file order) to the byte offset. Class
indices follow the sorted folder names. Like im2rec's list maker, the training
records are shuffled once (fixed seed 0) so that any prefix is a random subset;
validation records stay in class order.

Each image is decoded, its shorter side resized to ``resize`` pixels (bilinear up,
area down; ``resize=0`` keeps the size and passes JPEG bytes through untouched)
and re-encoded at JPEG ``quality``; ``workers`` processes do this in parallel and
the records are written in order. The files are written under temporary names
and the whole set renamed at the end (:mod:`yasgd.data.im2rec_out`), so an interrupted
or failed conversion leaves no half-written ``train.rec`` behind, nor a new one beside an
old ``val.rec``. The output folder is checked before any work: an existing
file in its place, a folder that cannot be created or written, or one that is the source
folder or lies inside it (the output would become part of the input) is an error; so is a
class folder whose name ``classes.txt`` cannot hold (a tab, a line break, or a character
the locale's encoding cannot write).

Bad images are skipped, not fatal: an image file that is empty, unreadable or
does not decode with OpenCV, or that resized would hold more pixels than OpenCV
decodes or a side longer than a JPEG holds, gets one ``yasgd: warning:`` line
naming it and no record, and the JSON summary counts the skips of each split
(``"skipped"``, the first ten in ``"skipped_files"``) and in total. A conversion
of 1.28 M photos should survive a few broken files and say which they were,
rather than stop after hours. An image that the decoder repairs (libjpeg says so on the
standard error stream, naming no file) is kept, named in a warning line and counted
(``"repaired"``). It is an error only when a class folder of ``train`` loses every
image (its class would have no record), or a split every image.

Each split also gets a digest file ``<split>.digests`` (the SHA-256 of every record, for
``yasgd data verify``); its format and the checks of ``verify``: :mod:`yasgd.data.verify`.
"""
from __future__ import annotations

import hashlib
import locale
import math
import os
import re
import stat
import time
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from yasgd import UsageError, outputs
from yasgd.argtypes import MAX_PER_CORE
from yasgd.workers import WorkerDied, Workers
from yasgd.data.im2rec_out import (  # noqa: F401 -- the output's names: re-exported
    OUTPUTS, PART, PARTS, RECORD_FILES, SPLITS, check_apart, check_dst, entries, folder_problem,
    make_dst, unfollowable)
from yasgd.data.verify import (  # noqa: F401 -- verify and its findings: re-exported
    DIGEST_HEADER, DamagedRecords, decoder_output, read_digests, verify, verify_records)
from yasgd.data.verify import warn as _warn

IMAGE_EXTS = (".jpeg", ".jpg", ".png")
TRAIN_SHUFFLE_SEED = 0


# -- listing ---------------------------------------------------------------------
def _class_folders(split_dir: str) -> List[str]:
    """The sorted class folder names; UsageError on one that classes.txt cannot hold."""
    names = []
    for entry in entries(split_dir):
        why = unfollowable(entry.path)
        if why:     # a class folder or not: it cannot be told, so it cannot be left out
            raise UsageError(f"im2rec: {entry.path} is {why}; mend or remove the link")
        if entry.is_dir():
            names.append(entry.name)
    names.sort()
    for name in names:
        why = _name_problem(name)
        if why:
            raise UsageError(f"im2rec: class folder {name!r} in {split_dir} cannot be named in "
                             f"classes.txt ('<index><TAB><name>' lines): {why}; rename it")
    return names


def _name_problem(name: str) -> str:
    r"""Why ``name`` would not read back from classes.txt as itself, or "". The reader
    (recordfile.read_classes) opens it in text mode - universal newlines, the locale's
    encoding, as outputs.write_text writes it - and splits each line at its one tab: a
    tab, "\n" or "\r" in a name breaks or changes its line, and a character the encoding
    cannot write (a byte of the name that is not valid in it) cannot be written at all."""
    if re.search(r"[\t\n\r]", name):
        return "its name holds a tab or a line break"
    encoding = locale.getpreferredencoding(False)
    try:
        name.encode(encoding)
    except UnicodeError:
        return f"its name holds a character that {encoding} cannot write"
    return ""


def _images_in(folder: str) -> List[str]:
    """Every entry named as an image, whatever it is: one that is no readable regular file
    (a broken link, a directory, a pipe) is skipped with a warning by :func:`_encode`, not
    left out without a word."""
    return sorted(e.name for e in entries(folder)
                  if os.path.splitext(e.name)[1].lower() in IMAGE_EXTS)


def _not_a_file(path: str) -> str:
    """Why ``path`` cannot be read as an image file without opening it, or "" (a pipe would
    block the read for good)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        link = unfollowable(path)
        return f"it is {link}" if link else f"cannot read it ({e.strerror})"
    return "" if stat.S_ISREG(mode) else f"it is {outputs.kind(mode)}, not a file"


def list_images(src: str) -> Tuple[List[str], Dict[str, List[Tuple[str, int]]]]:
    """(class names, {"train": [(path, label)], "val": [...]}); UsageError on a bad layout."""
    why = folder_problem(src)
    if why:
        raise UsageError(f"im2rec: source folder {src} {why}")
    splits = {}
    for split in ("train", "val"):
        d = os.path.join(src, split)
        why = folder_problem(d)
        if why:
            why = "is missing" if why == "does not exist" else why
            raise UsageError(f"im2rec: {d} {why} (expected {src}/train/<class>/*.JPEG "
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
        if not val_classes and any(os.path.splitext(e.name)[1].lower() in IMAGE_EXTS
                                   for e in entries(splits["val"])):
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


# OpenCV refuses to decode an image of more pixels than this (CV_IO_MAX_IMAGE_PIXELS, its
# default), and the training loader decodes with OpenCV: a larger record could not be read.
MAX_PIXELS = 1 << 30
# the largest --resize at which a square image stays within MAX_PIXELS
MAX_RESIZE = math.isqrt(MAX_PIXELS)
JPEG_MAX_SIDE = 65535       # a JPEG's width and height are 16-bit fields


# -- one image (runs in a worker process) -------------------------------------------
def _encode(job: Tuple[str, int, int]) -> Tuple[Optional[bytes], str]:
    """(JPEG bytes, "") or (None, why the image is skipped)."""
    path, resize, quality = job
    import cv2
    why = _not_a_file(path)
    if why:
        return None, why
    try:
        raw = np.fromfile(path, dtype=np.uint8)
    except OSError as e:
        return None, f"cannot read it ({e.strerror})"
    if raw.size == 0:
        return None, "it is empty (0 bytes)"
    try:
        img = cv2.imdecode(raw, cv2.IMREAD_COLOR)
    except cv2.error:
        img = None
    if img is None:
        return None, f"its {raw.size} bytes do not decode as an image"
    is_jpeg = raw.size > 2 and raw[0] == 0xFF and raw[1] == 0xD8
    if resize <= 0 and is_jpeg:
        return raw.tobytes(), ""
    if resize > 0:
        h, w = img.shape[:2]
        short = min(h, w)
        if short != resize:
            nh, nw = (resize, max(1, round(w * resize / h))) if h <= w else \
                     (max(1, round(h * resize / w)), resize)
            if nh * nw > MAX_PIXELS:
                return None, (f"resized from {w}x{h} to {nw}x{nh} it would have more than "
                              f"{MAX_PIXELS:,} pixels, the most OpenCV decodes")
            if max(nh, nw) > JPEG_MAX_SIDE:
                return None, (f"resized from {w}x{h} to {nw}x{nh} it would have a side longer "
                              f"than {JPEG_MAX_SIDE:,} pixels, the most a JPEG holds")
            interp = cv2.INTER_AREA if resize < short else cv2.INTER_LINEAR
            try:
                img = cv2.resize(img, (nw, nh), interpolation=interp)
            except cv2.error as e:
                return None, f"resizing it from {w}x{h} to {nw}x{nh} failed ({_cv_reason(e)})"
    try:
        ok, buf = cv2.imencode(".jpg", img, [int(cv2.IMWRITE_JPEG_QUALITY), int(quality)])
    except cv2.error as e:
        return None, f"it cannot be re-encoded as JPEG ({_cv_reason(e)})"
    if not ok:
        return None, "it cannot be re-encoded as JPEG"
    return buf.tobytes(), ""


def _cv_reason(e: Exception) -> str:
    """The message of an OpenCV error, without its source location."""
    text = str(e).strip()
    m = re.search(r"error: \(-?\d+:([^)]*)\)\s*(.*?)(?: in function|$)", text, re.S)
    return " ".join((f"{m.group(1)}: {m.group(2)}" if m else text.split("\n")[-1]).split())


def _encode_noting(job: Tuple[str, int, int]) -> Tuple[Optional[bytes], str, List[str]]:
    """:func:`_encode`, and what the C decoders printed meanwhile: libjpeg repairs a damaged
    JPEG and says so on the standard error stream, naming no file."""
    with decoder_output() as (printed, _):
        payload, why = _encode(job)
    return payload, why, printed


def _init_worker() -> None:
    import cv2
    cv2.setNumThreads(1)


def _write_split(items: Sequence[Tuple[str, int]], prefix: str, resize: int, quality: int,
                 workers: int, progress: bool, split: str, num_classes: int) -> dict:
    import mxnet as mx
    from tqdm import tqdm
    tmp = {ext: prefix + ext + PART for ext in RECORD_FILES}
    writer = mx.recordio.MXIndexedRecordIO(tmp[".idx"], tmp[".rec"], "w")
    digests = None
    jobs = [(path, resize, quality) for path, _ in items]
    pool: Optional[Workers] = None
    skipped: List[str] = []
    repaired: List[str] = []
    per_class = np.zeros(num_classes, np.int64)
    key = nbytes = 0  # keys 0, 1, ... over the written records
    try:
        digests = open(tmp[".digests"], "w")
        if workers > 1:     # stop signals are this process's: it ends the workers
            pool = Workers(_encode_noting, jobs, workers, init=_init_worker)
            results = iter(pool)
        else:
            _init_worker()
            results = map(_encode_noting, jobs)
        digests.write(DIGEST_HEADER)
        with tqdm(total=len(jobs), desc=f"im2rec {split}", unit="img", disable=not progress,
                  dynamic_ncols=True) as bar:
            for (path, label), (payload, why, printed) in zip(items, results):
                bar.update(1)
                if payload is None:
                    _warn(f"im2rec: skipped {path}: {why}")
                    skipped.append(path)
                    continue
                if printed:
                    _warn(f"im2rec: the image decoder repaired {path}, which is kept "
                          f"({len(printed)} message(s), the first: {printed[0][:100]!r})")
                    repaired.append(path)
                record = mx.recordio.pack(mx.recordio.IRHeader(0, float(label), key, 0), payload)
                writer.write_idx(key, record)
                digests.write(f"{key}\t{writer.idx[key]}\t{len(record)}\t"
                              f"{hashlib.sha256(record).hexdigest()}\n")
                per_class[label] += 1
                key += 1
                nbytes += len(payload)
        _check_kept(items, per_class, split)
    except BaseException as e:
        writer.close()
        if digests is not None:
            digests.close()
        for p in tmp.values():
            if os.path.exists(p):
                os.remove(p)
        if isinstance(e, WorkerDied):
            names = ", ".join(path for path, _, _ in e.jobs)
            raise UsageError(f"im2rec: a worker process died while it encoded one of {names} "
                             f"({e.how}); the {split} split's partial files are "
                             "removed") from None
        if isinstance(e, OSError):  # e.g. the disk is full: one line, not a traceback
            raise UsageError(f"im2rec: writing {tmp['.rec']} failed: "
                             f"{e.strerror or e}") from None
        raise
    finally:
        if pool is not None:
            pool.close()
    writer.close()
    digests.close()
    for ext, path in tmp.items():   # renamed with the whole set, or removed
        outputs.stage(path, prefix + ext)
    return {"records": key, "jpeg_bytes": nbytes,
            "rec_bytes": os.path.getsize(tmp[".rec"]), "skipped": len(skipped),
            "skipped_files": skipped[:10], "repaired": len(repaired),
            "repaired_files": repaired[:10]}


def _check_kept(items: Sequence[Tuple[str, int]], per_class: np.ndarray, split: str) -> None:
    """UsageError if skipping emptied the split, or (train) a class folder."""
    if per_class.sum() == 0:
        raise UsageError(f"im2rec: every image of {split} was skipped (none decodes)")
    if split == "train" and (per_class == 0).any():
        label = int(np.flatnonzero(per_class == 0)[0])
        folder = os.path.dirname(next(p for p, lab in items if lab == label))
        raise UsageError(f"im2rec: every image of class folder {folder} was skipped "
                         "(none decodes): its class would have no training record")


def convert(src: str, dst: str, resize: int = 256, quality: int = 95, workers: int = 2,
            verify: bool = False, progress: bool = True) -> dict:
    """Convert ``src`` (ImageNet layout) into ``dst``; returns a JSON-able summary."""
    if not 0 <= resize <= MAX_RESIZE:
        raise UsageError(f"im2rec: --resize must be in [0, {MAX_RESIZE}] pixels (a square image "
                         f"of more than {MAX_PIXELS:,} pixels is more than OpenCV decodes), "
                         f"got {resize}")
    if not 1 <= quality <= 100:
        raise UsageError(f"im2rec: --quality must be 1..100, got {quality}")
    most = MAX_PER_CORE * (os.cpu_count() or 1)
    if not 1 <= workers <= most:
        raise UsageError(f"im2rec: --workers must be in [1, {most}] ({MAX_PER_CORE} per CPU "
                         f"core), got {workers}")
    t0 = time.time()
    check_apart(src, dst)               # first: check_dst probes the folder dst would be in
    check_dst(dst)
    classes, items = list_images(src)
    make_dst(dst)
    order = np.random.RandomState(TRAIN_SHUFFLE_SEED).permutation(len(items["train"]))
    items["train"] = [items["train"][i] for i in order]
    summary = {"src": os.path.abspath(src), "dst": os.path.abspath(dst), "classes": len(classes),
               "resize": resize, "quality": quality, "workers": workers,
               "train_shuffle_seed": TRAIN_SHUFFLE_SEED}
    with outputs.together():    # every output replaces its old file only once all are whole
        for split in SPLITS:
            summary[split] = _write_split(items[split], os.path.join(dst, split), resize,
                                          quality, workers, progress, split, len(classes))
        target = os.path.join(dst, "classes.txt")
        try:
            outputs.write_text(target, "".join(f"{i}\t{n}\n" for i, n in enumerate(classes)))
        except OSError as e:
            raise UsageError(f"im2rec: writing {target} failed: {e.strerror or e}") from None
    summary["skipped"] = summary["train"]["skipped"] + summary["val"]["skipped"]
    if verify:
        for split in ("train", "val"):
            summary[split]["verified"] = verify_records(os.path.join(dst, split),
                                                        threads=workers, progress=progress)
    summary["seconds"] = round(time.time() - t0, 2)
    return summary
