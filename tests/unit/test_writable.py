"""yasgd.writable: whether an output can be written, found by trying on real files and
folders (procfs for a file system that takes no new entry, even for root)."""
import os
import subprocess
import sys

import pytest

from yasgd import writable

YASGD = os.path.join(os.path.dirname(sys.executable), "yasgd")
PROC = os.path.isdir("/proc/self")


def _left(folder):
    return [n for n in os.listdir(folder) if n.startswith(".yasgd-probe-")]


def test_dir_problem_tries_and_leaves_nothing(tmp_path):
    assert writable.dir_problem(str(tmp_path / "new" / "sub")) is None
    assert writable.dir_problem(str(tmp_path)) is None
    assert not (tmp_path / "new").exists() and _left(tmp_path) == []
    (tmp_path / "plain").write_text("x")
    assert writable.dir_problem(str(tmp_path / "plain" / "sub")) == \
        f"{tmp_path / 'plain'} is not a directory"
    if PROC:
        assert writable.dir_problem("/proc/yasgd-none/sub").startswith("/proc is not writable (")


def test_file_problem_tries_and_changes_nothing(tmp_path):
    f = tmp_path / "kept.json"
    f.write_text("{}")
    before = os.stat(f)
    assert writable.file_problem(str(f)) is None
    assert writable.file_problem(str(tmp_path / "new.json")) is None
    after = os.stat(f)
    assert f.read_text() == "{}" and after.st_mtime_ns == before.st_mtime_ns
    assert not (tmp_path / "new.json").exists() and _left(tmp_path) == []
    os.mkfifo(tmp_path / "fifo")
    assert writable.file_problem(str(tmp_path / "fifo")).endswith("is not a regular file")
    assert writable.file_problem(str(tmp_path / "d" / "x.json")) == \
        f"directory {tmp_path / 'd'} does not exist"
    if PROC:
        assert writable.file_problem("/proc/yasgd-none.json").startswith("/proc is not writable")


@pytest.mark.skipif(os.geteuid() != 0 or not PROC, reason="the permission bits pass only for root")
def test_root_is_told_of_a_folder_that_takes_nothing():
    # os.access says yes for root; the try says no
    assert os.access("/proc", os.W_OK)
    assert writable.dir_problem("/proc/x") and writable.file_problem("/proc/x.json")


@pytest.mark.skipif(not PROC, reason="needs procfs")
@pytest.mark.parametrize("args,message", [
    (["simulate", "--json", "/proc/yasgd-none.json"], "--json /proc/yasgd-none.json: /proc is "
                                                      "not writable"),
    (["simulate", "--plot", "/proc/yasgd-none.png"], "--plot /proc/yasgd-none.png: /proc is "
                                                     "not writable"),
    (["provenance", "/proc/yasgd-none"], "provenance RUN_DIR /proc/yasgd-none must be a "
                                         "writable directory"),
    (["data", "im2rec", "{src}", "/proc/yasgd-none"], "im2rec: cannot write output folder "
                                                      "/proc/yasgd-none: /proc is not writable"),
])
def test_every_output_option_is_one_line_where_nothing_can_be_made(tmp_path, args, message):
    for split in ("train", "val"):
        (tmp_path / "src" / split / "a").mkdir(parents=True)
    args = [a.format(src=tmp_path / "src") for a in args]
    p = subprocess.run([YASGD, *args], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stdout == "", p.stdout + p.stderr
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("yasgd: error: " + message), p.stderr
