"""`yasgd data im2rec` and `yasgd data verify` on real JPEGs and real damaged files.

Every case that a user can meet goes through the installed ``yasgd`` command and
asserts the exit status, the one ``yasgd: error:`` line (status 1 and 2) and that
no traceback escapes: 0 = fine, 1 = damaged records found, 2 = cannot check /
bad input. The many ways an ``.idx`` or a digest file can be malformed are
checked in-process as well (same code path, no interpreter start each).
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys

import cv2
import mxnet as mx
import numpy as np
import pytest

from yasgd import UsageError, outputs
from yasgd.data import im2rec
from yasgd.data.recordio import RecordFile, RecordIOError, RecordTrainLoader, read_classes
from yasgd.data.testdata import make_imagenet_folder, wnid

YASGD = os.path.join(os.path.dirname(sys.executable), "yasgd")
CLASSES, PER_TRAIN, PER_VAL = 3, 6, 2
N_TRAIN = CLASSES * PER_TRAIN  # good training images; two bad files are added


def yasgd(*args):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([YASGD, *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=120)


def errors(p):
    """The stderr lines that report an error (argparse's or ours)."""
    assert "Traceback" not in p.stderr, p.stderr
    return [ln for ln in p.stderr.splitlines() if "error:" in ln]


def assert_usage_error(p, *needles):
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = errors(p)
    assert len(lines) == 1 and lines[0].startswith("yasgd: error: "), p.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def conv(tmp_path_factory):
    """An ImageNet-layout folder with a zero-byte and a garbage .JPEG, converted by the CLI."""
    base = tmp_path_factory.mktemp("tools")
    src = make_imagenet_folder(str(base / "src"), PER_TRAIN, PER_VAL, sizes=(40, 64),
                               num_classes=CLASSES)
    empty = os.path.join(src, "train", wnid(1), "empty.JPEG")
    garbage = os.path.join(src, "train", wnid(2), "garbage.JPEG")
    open(empty, "wb").close()
    with open(garbage, "wb") as f:
        f.write(b"\xff\xd8\xff\xe0 this is not a JPEG " * 40)
    rec = str(base / "rec")
    p = yasgd("data", "im2rec", src, rec, "--resize", 32, "--workers", 2, "--no-progress")
    return src, rec, p, (empty, garbage)


def copy_rec(rec, tmp_path):
    dst = str(tmp_path / "rec")
    shutil.copytree(rec, dst)
    return os.path.join(dst, "train")


# -- im2rec ---------------------------------------------------------------------------
def test_im2rec_skips_bad_images_and_writes_digests(conv):
    src, rec, p, bad = conv
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    warnings = [ln for ln in p.stderr.splitlines() if ln.startswith("yasgd: warning: ")]
    assert len(warnings) == 2 and "error" not in p.stderr
    assert bad[0] in warnings[0] + warnings[1] and bad[1] in warnings[0] + warnings[1]
    assert any("empty (0 bytes)" in w for w in warnings)
    assert any("do not decode" in w for w in warnings)
    summary = json.loads(p.stdout)
    assert summary["skipped"] == 2 and summary["val"]["skipped"] == 0
    assert summary["train"]["skipped"] == 2 and sorted(summary["train"]["skipped_files"]) == \
        sorted(bad)
    assert summary["train"]["records"] == N_TRAIN
    # the digest file: a comment line, then key, offset (as in the .idx), length, sha256
    r = mx.recordio.MXIndexedRecordIO(os.path.join(rec, "train.idx"),
                                      os.path.join(rec, "train.rec"), "r")
    lines = open(os.path.join(rec, "train.digests")).read().splitlines()
    assert lines[0].startswith("# yasgd record digests v1") and len(lines) == N_TRAIN + 1
    for i, line in enumerate(lines[1:]):
        key, offset, length, sha = line.split("\t")
        record = r.read_idx(int(key))
        assert (int(key), int(offset)) == (i, r.idx[i])
        assert int(length) == len(record) and sha == hashlib.sha256(record).hexdigest()
        assert mx.recordio.unpack(record)[0].id == i  # keys stay 0..N-1 despite the skips
    r.close()
    # the training loader reads the files (the digest file beside them changes nothing)
    loader = RecordTrainLoader(os.path.join(rec, "train"), rank=0, size=1, batch_size=6,
                               ctx=mx.cpu(), seed=0, num_classes=CLASSES, image_size=16,
                               threads=1)
    assert sum(x.shape[0] for x, _ in loader) == N_TRAIN


def test_verify_good_set(conv):
    _, rec, _, _ = conv
    for split, n in (("train", N_TRAIN), ("val", CLASSES * PER_VAL)):
        p = yasgd("data", "verify", os.path.join(rec, split))
        assert p.returncode == 0 and p.stderr == "", p.stderr
        assert p.stdout.strip().endswith(f"{n} records ok")
    p = yasgd("data", "verify", os.path.join(rec, "train.rec"), "--headers-only")
    assert p.returncode == 0 and p.stdout.strip().endswith(f"{N_TRAIN} records ok (headers only)")


def test_im2rec_bad_arguments(conv, tmp_path):
    src = conv[0]
    for flag, value in (("--quality", 0), ("--quality", 101), ("--quality", "high"),
                        ("--resize", -1), ("--workers", 0),
                        # a process count past 8 per core is a typo, not a pool to fork
                        ("--workers", 8 * (os.cpu_count() or 1) + 1), ("--workers", 100000)):
        p = yasgd("data", "im2rec", src, tmp_path / "o", flag, value)
        assert p.returncode == 2 and "Traceback" not in p.stderr
        lines = errors(p)
        assert len(lines) == 1 and flag in lines[0], p.stderr
    assert not os.path.exists(tmp_path / "o")
    for value in (0, 8 * (os.cpu_count() or 1) + 1):
        p = yasgd("data", "verify", os.path.join(conv[1], "train"), "--threads", value)
        assert p.returncode == 2 and p.stdout == ""
        assert len(errors(p)) == 1 and "argument --threads: " in errors(p)[0], p.stderr
    with pytest.raises(UsageError, match="--quality must be 1..100"):  # the library checks too
        im2rec.convert(src, str(tmp_path / "o"), quality=0, progress=False)
    most = 8 * (os.cpu_count() or 1)
    for workers in (0, most + 1):
        with pytest.raises(UsageError, match=fr"--workers must be in \[1, {most}\] \(8 per CPU "
                                             fr"core\), got {workers}$"):
            im2rec.convert(src, str(tmp_path / "o"), workers=workers, progress=False)
    assert not os.path.exists(tmp_path / "o")


def test_im2rec_resize_past_what_opencv_decodes(conv, tmp_path):
    """--resize beyond a square image of MAX_PIXELS is one error line before any work; an
    image whose aspect ratio would take it past MAX_PIXELS, or a side past JPEG's 65,535, at
    a legal --resize is skipped with its reason, before anything is allocated for it."""
    assert im2rec.MAX_RESIZE ** 2 <= im2rec.MAX_PIXELS < (im2rec.MAX_RESIZE + 1) ** 2
    for value in (im2rec.MAX_RESIZE + 1, 100000):
        assert_usage_error(yasgd("data", "im2rec", conv[0], tmp_path / "o", "--resize", value),
                           "--resize must be in [0, 32768]", str(value))
    assert not os.path.exists(tmp_path / "o")
    thin = str(tmp_path / "thin.png")
    assert cv2.imwrite(thin, np.full((1, 40000, 3), 128, np.uint8))
    payload, why = im2rec._encode((thin, im2rec.MAX_RESIZE, 90))
    assert payload is None
    assert why == ("resized from 40000x1 to 1310720000x32768 it would have more than "
                   "1,073,741,824 pixels, the most OpenCV decodes")
    payload, why = im2rec._encode((thin, 2, 90))
    assert payload is None
    assert why == ("resized from 40000x1 to 80000x2 it would have a side longer than 65,535 "
                   "pixels, the most a JPEG holds")
    payload, why = im2rec._encode((thin, 1, 90))    # within both limits: re-encoded as it is
    assert why == "" and cv2.imdecode(np.frombuffer(payload, np.uint8), 1).shape == (1, 40000, 3)


def test_an_opencv_error_is_named_without_its_source_location():
    """The reason a skipped image gives for an OpenCV error: its kind and message, one line."""
    with pytest.raises(cv2.error) as e:
        cv2.resize(np.zeros((0, 0, 3), np.uint8), (1, 1))
    assert im2rec._cv_reason(e.value) == "Assertion failed: !ssize.empty()"


def test_im2rec_bad_paths(conv, tmp_path):
    src = conv[0]
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert_usage_error(yasgd("data", "im2rec", src, afile), str(afile), "existing file")
    assert_usage_error(yasgd("data", "im2rec", src, afile / "sub"), str(afile), "is a file")
    os.makedirs(tmp_path / "out" / "train.rec")
    assert_usage_error(yasgd("data", "im2rec", src, tmp_path / "out"), "train.rec is a folder")
    os.makedirs(tmp_path / "out2" / "val.idx.part")          # the name an output is written under
    assert_usage_error(yasgd("data", "im2rec", src, tmp_path / "out2"),
                       "val.idx.part is a folder")
    assert_usage_error(yasgd("data", "im2rec", tmp_path / "nowhere", tmp_path / "o"),
                       "nowhere does not exist")
    os.makedirs(tmp_path / "flat" / "images")
    assert_usage_error(yasgd("data", "im2rec", tmp_path / "flat", tmp_path / "o"),
                       os.path.join(str(tmp_path / "flat"), "train"), "is missing")
    assert not os.path.exists(tmp_path / "o")  # nothing created on a usage error


def test_im2rec_class_with_only_bad_images(tmp_path):
    src = make_imagenet_folder(str(tmp_path / "src"), 2, 1, sizes=(32, 40), num_classes=2)
    folder = os.path.join(src, "train", wnid(1))
    for name in os.listdir(folder):
        open(os.path.join(folder, name), "wb").close()
    with pytest.raises(UsageError, match=f"every image of class folder {folder} was skipped"):
        im2rec.convert(src, str(tmp_path / "o"), resize=32, workers=1, progress=False)
    assert not [n for n in os.listdir(tmp_path / "o") if n.endswith(".part")]


def test_im2rec_names_every_entry_named_as_an_image_that_is_no_file(tmp_path):
    """A broken link, a folder and a pipe named like images are each skipped with a warning
    naming them and why (a pipe is never opened: the read would wait for a writer)."""
    src = make_imagenet_folder(str(tmp_path / "src"), 2, 1, sizes=(32, 40), num_classes=2)
    folder = os.path.join(src, "train", wnid(0))
    link, sub, pipe = (os.path.join(folder, n) for n in ("gone.JPEG", "sub.jpg", "pipe.png"))
    os.symlink(str(tmp_path / "missing.JPEG"), link)
    os.mkdir(sub)
    os.mkfifo(pipe)
    p = yasgd("data", "im2rec", src, tmp_path / "o", "--resize", 32, "--workers", 2,
              "--no-progress")
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    warnings = sorted(ln for ln in p.stderr.splitlines() if ln.startswith("yasgd: warning: "))
    assert warnings == sorted([
        f"yasgd: warning: im2rec: skipped {link}: it is a link to {tmp_path / 'missing.JPEG'}, "
        "which cannot be followed (No such file or directory)",
        f"yasgd: warning: im2rec: skipped {sub}: it is a directory, not a file",
        f"yasgd: warning: im2rec: skipped {pipe}: it is a pipe, not a file"]), p.stderr
    summary = json.loads(p.stdout)
    assert summary["train"]["records"] == 4 and summary["train"]["skipped"] == 3
    assert sorted(summary["train"]["skipped_files"]) == sorted([link, sub, pipe])


def tree(root):
    """Every entry under ``root``: relative path -> its bytes, link target or None (a folder)."""
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(folder, name)
            found[os.path.relpath(p, root)] = (
                os.readlink(p) if os.path.islink(p) else None if os.path.isdir(p) else
                open(p, "rb").read())
    return found


def test_im2rec_output_folder_in_the_source(tmp_path):
    """An output folder that is the source folder or lies inside it - as typed, through a
    symlink or ``..`` - is one error line naming both, before anything is written (the
    outputs would become part of the input: ``out`` a class folder of train/). The source
    inside the output folder is fine: the outputs are files directly in it."""
    src = make_imagenet_folder(str(tmp_path / "src"), 2, 1, sizes=(32, 40), num_classes=2)
    link = str(tmp_path / "link")
    os.symlink(src, link)
    os.makedirs(tmp_path / "other")
    before, beside = tree(src), sorted(os.listdir(tmp_path))
    for given, dst, where in (
            (src, src, "is the"), (src, os.path.join(src, "train", "out"), "lies inside"),
            (src, os.path.join(src, "out"), "lies inside"), (src, link, "is the"),
            (src, os.path.join(link, "val", "out"), "lies inside"),
            (src, os.path.join(tmp_path, "other", "..", "src", "train"), "lies inside"),
            (link, os.path.join(src, "train", wnid(0), "out"), "lies inside")):
        assert_usage_error(yasgd("data", "im2rec", given, dst, "--workers", 1, "--no-progress"),
                           f"im2rec: output folder {dst} {where} source folder {given}: the "
                           "output would become part of the input")
        assert tree(src) == before and sorted(os.listdir(tmp_path)) == beside
    p = yasgd("data", "im2rec", src, tmp_path, "--resize", 32, "--workers", 1, "--no-progress")
    assert p.returncode == 0, p.stderr
    assert tree(src) == before
    assert sorted(os.listdir(tmp_path)) == sorted(beside + list(im2rec.OUTPUTS))


def test_im2rec_class_name_that_classes_txt_cannot_hold(tmp_path):
    """A class folder whose name would not read back from classes.txt (a tab, a line break,
    a byte the locale's encoding cannot write) is one error line naming it, escaped, before
    any image is converted; the rule is the reader's: every other name round-trips."""
    for name in ("n 1 ", "n\x0b1", "n\x851", "n\u20281", "n\xe91", "n\x001"):
        outputs.write_text(str(tmp_path / "classes.txt"), f"0\t{name}\n1\tz\n")
        assert read_classes(str(tmp_path / "classes.txt")) == [name, "z"]
        assert im2rec._name_problem(name) == ""
    bad = ("n0000\n0001", "n0000\r0001", "n0000\t0001", "n00000001\r",
           os.fsdecode(b"n0000\xff0001"))
    for i, name in enumerate(bad):
        try:
            outputs.write_text(str(tmp_path / "classes.txt"), f"0\t{name}\n1\tz\n")
            assert read_classes(str(tmp_path / "classes.txt")) != [name, "z"]
        except (RecordIOError, UnicodeEncodeError):
            pass
        assert im2rec._name_problem(name) != ""
        src = make_imagenet_folder(str(tmp_path / f"src{i}"), 2, 1, sizes=(32, 40),
                                   num_classes=2)
        for split in ("train", "val"):
            os.rename(os.path.join(src, split, wnid(1)), os.path.join(src, split, name))
        before, dst = tree(src), str(tmp_path / f"out{i}")
        line = assert_usage_error(
            yasgd("data", "im2rec", src, dst, "--workers", 1, "--no-progress"),
            f"im2rec: class folder {name!r} in {os.path.join(src, 'train')} cannot be named "
            "in classes.txt", "rename it")
        assert ("a tab or a line break" if i < 4 else "cannot write") in line
        assert tree(src) == before and not os.path.exists(dst)


# -- verify: damaged records (exit 1) ------------------------------------------------
def _entropy_positions(jpeg: bytes, count: int):
    """``count`` positions inside the entropy-coded data of a baseline JPEG whose bytes can
    be changed without creating or breaking a marker (byte < 0xF0, no 0xFF before it)."""
    sos = jpeg.index(b"\xff\xda")
    start = sos + 2 + int.from_bytes(jpeg[sos + 2:sos + 4], "big")
    end = len(jpeg) - 2  # the EOI marker
    mid = (start + end) // 2
    pos = [j for j in range(mid, end) if jpeg[j] < 0xF0 and jpeg[j - 1] != 0xFF]
    assert len(pos) >= count
    return pos[:count]


def test_verify_finds_flipped_bytes_in_a_jpeg_that_still_decodes(conv, tmp_path):
    prefix = copy_rec(conv[1], tmp_path)
    rf = RecordFile(prefix)
    k = 7
    record = rf.read_record(k)
    payload = rf.read(k)[2]
    at = int(rf.offsets[k]) + 8 + 24  # RecordIO framing, IRHeader, then the JPEG
    with open(prefix + ".rec", "rb") as f:
        f.seek(at)
        assert f.read(len(payload)) == payload and record[24:] == payload
    damaged = bytearray(payload)
    for j in _entropy_positions(payload, 32):
        damaged[j] ^= 0x0F
    before = cv2.imdecode(np.frombuffer(payload, np.uint8), cv2.IMREAD_COLOR)
    after = cv2.imdecode(np.frombuffer(bytes(damaged), np.uint8), cv2.IMREAD_COLOR)
    assert after is not None and after.shape == before.shape  # still decodes ...
    assert (after != before).any()                            # ... to other pixels
    with open(prefix + ".rec", "r+b") as f:
        f.seek(at)
        f.write(bytes(damaged))
    del rf
    p = yasgd("data", "verify", prefix)
    assert p.returncode == 1, p.stderr
    lines = errors(p)
    assert len(lines) == 1 and lines[0].startswith("yasgd: error: ")
    assert f"train.rec: 1 of {N_TRAIN} records damaged; first: record {k} (key {k}, byte " in \
        lines[0] and "differ from those im2rec wrote" in lines[0]
    assert "does not decode" not in lines[0]
    # the fast check reads headers only, so it cannot see it; nor can a full check without
    # the digest file (one warning line says so)
    assert yasgd("data", "verify", prefix, "--headers-only").returncode == 0
    os.remove(prefix + ".digests")
    p = yasgd("data", "verify", prefix)
    assert p.returncode == 0 and p.stdout.strip().endswith(f"{N_TRAIN} records ok")
    warnings = p.stderr.splitlines()
    assert all(w.startswith("yasgd: warning: ") for w in warnings) and len(warnings) <= 2
    assert "train.digests: missing" in warnings[0]
    os.mkfifo(prefix + ".digests")      # never opened: named as what it is
    p = yasgd("data", "verify", prefix)
    assert p.returncode == 0 and p.stdout.strip().endswith(f"{N_TRAIN} records ok")
    assert "train.digests: not a regular file, so bytes changed" in p.stderr.splitlines()[0]


def test_verify_finds_a_changed_label_and_counts_bad_records(conv, tmp_path):
    prefix = copy_rec(conv[1], tmp_path)
    rf = RecordFile(prefix)
    with open(prefix + ".rec", "r+b") as f:  # IRHeader label (float32 at byte 4) of records 3, 9
        for k in (9, 3):
            f.seek(int(rf.offsets[k]) + 8 + 4)
            f.write(np.float32((rf.read(k)[0] + 1) % CLASSES).tobytes())
    with pytest.raises(im2rec.DamagedRecords, match=r"2 of 18 records damaged; first: record 3 ") \
            as e:
        im2rec.verify(prefix)
    assert (e.value.count, e.value.first) == (2, 3)


# -- verify: files that cannot be checked (exit 2) --------------------------------------
def test_verify_binary_idx_and_offset_past_the_end(conv, tmp_path):
    prefix = copy_rec(conv[1], tmp_path)
    lines = open(prefix + ".idx").read().splitlines()
    with open(prefix + ".idx", "wb") as f:
        f.write(bytes(range(256)) * 8)
    assert_usage_error(yasgd("data", "verify", prefix), "train.idx: line 1 is binary")
    with open(prefix + ".idx", "w") as f:
        f.write("\n".join(lines[:-1] + [lines[-1].split("\t")[0] + "\t" + str(10 ** 12)]) + "\n")
    assert_usage_error(yasgd("data", "verify", prefix), f"train.idx line {len(lines)} puts record",
                       "train.rec: truncated", str(10 ** 12))
    with open(prefix + ".idx", "w") as f:
        f.write("\n".join(lines[:4] + ["4\t" + "9" * 30] + lines[5:]) + "\n")
    assert_usage_error(yasgd("data", "verify", prefix), "train.idx: line 5: offset 999",
                       "out of range")


@pytest.mark.parametrize("edit,message", [
    (lambda ls: ls[:2] + ["x\t12"] + ls[3:], r"train\.idx: line 3 is not '<key><TAB><offset>'"),
    (lambda ls: ls[:2] + ["2 12 7"] + ls[3:], r"line 3 is not '<key><TAB><offset>'"),
    (lambda ls: ls[:2] + ["-2\t" + ls[2].split()[1]] + ls[3:], r"line 3: negative key -2"),
    (lambda ls: ls[:1] + ["0\t" + ls[1].split()[1]] + ls[2:], r"lines 1 and 2 both give key 0"),
    (lambda ls: ls[:5] + ["5\t" + ls[1].split()[1]] + ls[6:],
     r"lines 2 and 6 both put a record at byte \d+"),
    (lambda ls: [], r"train\.idx: holds no records"),
])
def test_garbage_idx(conv, tmp_path, edit, message):
    prefix = copy_rec(conv[1], tmp_path)
    lines = open(prefix + ".idx").read().splitlines()
    with open(prefix + ".idx", "w") as f:
        f.write("".join(ln + "\n" for ln in edit(lines)))
    with pytest.raises(RecordIOError, match=message):
        im2rec.verify(prefix)


def test_idx_order_and_blank_lines_are_accepted(conv, tmp_path):
    """Offsets need not increase; blank lines are skipped (MXNet's format allows both)."""
    prefix = copy_rec(conv[1], tmp_path)
    lines = open(prefix + ".idx").read().splitlines()
    with open(prefix + ".idx", "w") as f:
        f.write("\n".join(lines[::-1][:5] + ["", "  "] + lines[::-1][5:]) + "\n")
    assert im2rec.verify(prefix) == N_TRAIN


@pytest.mark.parametrize("mode", [[], ["--headers-only"]], ids=["full", "headers-only"])
def test_verify_finds_bytes_no_record_of_the_index_holds(conv, tmp_path, mode):
    # every record sound, yet part of the .rec is read by no loader: bytes appended to it, or
    # an index that lacks a record (its last, one inside); with the digests gone, as in data
    # from MXNet's im2rec, the index is all there is to go by
    prefix = copy_rec(conv[1], tmp_path)
    os.remove(prefix + ".digests")
    lines = open(prefix + ".idx").read().splitlines()
    size = os.path.getsize(prefix + ".rec")
    offsets = sorted(int(ln.split()[1]) for ln in lines)
    with open(prefix + ".rec", "ab") as f:
        f.write(b"\0" * 12)
    p = yasgd("data", "verify", prefix, *mode)
    assert_usage_error(p, "train.rec: 12 bytes in 1 span(s) lie outside every record",
                       f"from byte {size},", "no loader reads them")
    with open(prefix + ".rec", "r+b") as f:
        f.truncate(size)
    for dropped in (max(lines, key=lambda ln: int(ln.split()[1])), lines[7]):
        with open(prefix + ".idx", "w") as f:
            f.write("".join(ln + "\n" for ln in lines if ln != dropped))
        at = int(dropped.split()[1])
        span = (offsets + [size])[offsets.index(at) + 1] - at
        assert_usage_error(yasgd("data", "verify", prefix, *mode),
                           f"{span:,} bytes in 1 span(s)", f"from byte {at},")
    with open(prefix + ".idx", "w") as f:      # the whole index again: sound
        f.write("".join(ln + "\n" for ln in lines))
    assert im2rec.verify(prefix) == N_TRAIN


def test_verify_missing_files(conv, tmp_path):
    prefix = copy_rec(conv[1], tmp_path)
    os.remove(prefix + ".rec")
    assert_usage_error(yasgd("data", "verify", prefix), "train.rec: missing")
    assert_usage_error(yasgd("data", "verify", tmp_path / "rec"), "is a folder",
                       "train")
    # a pipe in the place of either file is named as what it is, and never opened
    os.mkfifo(prefix + ".rec")
    assert_usage_error(yasgd("data", "verify", prefix), "train.rec: not a regular file")
    os.remove(prefix + ".rec")
    shutil.copy(os.path.join(conv[1], "train.rec"), prefix + ".rec")
    os.remove(prefix + ".idx")
    os.mkfifo(prefix + ".idx")
    assert_usage_error(yasgd("data", "verify", prefix), "train.idx: not a regular file: the "
                       "index of")


def test_classes_txt_that_is_no_regular_file_is_named_as_what_it_is(tmp_path):
    # never opened: a pipe would wait for a writer for good
    path = tmp_path / "classes.txt"
    with pytest.raises(RecordIOError, match="classes.txt: missing \\(class index file"):
        read_classes(str(path))
    os.mkfifo(path)
    with pytest.raises(RecordIOError, match="classes.txt: not a regular file \\(class index"):
        read_classes(str(path))
    os.remove(path)
    path.mkdir()
    with pytest.raises(RecordIOError, match="classes.txt: not a regular file"):
        read_classes(str(path))


def test_damaged_digest_file(conv, tmp_path):
    prefix = copy_rec(conv[1], tmp_path)
    path = prefix + ".digests"
    lines = open(path).read().splitlines()
    with open(path, "w") as f:
        f.write("\n".join(lines[:3] + ["nonsense"] + lines[4:]) + "\n")
    with pytest.raises(RecordIOError, match=r"train\.digests: line 4 is not '<key>"):
        im2rec.verify(prefix)
    key, offset, rest = lines[4].split("\t", 2)
    with open(path, "w") as f:
        f.write("\n".join(lines[:4] + [f"{key}\t{int(offset) + 4}\t{rest}"] + lines[5:]))
    with pytest.raises(RecordIOError, match=r"line 5 puts key 3 at byte .*another conversion"):
        im2rec.verify(prefix)
    with open(path, "w") as f:
        f.write("\n".join(lines[:-2]))
    p = yasgd("data", "verify", prefix)
    assert_usage_error(p, "train.digests: no digest of 2 of the 18 records")
