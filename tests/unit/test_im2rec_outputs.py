"""`yasgd data im2rec`'s outputs as one set, the folders it cannot read, the links it cannot
follow, and the lines it writes about files: through the installed command, on real JPEGs."""
import hashlib
import json
import os

import cv2
import numpy as np
import pytest

from yasgd import UsageError
from yasgd.data import im2rec
from yasgd.data.im2rec_out import entries
from yasgd.data.recordio import RecordIOError, read_classes
from yasgd.data.testdata import make_imagenet_folder, wnid
from test_data_tools import assert_usage_error, yasgd


def _digests(folder):
    """name -> SHA-256 of every entry of ``folder`` (a link: its target's name)."""
    return {n: os.readlink(os.path.join(folder, n)) if os.path.islink(os.path.join(folder, n))
            else hashlib.sha256(open(os.path.join(folder, n), "rb").read()).hexdigest()
            for n in sorted(os.listdir(folder))}


@pytest.fixture
def earlier(tmp_path):
    """An output folder that holds a conversion of 2 classes."""
    src = make_imagenet_folder(str(tmp_path / "a"), 2, 1, sizes=(32, 40), num_classes=2)
    out = str(tmp_path / "out")
    im2rec.convert(src, out, resize=32, workers=1, progress=False)
    return out


def _val_spoilt(tmp_path, classes=3):
    """A source of ``classes`` classes whose every val image is empty: train converts, val
    fails."""
    src = make_imagenet_folder(str(tmp_path / "b"), 2, 1, sizes=(32, 40), num_classes=classes,
                               seed=1)
    for c in range(classes):
        folder = os.path.join(src, "val", wnid(c))
        for name in os.listdir(folder):
            open(os.path.join(folder, name), "wb").close()
    return src


def test_a_conversion_that_fails_in_val_leaves_the_earlier_set_whole(earlier, tmp_path):
    # train's files are complete before val starts; they replace the old ones only with
    # the rest of the set, so the old train.rec is never left beside another val.rec
    before = _digests(earlier)
    p = yasgd("data", "im2rec", _val_spoilt(tmp_path), earlier, "--resize", 32, "--workers", 1,
              "--no-progress")
    assert_usage_error(p, "im2rec: every image of val was skipped")
    assert _digests(earlier) == before
    p = yasgd("data", "verify", os.path.join(earlier, "train"))
    assert p.returncode == 0, p.stderr


def test_a_fresh_conversion_that_fails_in_val_leaves_no_output(tmp_path):
    out = tmp_path / "fresh"
    with pytest.raises(UsageError, match="every image of val was skipped"):
        im2rec.convert(_val_spoilt(tmp_path), str(out), resize=32, workers=1, progress=False)
    assert os.listdir(out) == []


def test_a_link_at_a_part_name_is_replaced_not_written_through(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    for name in ("train.rec.part", "val.idx.part"):
        os.symlink(victim, out / name)
    src = make_imagenet_folder(str(tmp_path / "a"), 2, 1, sizes=(32, 40), num_classes=2)
    p = yasgd("data", "im2rec", src, out, "--resize", 32, "--workers", 1, "--no-progress")
    assert p.returncode == 0, p.stderr
    assert victim.read_text() == "precious"
    assert sorted(os.listdir(out)) == sorted(im2rec.OUTPUTS)
    assert not any(os.path.islink(out / n) for n in im2rec.OUTPUTS)


@pytest.mark.parametrize("target", ["loop", "/nonexistent-yasgd-target"])
def test_a_class_entry_that_is_a_link_not_to_be_followed_is_named(tmp_path, target):
    # a dangling link or a loop among the class folders: a class or not cannot be told
    src = make_imagenet_folder(str(tmp_path / "a"), 2, 1, sizes=(32, 40), num_classes=2)
    link = os.path.join(src, "train", "loop")
    os.symlink(target, link)
    why = "Too many levels of symbolic links" if target == "loop" else "No such file"
    assert_usage_error(yasgd("data", "im2rec", src, tmp_path / "o"),
                       f"im2rec: {link} is a link to {target}, which cannot be followed",
                       why)
    assert not os.path.exists(tmp_path / "o")


def test_source_and_output_links_that_cannot_be_followed_are_named_as_links(tmp_path):
    src = make_imagenet_folder(str(tmp_path / "a"), 2, 1, sizes=(32, 40), num_classes=2)
    os.symlink("/nonexistent-yasgd-target", tmp_path / "dout")
    assert_usage_error(yasgd("data", "im2rec", src, tmp_path / "dout"),
                       f"output folder {tmp_path / 'dout'} is a link to "
                       "/nonexistent-yasgd-target, which cannot be followed")
    os.symlink("sl", tmp_path / "sl")
    assert_usage_error(yasgd("data", "im2rec", tmp_path / "sl", tmp_path / "o"),
                       f"source folder {tmp_path / 'sl'} is a link to sl, which cannot be "
                       "followed (Too many levels of symbolic links)")
    os.remove(os.path.join(src, "val", wnid(0), os.listdir(os.path.join(src, "val",
                                                                         wnid(0)))[0]))
    open(os.path.join(src, "val.txt"), "w").close()
    os.rename(os.path.join(src, "val"), os.path.join(src, "v"))
    os.rename(os.path.join(src, "val.txt"), os.path.join(src, "val"))
    assert_usage_error(yasgd("data", "im2rec", src, tmp_path / "o"),
                       f"{os.path.join(src, 'val')} is a file, not a folder")


def test_a_folder_that_cannot_be_read_is_one_line(tmp_path):
    # the call the listing makes for every folder: what os.scandir raises becomes the line
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(UsageError, match=f"im2rec: cannot read folder {afile} \\(Not a dir"):
        entries(str(afile))


def test_a_file_name_with_a_line_break_stays_on_its_warning_line(tmp_path):
    src = make_imagenet_folder(str(tmp_path / "a"), 2, 1, sizes=(32, 40), num_classes=2)
    evil = os.path.join(src, "train", wnid(0), "evil\nyasgd: error: fake.JPEG")
    open(evil, "wb").close()
    p = yasgd("data", "im2rec", src, tmp_path / "o", "--resize", 32, "--workers", 1,
              "--no-progress")
    assert p.returncode == 0, p.stderr
    shown = evil.replace("\n", "\\n")
    assert p.stderr.splitlines() == [
        f"yasgd: warning: im2rec: skipped {shown}: it is empty (0 bytes)"], p.stderr


def test_a_jpeg_the_decoder_repairs_is_named_and_counted(tmp_path):
    # libjpeg repairs a damaged scan and says so on fd 2, naming no file; im2rec names it
    src = make_imagenet_folder(str(tmp_path / "a"), 2, 1, sizes=(32, 40), num_classes=2)
    img = (np.random.RandomState(0).rand(200, 300, 3) * 255).astype(np.uint8)
    data = bytearray(cv2.imencode(".jpg", img)[1].tobytes())
    data[1000:1100] = b"\xaa" * 100
    assert cv2.imdecode(np.frombuffer(bytes(data), np.uint8), cv2.IMREAD_COLOR) is not None
    bad = os.path.join(src, "train", wnid(1), "garbled.JPEG")
    open(bad, "wb").write(bytes(data))
    for workers in (1, 2):
        p = yasgd("data", "im2rec", src, tmp_path / f"o{workers}", "--resize", 16,
                  "--workers", workers, "--no-progress")
        assert p.returncode == 0, p.stderr
        lines = p.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(
            f"yasgd: warning: im2rec: the image decoder repaired {bad}, which is kept "
            "(1 message(s), the first: 'Corrupt JPEG data: "), p.stderr
        summary = json.loads(p.stdout)["train"]
        assert (summary["repaired"], summary["repaired_files"]) == (1, [bad])
        assert summary["records"] == 5 and summary["skipped"] == 0


def test_classes_txt_not_in_the_locales_encoding_is_one_line(tmp_path):
    path = tmp_path / "classes.txt"
    path.write_bytes(b"0\tn01\n1\t\xff\xfe\n")
    with pytest.raises(RecordIOError, match=r"classes.txt: not text in utf-8 \(byte 8: "):
        read_classes(str(path))
    # universal newlines, as it is written; no other character breaks a line (im2rec refuses
    # only a tab, "\n" and "\r" in a class name)
    path.write_bytes("0\tn01\r\n1\tn\x85x\u2028y\n".encode())
    assert read_classes(str(path)) == ["n01", "n\x85x\u2028y"]


@pytest.mark.parametrize("index", ["\u00b9", "\u0661", "1_", "+1", "0x1"])
def test_a_classes_txt_index_in_other_than_ascii_digits_is_one_line(tmp_path, index):
    # "\u00b9" (a superscript one) passes str.isdigit and fails int()
    path = tmp_path / "classes.txt"
    path.write_text(f"0\tn00000000\n{index}\tn00000001\n")
    with pytest.raises(RecordIOError, match=r"classes.txt: line 2 is not '1<TAB><class name>'"):
        read_classes(str(path))
    path.write_text("0\tn00000000\n 1 \tn00000001\n")
    assert read_classes(str(path)) == ["n00000000", "n00000001"]
