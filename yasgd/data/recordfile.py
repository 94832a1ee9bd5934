"""MXNet's RecordIO files, read without MXNet: the ``.idx`` index, random access to the
records of a ``.rec``, and ``classes.txt``.

A ``.rec`` is a sequence of records, each framed by the RecordIO magic and a length word
(a payload holding the magic at a 4-byte boundary is split by the writer into parts, joined
here); an image record is MXNet's ``IRHeader`` (flag, label, id, id2) followed by the
image bytes. The ``.idx`` maps each record's key to its byte offset, one
``<key><TAB><offset>`` line per record. Everything unusable is a :class:`RecordIOError`
(a UsageError) naming the file and the line or record: a missing or unreadable file, a
truncated ``.rec``, an ``.idx`` that is no usable index (binary or non-numeric line,
negative or duplicate key, two keys at one offset, an offset past the end of the ``.rec``:
:func:`read_idx`), or one that does not belong to the ``.rec``.
"""
from __future__ import annotations

import os
import re
import struct
from typing import List, Tuple

import numpy as np

from yasgd import UsageError

__all__ = ["MAGIC", "RecordIOError", "RecordFile", "read_classes", "read_idx"]

MAGIC = 0xCED7230A
_MAGIC_BYTES = struct.pack("<I", MAGIC)
_HEADER = struct.Struct("IfQQ")     # mx.recordio.IRHeader: flag, label, id, id2


class RecordIOError(UsageError):
    """A missing, truncated or corrupted RecordIO file (names the file and the record)."""


def read_classes(path: str) -> List[str]:
    """The class names of ``classes.txt`` ("<index>\\t<name>" lines, index 0, 1, ...)."""
    if not os.path.isfile(path):
        raise RecordIOError(f"{path}: {absent(path)} (class index file written by `yasgd data "
                            "im2rec`)")
    try:
        with open(path) as f:       # the locale's encoding, as im2rec writes it
            lines = f.read().split("\n")   # universal newlines: "\r\n" and "\r" are "\n"
    except OSError as e:
        raise RecordIOError(f"{path}: cannot read it ({e.strerror or e})") from None
    except UnicodeDecodeError as e:
        raise RecordIOError(f"{path}: not text in {e.encoding} (byte {e.start}: "
                            f"{e.reason}); im2rec writes it in the locale's encoding") from None
    names = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        parts = line.split("\t")
        index = parts[0].strip()          # ASCII digits (str.isdigit takes superscripts)
        if len(parts) != 2 or not (index.isascii() and index.isdigit()) \
                or int(index) != len(names):
            raise RecordIOError(f"{path}: line {n} is not '{len(names)}<TAB><class name>': "
                                f"{line.strip()[:60]!r}")
        names.append(parts[1])
    if not names:
        raise RecordIOError(f"{path}: lists no classes")
    return names


# The start of a line that is not "<key>\t<offset>" as MXNet writes it (at most 18 digits
# each, so int64 holds them); a lookahead per line start, so linear in the file size.
_IDX_BAD_LINE = re.compile(rb"^(?![0-9]{1,18}[ \t]+[0-9]{1,18}[ \t\r]*$)(?:.|\n)", re.M)
_INT = re.compile(rb"-?[0-9]+")
_BINARY = re.compile(rb"[^\t\r\x20-\x7e]")
_INT64_MAX = (1 << 63) - 1


def read_idx(idx_path: str, rec_path: str, rec_size: int) -> Tuple[np.ndarray, np.ndarray,
                                                                   np.ndarray]:
    """(keys, offsets, line numbers) of an ``.idx``; RecordIOError naming the line if unusable.

    Rejects binary or non-numeric lines, negative numbers, duplicate keys, two keys at
    one offset and offsets past the end of ``rec_path`` (``rec_size`` bytes). Offsets
    need not increase: MXNet's format does not require it and :class:`RecordFile`
    finds each record's end from the sorted offsets. Blank lines are skipped.
    """
    try:
        with open(idx_path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise RecordIOError(f"{idx_path}: cannot read: {e.strerror}") from None
    if not _IDX_BAD_LINE.search(data):  # the common case, vectorised: record i on line i + 1
        tokens = data.split()
        keys = np.array(tokens[0::2], dtype=np.int64)
        offsets = np.array(tokens[1::2], dtype=np.int64)
        lines = np.arange(1, keys.size + 1)
    else:
        keys, offsets, lines = _read_idx_lines(idx_path, data)
    if keys.size == 0:
        raise RecordIOError(f"{idx_path}: holds no records")
    for values, what in ((keys, "give key"), (offsets, "put a record at byte")):
        if (np.diff(values) > 0).all():  # increasing, as im2rec writes them: no duplicate
            continue
        order = np.argsort(values, kind="stable")
        same = np.flatnonzero(values[order][1:] == values[order][:-1])
        if same.size:
            a, b = sorted(int(lines[order[j]]) for j in (same[0], same[0] + 1))
            raise RecordIOError(f"{idx_path}: lines {a} and {b} both {what} "
                                f"{values[order[same[0]]]} (corrupted index)")
    beyond = np.flatnonzero(offsets > rec_size - 8)
    if beyond.size:
        i = int(beyond[0])
        raise RecordIOError(
            f"{rec_path}: truncated: {idx_path} line {lines[i]} puts record {i} (key {keys[i]}) "
            f"at byte {offsets[i]} but the file has only {rec_size} bytes "
            f"({beyond.size} records lost; an incomplete copy, or an .idx of another file?)")
    return keys, offsets, lines


def _read_idx_lines(idx_path: str, data: bytes) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`read_idx` line by line, for an index the fast pattern rejects: finds the bad line."""
    keys, offsets, lines = [], [], []
    for n, raw in enumerate(data.split(b"\n"), 1):
        parts = raw.split()
        if not parts:
            continue
        shown = raw.strip()[:60]
        if _BINARY.search(raw):
            raise RecordIOError(f"{idx_path}: line {n} is binary, not '<key><TAB><offset>': "
                                f"{shown!r} (corrupted index, or not an .idx file)")
        values = [int(p) if _INT.fullmatch(p) else None for p in parts]
        if len(values) == 2 and None not in values:
            for v, what in zip(values, ("key", "offset")):
                if v < 0:
                    raise RecordIOError(f"{idx_path}: line {n}: negative {what} {v} "
                                        "(corrupted index)")
                if v > _INT64_MAX:
                    raise RecordIOError(f"{idx_path}: line {n}: {what} {v} is out of range "
                                        "(corrupted index)")
            keys.append(values[0])
            offsets.append(values[1])
            lines.append(n)
            continue
        raise RecordIOError(f"{idx_path}: line {n} is not '<key><TAB><offset>': "
                            f"{shown.decode('ascii')!r} (corrupted index)")
    return (np.array(keys, dtype=np.int64), np.array(offsets, dtype=np.int64),
            np.array(lines, dtype=np.int64))


def absent(path: str) -> str:
    """How a path that is no regular file is absent (a folder or a pipe is not "missing")."""
    return "not a regular file" if os.path.exists(path) else "missing"


class RecordFile:
    """Random access to the records of ``prefix.rec`` through ``prefix.idx``, thread-safe.

    Handles MXNet's multi-part records (a payload containing the RecordIO magic
    at a 4-byte boundary is split by the writer and joined here).
    """

    def __init__(self, prefix: str):
        self.rec_path, self.idx_path = prefix + ".rec", prefix + ".idx"
        if not os.path.isfile(self.rec_path):
            raise RecordIOError(f"{self.rec_path}: {absent(self.rec_path)} (make it with "
                                "`yasgd data im2rec`)")
        if not os.path.isfile(self.idx_path):
            raise RecordIOError(f"{self.idx_path}: {absent(self.idx_path)}: the index of "
                                f"{self.rec_path} is needed for random access (`yasgd data "
                                "im2rec` writes both)")
        self.size = os.path.getsize(self.rec_path)
        self.keys, self.offsets, self.lines = read_idx(self.idx_path, self.rec_path, self.size)
        order = np.argsort(self.offsets, kind="stable")
        ends = np.empty_like(self.offsets)
        ends[order] = np.append(self.offsets[order][1:], self.size)
        self.ends = ends
        try:
            self.fd = os.open(self.rec_path, os.O_RDONLY)
        except OSError as e:
            raise RecordIOError(f"{self.rec_path}: cannot read: {e.strerror}") from None

    def __len__(self) -> int:
        return int(self.keys.size)

    def __del__(self):
        fd = getattr(self, "fd", None)
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def _where(self, i: int) -> str:
        return f"{self.rec_path}: record {i} (key {self.keys[i]}, byte {self.offsets[i]})"

    def read(self, i: int) -> Tuple[float, int, bytes]:
        """(label, header id, payload) of record number ``i`` (position in the .idx)."""
        return self.unpack(i, self.read_record(i))

    def read_record(self, i: int) -> bytes:
        """The bytes of record number ``i`` (IRHeader + payload), framing checked and removed."""
        off, end = int(self.offsets[i]), int(self.ends[i])
        buf = os.pread(self.fd, end - off, off)
        pos, parts = 0, []
        while True:
            if pos + 8 > len(buf):
                raise self._short(i, off + pos + 8)
            magic, lrec = struct.unpack_from("<II", buf, pos)
            if magic != MAGIC:
                raise RecordIOError(f"{self._where(i)} is corrupted: no RecordIO magic at byte "
                                    f"{off + pos} (or {self.idx_path} does not belong to this file)")
            cflag, length = lrec >> 29, lrec & ((1 << 29) - 1)
            pos += 8
            if pos + length > len(buf):
                raise self._short(i, off + pos + length)
            parts.append(buf[pos:pos + length])
            pos += (length + 3) & ~3
            if cflag == 0 and len(parts) == 1 or cflag == 3 and len(parts) > 1:
                break
            if cflag in (1, 2) and (cflag == 1) == (len(parts) == 1):
                parts.append(_MAGIC_BYTES)
                continue
            raise RecordIOError(f"{self._where(i)} is corrupted: bad continuation flag {cflag}")
        return b"".join(parts) if len(parts) > 1 else parts[0]

    def unpack(self, i: int, record: bytes) -> Tuple[float, int, bytes]:
        """(label, header id, payload) of the bytes :meth:`read_record` returned for ``i``."""
        if len(record) < _HEADER.size:
            raise RecordIOError(f"{self._where(i)} is corrupted: {len(record)} bytes, shorter than "
                                "the image record header")
        flag, label, rid, _ = _HEADER.unpack_from(record, 0)
        start = _HEADER.size
        if flag > 0:  # a label vector follows the header; the class is its first entry
            if start + 4 * flag > len(record):
                raise RecordIOError(f"{self._where(i)} is corrupted: label vector of {flag} "
                                    "floats runs past the record")
            label = struct.unpack_from("f", record, start)[0]
            start += 4 * flag
        return float(label), int(rid), record[start:]

    def read_header(self, i: int) -> Tuple[float, int]:
        """(label, header id) of record ``i`` from its first 32 bytes: framing, length, header.

        A record that is not the plain case (one part, scalar label) is read in full.
        """
        off, end = int(self.offsets[i]), int(self.ends[i])
        head = os.pread(self.fd, min(end - off, 8 + _HEADER.size), off)
        if len(head) == 8 + _HEADER.size:
            magic, lrec = struct.unpack_from("<II", head, 0)
            length = lrec & ((1 << 29) - 1)
            if magic == MAGIC and lrec >> 29 == 0 and _HEADER.size <= length <= end - off - 8:
                flag, label, rid, _ = _HEADER.unpack_from(head, 8)
                if flag == 0:
                    return float(label), int(rid)
        label, rid, _ = self.read(i)  # raises the precise error, or handles the rare layouts
        return label, rid

    def unindexed_after(self, i: int) -> int:
        """Bytes between the end of record ``i`` (its parts and their padding) and the next
        record the index places, or the file's end: 0 in every file MXNet's writer made
        with its index. For a record whose framing was read sound (:meth:`read_record`)."""
        pos, end = int(self.offsets[i]), int(self.ends[i])
        while True:
            head = os.pread(self.fd, 8, pos)
            if len(head) < 8:
                return 0
            lrec = struct.unpack_from("<I", head, 4)[0]
            pos += 8 + (((lrec & ((1 << 29) - 1)) + 3) & ~3)
            if lrec >> 29 in (0, 3):        # a whole record, or the last part of a split one
                return max(end - pos, 0)

    def _short(self, i: int, needed_end: int) -> RecordIOError:
        if int(self.ends[i]) >= self.size:
            return RecordIOError(f"{self.rec_path}: truncated: {self._where(i).split(': ', 1)[1]} "
                                 f"needs bytes up to {needed_end} but the file ends at "
                                 f"{self.size} (an incomplete copy?)")
        return RecordIOError(f"{self._where(i)} is corrupted: its length field runs into the "
                             f"next record (or {self.idx_path} does not belong to this file)")
