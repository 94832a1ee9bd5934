"""The check of a RecordIO pair (``yasgd data verify PREFIX``), and the digest files
that yasgd's im2rec writes beside it for that check.

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
        records, bytes of the ``.rec`` outside every record the ``.idx`` places
        (records it lacks, or bytes added: no loader reads them). Offsets need not
        increase (MXNet's format does not require it).
"""
from __future__ import annotations

import contextlib
import hashlib
import math
import os
import re
import sys
import tempfile
from typing import List, Optional, Tuple

import numpy as np

from yasgd import UsageError
from yasgd.data.recordfile import RecordFile, RecordIOError, absent, read_classes

__all__ = ["DIGEST_HEADER", "DamagedRecords", "verify", "verify_records", "read_digests", "warn"]

DIGEST_HEADER = "# yasgd record digests v1: key\toffset\tlength\tsha256\n"
_DIGEST_LINE = re.compile(rb"([0-9]{1,18})[ \t]+([0-9]{1,18})[ \t]+([0-9]{1,18})[ \t]+"
                          rb"([0-9a-f]{64})")


def warn(message: str) -> None:
    """One warning line on stderr (through tqdm, so that a progress bar stays intact; a line
    break in a file's name escaped, as in an error line)."""
    from tqdm import tqdm

    from yasgd.usage import one_line
    tqdm.write(f"yasgd: warning: {one_line(message)}", file=sys.stderr)


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
        warn(f"{path}: {absent(path)}, so bytes changed inside an image that still decodes go "
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
    lacking = np.flatnonzero(lengths < 0)
    if lacking.size:
        raise RecordIOError(f"{path}: no digest of {lacking.size} of the {len(rf)} records of "
                            f"{rf.idx_path} (first: key {rf.keys[lacking[0]]}) {foreign}")
    return lengths, hexes


def _check_record(rf: RecordFile, i: int, digests,
                  headers_only: bool) -> Tuple[float, str, int]:
    """(label, "", the bytes after it that no record holds) of a sound record ``i``, else
    (nan, what is wrong, 0)."""
    label, why = _check_one(rf, i, digests, headers_only)
    return label, why, 0 if why else rf.unindexed_after(i)


def _check_one(rf: RecordFile, i: int, digests, headers_only: bool) -> Tuple[float, str]:
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
def decoder_output():
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
    unindexed: List[Tuple[int, int]] = []   # (sound record, the bytes after it no record holds)
    with decoder_output() as (printed, real_stderr), ThreadPoolExecutor(max(1, threads)) as pool, \
            tqdm(total=len(rf), desc=f"verify {os.path.basename(prefix)}", unit="rec",
                 disable=None if progress is None else not progress, dynamic_ncols=True,
                 file=real_stderr) as bar:
        for start in range(0, len(rf), 4096):  # blocks: at most 4096 futures at a time
            block = range(start, min(start + 4096, len(rf)))
            for i, (label, why, after) in zip(block, pool.map(
                    lambda i: _check_record(rf, i, digests, headers_only), block)):
                labels[i] = label
                if why:
                    bad.append((i, why))
                elif after:
                    unindexed.append((i, after))
            bar.update(len(block))
    if printed:
        warn(f"the image decoder printed {len(printed)} message(s) while decoding "
              f"{rf.rec_path}, the first: {printed[0][:100]!r} (it repairs what it can and goes "
              "on; " + ("the digests decide which records are damaged)" if digests is not None
                        else "without digests such records are not counted as damaged)"))
    if bad:
        i, why = bad[0]
        detail = why[len(rf.rec_path) + 2:] if why.startswith(rf.rec_path + ": ") else why
        raise DamagedRecords(f"{rf.rec_path}: {len(bad)} of {len(rf)} records damaged; "
                             f"first: {detail}", count=len(bad), first=i)
    _check_coverage(rf, unindexed)
    _check_labels(prefix, rf, labels)
    return len(rf)


def _check_coverage(rf: RecordFile, unindexed: List[Tuple[int, int]]) -> None:
    """RecordIOError where bytes of the ``.rec`` lie outside every record of the ``.idx``
    (``unindexed``: each record and the bytes after it): records the index lacks, or bytes
    added to the file. Every record may be sound and no loader would ever read those bytes."""
    if not unindexed:
        return
    gaps = sorted((int(rf.ends[i]) - n, n, i) for i, n in unindexed)
    start, n, i = gaps[0]
    raise RecordIOError(
        f"{rf.rec_path}: {sum(g[1] for g in gaps):,} bytes in {len(gaps)} span(s) lie outside "
        f"every record {rf.idx_path} indexes (the first: {n:,} bytes from byte {start}, after "
        f"record {i}, key {rf.keys[i]}): records missing from the index (an .idx of another "
        "conversion?) or bytes added to the file; no loader reads them")


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
