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
and renamed at the end, so an interrupted conversion leaves no half-written
``train.rec`` behind. The output folder is checked before any work: an existing
file in its place, or a folder that cannot be created or written, is an error.

Bad images are skipped, not fatal: an image file that is empty, unreadable or
does not decode with OpenCV gets one ``yasgd: warning:`` line naming it and no
record, and the JSON summary counts the skips of each split (``"skipped"``, the
first ten in ``"skipped_files"``) and in total. A conversion of 1.28 M photos
should survive a few broken files and say which they were, rather than stop
after hours. It is an error only when a class folder of ``train`` loses every
image (its class would have no record), or a split every image.

Digest file ``<split>.digests`` (text, one line per record, in file order)::

    # yasgd record digests v1: key<TAB>offset<TAB>length<TAB>sha256
    0<TAB>0<TAB>10311<TAB>9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08

``key`` and ``offset`` are those of the ``.idx``; ``length`` is the size in bytes of
the record as given to ``MXIndexedRecordIO.write_idx`` (the 24-byte IRHeader
followed by the JPEG; RecordIO framing and padding excluded) and ``sha256`` the
hex digest of those bytes, so a changed label is caught as well as a changed
pixel. Lines starting with ``#`` are comments. MXNet's readers and the training
loader ignore the file.

``verify`` reads every record of ``PREFIX.rec`` through ``PREFIX.idx``: the
RecordIO framing, the image record header, the length and SHA-256 against
``PREFIX.digests``, a full decode with ``cv2.imdecode`` (what the training loader
uses), and - when ``classes.txt`` lies beside the files - that every label is a
class index it lists (for ``train``, that every class occurs).
``headers_only=True`` is the fast check: the framing and header of every record
(its first 32 bytes), no digest, no decode. A missing digest file (data made by
MXNet's own im2rec) gives one warning line and the rest is checked: flipped bytes
inside a JPEG that still decodes then go unnoticed.

What ``verify`` reports, and the exit status ``yasgd data verify`` gives:

    0   every record is fine
    1   damaged data, a finding: every record was read and N are bad;
        :class:`DamagedRecords`, one line naming the count and the first bad
        record (position, key, byte offset, what is wrong)
    2   it cannot check, or the files do not belong together (a UsageError):
        ``.rec`` or ``.idx`` missing or unreadable, an ``.idx`` that is no usable
        index of this ``.rec`` (binary or non-numeric line, negative or duplicate
        key, two keys at one offset, an offset past the end of the ``.rec``: the
        line is named), a digest file or ``classes.txt`` that does not match the
        records. Offsets need not increase (MXNet's format does not require it).
"""
from __future__ import annotations

import contextlib
import hashlib
import math
import os
import re
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from yasgd import UsageError
from yasgd.data.recordio import RecordFile, RecordIOError, read_classes

IMAGE_EXTS = (".jpeg", ".jpg", ".png")
TRAIN_SHUFFLE_SEED = 0
OUTPUTS = tuple(f"{s}{e}" for s in ("train", "val") for e in (".rec", ".idx", ".digests")) + \
    ("classes.txt",)
DIGEST_HEADER = "# yasgd record digests v1: key\toffset\tlength\tsha256\n"
_DIGEST_LINE = re.compile(rb"([0-9]{1,18})[ \t]+([0-9]{1,18})[ \t]+([0-9]{1,18})[ \t]+"
                          rb"([0-9a-f]{64})")


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
def _encode(job: Tuple[str, int, int]) -> Tuple[Optional[bytes], str]:
    """(JPEG bytes, "") or (None, why the image is skipped)."""
    path, resize, quality = job
    import cv2
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
            interp = cv2.INTER_AREA if resize < short else cv2.INTER_LINEAR
            img = cv2.resize(img, (nw, nh), interpolation=interp)
    ok, buf = cv2.imencode(".jpg", img, [int(cv2.IMWRITE_JPEG_QUALITY), int(quality)])
    if not ok:
        return None, "it cannot be re-encoded as JPEG"
    return buf.tobytes(), ""


def _init_worker() -> None:
    import cv2
    cv2.setNumThreads(1)


def _warn(message: str) -> None:
    """One warning line on stderr (through tqdm, so that a progress bar stays intact)."""
    from tqdm import tqdm
    tqdm.write(f"yasgd: warning: {message}", file=sys.stderr)


def _write_split(items: Sequence[Tuple[str, int]], prefix: str, resize: int, quality: int,
                 workers: int, progress: bool, split: str, num_classes: int) -> dict:
    import mxnet as mx
    from tqdm import tqdm
    tmp = {ext: prefix + ext + ".part" for ext in (".rec", ".idx", ".digests")}
    writer = mx.recordio.MXIndexedRecordIO(tmp[".idx"], tmp[".rec"], "w")
    digests = None
    jobs = [(path, resize, quality) for path, _ in items]
    pool = None
    skipped: List[str] = []
    per_class = np.zeros(num_classes, np.int64)
    key = nbytes = 0  # keys 0, 1, ... over the written records
    try:
        digests = open(tmp[".digests"], "w")
        if workers > 1:
            import multiprocessing as mp
            method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
            pool = mp.get_context(method).Pool(workers, initializer=_init_worker)
            results = pool.imap(_encode, jobs, chunksize=8)  # imap keeps the order
        else:
            _init_worker()
            results = map(_encode, jobs)
        digests.write(DIGEST_HEADER)
        with tqdm(total=len(jobs), desc=f"im2rec {split}", unit="img", disable=not progress,
                  dynamic_ncols=True) as bar:
            for (path, label), (payload, why) in zip(items, results):
                bar.update(1)
                if payload is None:
                    _warn(f"im2rec: skipped {path}: {why}")
                    skipped.append(path)
                    continue
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
        if isinstance(e, OSError):  # e.g. the disk is full: one line, not a traceback
            raise UsageError(f"im2rec: writing {tmp['.rec']} failed: "
                             f"{e.strerror or e}") from None
        raise
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
    writer.close()
    digests.close()
    for ext, path in tmp.items():
        os.replace(path, prefix + ext)
    return {"records": key, "jpeg_bytes": nbytes,
            "rec_bytes": os.path.getsize(prefix + ".rec"), "skipped": len(skipped),
            "skipped_files": skipped[:10]}


def _check_kept(items: Sequence[Tuple[str, int]], per_class: np.ndarray, split: str) -> None:
    """UsageError if skipping emptied the split, or (train) a class folder."""
    if per_class.sum() == 0:
        raise UsageError(f"im2rec: every image of {split} was skipped (none decodes)")
    if split == "train" and (per_class == 0).any():
        label = int(np.flatnonzero(per_class == 0)[0])
        folder = os.path.dirname(next(p for p, lab in items if lab == label))
        raise UsageError(f"im2rec: every image of class folder {folder} was skipped "
                         "(none decodes): its class would have no training record")


def _check_dst(dst: str) -> None:
    """UsageError unless ``dst`` is a folder, or could be made as one, and is writable."""
    if os.path.exists(dst) and not os.path.isdir(dst):
        raise UsageError(f"im2rec: output folder {dst} is an existing file, not a folder")
    probe = os.path.abspath(dst)
    while not os.path.exists(probe):  # the nearest existing ancestor must be a writable folder
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise UsageError(f"im2rec: cannot create output folder {dst}: {probe} is a file")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UsageError(f"im2rec: cannot write output folder {dst}: {probe} is not writable")
    for name in OUTPUTS:
        if os.path.isdir(os.path.join(dst, name)):
            raise UsageError(f"im2rec: {os.path.join(dst, name)} is a folder; it would be "
                             "overwritten by an output file")


def _make_dst(dst: str) -> None:
    try:
        os.makedirs(dst, exist_ok=True)
        with tempfile.TemporaryFile(dir=dst):
            pass
    except OSError as e:
        raise UsageError(f"im2rec: cannot write output folder {dst}: {e.strerror}") from None


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
    _check_dst(dst)
    classes, items = list_images(src)
    _make_dst(dst)
    order = np.random.RandomState(TRAIN_SHUFFLE_SEED).permutation(len(items["train"]))
    items["train"] = [items["train"][i] for i in order]
    summary = {"src": os.path.abspath(src), "dst": os.path.abspath(dst), "classes": len(classes),
               "resize": resize, "quality": quality, "workers": workers,
               "train_shuffle_seed": TRAIN_SHUFFLE_SEED}
    for split in ("train", "val"):
        summary[split] = _write_split(items[split], os.path.join(dst, split), resize, quality,
                                      workers, progress, split, len(classes))
    summary["skipped"] = summary["train"]["skipped"] + summary["val"]["skipped"]
    with open(os.path.join(dst, "classes.txt"), "w") as f:
        for i, name in enumerate(classes):
            f.write(f"{i}\t{name}\n")
    if verify:
        for split in ("train", "val"):
            summary[split]["verified"] = verify_records(os.path.join(dst, split),
                                                        threads=workers, progress=progress)
    summary["seconds"] = round(time.time() - t0, 2)
    return summary


# -- verify -------------------------------------------------------------------------------
class DamagedRecords(RecordIOError):
    """``verify`` read every record and found ``count`` damaged ones (exit status 1)."""

    def __init__(self, message: str, count: int, first: int):
        super().__init__(message)
        self.count, self.first = count, first


def verify(prefix: str, headers_only: bool = False, threads: int = 2,
           progress: Optional[bool] = None) -> int:
    """Check every record of ``prefix``.rec/.idx (see the module docstring); returns the count.

    Raises :class:`DamagedRecords` for damaged records, :class:`RecordIOError` (a
    UsageError) when the files cannot be checked or do not belong together.
    """
    return verify_records(prefix, threads=threads, progress=progress, headers_only=headers_only)


def read_digests(path: str, rf: RecordFile) -> Optional[Tuple[np.ndarray, List[str]]]:
    """(lengths, sha256 hex digests) by position in ``rf``; None (and a warning) if absent."""
    if not os.path.isfile(path):
        _warn(f"{path}: missing, so bytes changed inside an image that still decodes go "
              "unnoticed (yasgd's im2rec writes it, MXNet's does not); checking the rest")
        return None
    position = {k: p for p, k in enumerate(rf.keys.tolist())}
    lengths = np.full(len(rf), -1, np.int64)
    hexes: List[str] = [""] * len(rf)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise RecordIOError(f"{path}: cannot read: {e.strerror}") from None
    foreign = "(digests of another conversion?)"
    for n, raw in enumerate(data.split(b"\n"), 1):
        line = raw.strip()
        if not line or line.startswith(b"#"):
            continue
        m = _DIGEST_LINE.fullmatch(line)
        if m is None:
            raise RecordIOError(f"{path}: line {n} is not '<key><TAB><offset><TAB><length>"
                                f"<TAB><sha256>': {line[:60]!r} (corrupted digest file)")
        key, offset, length = (int(g) for g in m.groups()[:3])
        p = position.get(key)
        if p is None:
            raise RecordIOError(f"{path}: line {n}: key {key} is not in {rf.idx_path} {foreign}")
        if int(rf.offsets[p]) != offset:
            raise RecordIOError(f"{path}: line {n} puts key {key} at byte {offset}, "
                                f"{rf.idx_path} at byte {rf.offsets[p]} {foreign}")
        if hexes[p]:
            raise RecordIOError(f"{path}: line {n}: a second digest of key {key}")
        lengths[p], hexes[p] = length, m.group(4).decode()
    absent = np.flatnonzero(lengths < 0)
    if absent.size:
        raise RecordIOError(f"{path}: no digest of {absent.size} of the {len(rf)} records of "
                            f"{rf.idx_path} (first: key {rf.keys[absent[0]]}) {foreign}")
    return lengths, hexes


def _check_record(rf: RecordFile, i: int, digests, headers_only: bool) -> Tuple[float, str]:
    """(label, "") of a sound record ``i``, else (nan, what is wrong)."""
    import cv2
    try:
        if headers_only:
            return rf.read_header(i)[0], ""
        record = rf.read_record(i)
        label, _, payload = rf.unpack(i, record)
    except RecordIOError as e:
        return math.nan, str(e)
    problems = []
    if digests is not None and (len(record) != digests[0][i] or
                                hashlib.sha256(record).hexdigest() != digests[1][i]):
        problems.append(f"its {len(record)} bytes differ from those im2rec wrote (length or "
                        f"sha256 in {os.path.basename(rf.rec_path[:-4])}.digests)")
    try:
        img = cv2.imdecode(np.frombuffer(payload, np.uint8), cv2.IMREAD_COLOR) if payload else None
    except cv2.error:
        img = None
    if img is None:
        problems.append(f"its {len(payload)}-byte payload does not decode as an image")
    if problems:
        return math.nan, f"{rf._where(i)} is corrupted: {' and '.join(problems)}"
    return label, ""


@contextlib.contextmanager
def _decoder_output():
    """Collect what the C image decoders print on fd 2 while the block runs (libjpeg warns
    there instead of failing); yields (those lines, filled at the end; the real stderr)."""
    sys.stderr.flush()
    saved = os.dup(2)
    real = os.fdopen(os.dup(saved), "w")
    lines: List[str] = []
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield lines, real
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            real.close()
            tmp.seek(0)
            lines += [ln for ln in tmp.read().decode(errors="replace").splitlines() if ln.strip()]


def verify_records(prefix: str, threads: int = 2, progress: Optional[bool] = None,
                   headers_only: bool = False) -> int:
    """:func:`verify` with ``threads`` threads; ``progress=None``: a bar on a terminal."""
    from concurrent.futures import ThreadPoolExecutor

    from tqdm import tqdm
    for ext in (".rec", ".idx"):
        if prefix.endswith(ext):
            prefix = prefix[:-len(ext)]
    if os.path.isdir(prefix) and not os.path.exists(prefix + ".rec"):
        raise UsageError(f"{prefix} is a folder: give the prefix of one .rec/.idx pair, "
                         f"e.g. {os.path.join(prefix, 'train')}")
    rf = RecordFile(prefix)
    digests = None if headers_only else read_digests(prefix + ".digests", rf)
    labels = np.empty(len(rf), np.float64)
    bad: List[Tuple[int, str]] = []
    with _decoder_output() as (printed, real_stderr), ThreadPoolExecutor(max(1, threads)) as pool, \
            tqdm(total=len(rf), desc=f"verify {os.path.basename(prefix)}", unit="rec",
                 disable=None if progress is None else not progress, dynamic_ncols=True,
                 file=real_stderr) as bar:
        for start in range(0, len(rf), 4096):  # blocks: at most 4096 futures at a time
            block = range(start, min(start + 4096, len(rf)))
            for i, (label, why) in zip(block, pool.map(
                    lambda i: _check_record(rf, i, digests, headers_only), block)):
                labels[i] = label
                if why:
                    bad.append((i, why))
            bar.update(len(block))
    if printed:
        _warn(f"the image decoder printed {len(printed)} message(s) while decoding "
              f"{rf.rec_path}, the first: {printed[0][:100]!r} (it repairs what it can and goes "
              "on; " + ("the digests decide which records are damaged)" if digests is not None
                        else "without digests such records are not counted as damaged)"))
    if bad:
        i, why = bad[0]
        detail = why[len(rf.rec_path) + 2:] if why.startswith(rf.rec_path + ": ") else why
        raise DamagedRecords(f"{rf.rec_path}: {len(bad)} of {len(rf)} records damaged; "
                             f"first: {detail}", count=len(bad), first=i)
    _check_labels(prefix, rf, labels)
    return len(rf)


def _check_labels(prefix: str, rf: RecordFile, labels: np.ndarray) -> None:
    """RecordIOError unless the labels fit the ``classes.txt`` beside ``prefix`` (if any)."""
    classes_path = os.path.join(os.path.dirname(os.path.abspath(prefix)), "classes.txt")
    if not os.path.isfile(classes_path):
        return
    num_classes = len(read_classes(classes_path))
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
