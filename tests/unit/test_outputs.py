"""``yasgd.outputs``: a file is replaced only when whole, the files of a set only together,
and a stop signal, in the middle of the writes or of the renames, leaves the old files or
the complete new set. The signal cases run in a fresh interpreter with yasgd's own stop
handlers and real signals; the figure cases write real PNG and SVG files with matplotlib.
"""
import ast
import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import threading

import pytest

from yasgd import outputs


def _old(folder, *names):
    for n in names:
        (folder / n).write_text(f"old {n}\n")


def _listing(folder):
    return sorted(os.listdir(folder))


def _set(folder):
    """{name: text} of every file in ``folder``, hidden ones included."""
    return {n: (folder / n).read_text() for n in _listing(folder)}


def test_the_temporary_is_hidden_beside_its_target_with_its_suffix(tmp_path):
    t = outputs.temporary(str(tmp_path / "bench_x.png"))
    assert os.path.dirname(t) == str(tmp_path)
    host = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())
    assert os.path.basename(t) == f".bench_x.{host}-{os.getpid()}.tmp.png"


def test_temporaries_left_by_processes_killed_outright_go_with_the_next_write(tmp_path):
    ended = subprocess.Popen(["true"])
    ended.wait()
    host = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())
    dead = f".r.{host}-{ended.pid}.tmp.json"       # its process no longer runs
    live = f".r.{host}-{os.getppid()}.tmp.json"   # a process still writing it
    elsewhere = f".r.other-node-{ended.pid}.tmp.json"  # another node's, in a shared folder
    other = f".q.{host}-{ended.pid}.tmp.json"      # another target's
    for n in (dead, live, elsewhere, other):
        (tmp_path / n).write_text("left\n")
    outputs.write_json(str(tmp_path / "r.json"), [1])
    assert _listing(tmp_path) == sorted([live, elsewhere, other, "r.json"])


def test_a_file_replaces_the_old_one_only_once_whole(tmp_path):
    _old(tmp_path, "r.json")
    with pytest.raises(RuntimeError):
        with outputs.file(str(tmp_path / "r.json")) as tmp:
            with open(tmp, "w") as f:
                f.write('{"half": ')
            raise RuntimeError("the writer failed half-way")
    assert (tmp_path / "r.json").read_text() == "old r.json\n"
    assert _listing(tmp_path) == ["r.json"]
    outputs.write_json(str(tmp_path / "r.json"), {"new": 1})
    assert json.loads((tmp_path / "r.json").read_text()) == {"new": 1}
    assert _listing(tmp_path) == ["r.json"]


def test_an_object_that_cannot_be_serialised_writes_nothing(tmp_path):
    _old(tmp_path, "r.json")
    with pytest.raises(TypeError):
        outputs.write_json(str(tmp_path / "r.json"), {"x": object()})
    assert (tmp_path / "r.json").read_text() == "old r.json\n"
    assert _listing(tmp_path) == ["r.json"]


def test_a_set_holds_only_the_files_its_own_thread_writes(tmp_path):
    """A bench's worker thread writes a run's spec (its process reads it at once) while the
    main thread writes a report inside a set: the spec is on disk when its write returns,
    the report's files when the set ends; a set open in another thread holds nothing."""
    inside, written, seen = threading.Event(), threading.Event(), {}

    def worker():
        inside.wait(10)
        outputs.write_json(str(tmp_path / "run.spec.json"), {"overrides": []})
        seen["spec"] = (tmp_path / "run.spec.json").read_text()
        with outputs.together():            # the worker's own set, beside the main one
            outputs.write_text(str(tmp_path / "w.txt"), "w\n")
            seen["w inside"] = (tmp_path / "w.txt").exists()
        seen["w after"] = (tmp_path / "w.txt").read_text()
        written.set()

    t = threading.Thread(target=worker)
    t.start()
    with outputs.together():
        outputs.write_text(str(tmp_path / "report.md"), "report\n")
        inside.set()
        assert written.wait(10)
        assert not (tmp_path / "report.md").exists()
    t.join(10)
    assert seen == {"spec": '{\n "overrides": []\n}\n', "w inside": False, "w after": "w\n"}
    assert (tmp_path / "report.md").read_text() == "report\n"
    assert _listing(tmp_path) == ["report.md", "run.spec.json", "w.txt"]


def test_a_set_replaces_its_old_files_only_all_together(tmp_path):
    _old(tmp_path, "a.json", "a.md")
    with pytest.raises(ValueError):
        with outputs.together():
            outputs.write_text(str(tmp_path / "a.json"), "new json\n")
            assert (tmp_path / "a.json").read_text() == "old a.json\n"
            raise ValueError("the table could not be made")
    assert [(tmp_path / n).read_text() for n in ("a.json", "a.md")] == ["old a.json\n",
                                                                          "old a.md\n"]
    assert _listing(tmp_path) == ["a.json", "a.md"]
    with outputs.together():
        outputs.write_text(str(tmp_path / "a.json"), "new json\n")
        outputs.write_text(str(tmp_path / "a.md"), "new md\n")
        outputs.write_text(str(tmp_path / "a.txt"), "new file\n")
        outputs.write_text(str(tmp_path / "a.md"), "newer md\n")  # the same file twice
        assert [n for n in _listing(tmp_path) if not n.startswith(".")] == ["a.json", "a.md"]
    assert [(tmp_path / n).read_text() for n in ("a.json", "a.md", "a.txt")] == [
        "new json\n", "newer md\n", "new file\n"]
    assert _listing(tmp_path) == ["a.json", "a.md", "a.txt"]


def test_a_nested_set_belongs_to_the_outermost(tmp_path):
    _old(tmp_path, "a", "b")
    with pytest.raises(KeyError):
        with outputs.together():
            with outputs.together():
                outputs.write_text(str(tmp_path / "a"), "new a\n")
            assert (tmp_path / "a").read_text() == "old a\n"
            outputs.write_text(str(tmp_path / "b"), "new b\n")
            raise KeyError("b")
    assert (tmp_path / "a").read_text() == "old a\n"
    assert _listing(tmp_path) == ["a", "b"]


def test_a_rename_that_fails_leaves_no_temporary(tmp_path):
    (tmp_path / "d").mkdir()   # a folder where a file is to go: the rename fails
    (tmp_path / "d" / "x").write_text("")
    with pytest.raises(OSError):
        with outputs.together():
            outputs.write_text(str(tmp_path / "d"), "text\n")
            outputs.write_text(str(tmp_path / "e"), "text\n")
    assert _listing(tmp_path) == ["d"]


def test_the_mode_of_the_replaced_file_is_kept(tmp_path):
    umask = os.umask(0o022)
    os.umask(umask)
    p = tmp_path / "s.sh"
    outputs.write_text(str(p), "new\n")
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o666 & ~umask
    os.chmod(p, 0o640)
    outputs.write_text(str(p), "newer\n")
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o640
    outputs.write_bytes(str(p), b"#!/bin/sh\n", mode=0o755)
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o755


def test_a_symbolic_link_is_written_through(tmp_path):
    (tmp_path / "real.md").write_text("old\n")
    os.symlink("real.md", tmp_path / "link.md")
    outputs.write_text(str(tmp_path / "link.md"), "new\n")
    assert os.path.islink(tmp_path / "link.md")
    assert (tmp_path / "real.md").read_text() == "new\n"


def test_a_pipe_is_written_into_not_replaced(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        outputs.write_text(str(fifo), "through the pipe\n")
        assert os.read(reader, 100) == b"through the pipe\n"
    finally:
        os.close(reader)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert _listing(tmp_path) == ["pipe"]


@pytest.mark.parametrize("suffix, magic", [(".png", b"\x89PNG\r\n\x1a\n"), (".svg", b"<?xml")])
def test_a_figure_is_written_in_the_format_of_its_suffix(suffix, magic, tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    target = str(tmp_path / f"plot{suffix}")
    assert outputs.save_figure(fig, target) == target
    plt.close(fig)
    assert (tmp_path / f"plot{suffix}").read_bytes().startswith(magic)
    assert _listing(tmp_path) == [f"plot{suffix}"]


def test_a_set_written_from_another_thread(tmp_path):
    _old(tmp_path, "a", "b")
    failed = []

    def write():
        try:
            with outputs.together():
                outputs.write_text(str(tmp_path / "a"), "new a\n")
                outputs.write_text(str(tmp_path / "b"), "new b\n")
        except BaseException as e:  # reported by the assertion below
            failed.append(e)

    t = threading.Thread(target=write)
    t.start()
    t.join()
    assert not failed
    assert [(tmp_path / n).read_text() for n in ("a", "b")] == ["new a\n", "new b\n"]


HEAD = """
import os, signal, sys, time
from yasgd import outputs, supervise
supervise.stop_by_unwinding()
folder = sys.argv[1]
def path(n):
    return os.path.join(folder, n)
"""


def hangup_as_in_a_terminal():
    """SIGHUP's default action in the child, also under ``nohup`` (whose ignored SIGHUP a
    child inherits, and yasgd then leaves ignored)."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _child(body, folder):
    """``body`` after HEAD in a fresh interpreter: (exit status, stdout, stderr)."""
    p = subprocess.run([sys.executable, "-c", HEAD + textwrap.dedent(body), str(folder)],
                       capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, OMP_NUM_THREADS="1"),
                       preexec_fn=hangup_as_in_a_terminal)
    return p.returncode, p.stdout, p.stderr


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_stop_in_the_middle_of_a_set_leaves_the_old_files(sig, tmp_path):
    _old(tmp_path, "r.json", "r.md", "r.png")
    rc, out, err = _child(f"""
        try:
            with outputs.together():
                outputs.write_text(path("r.json"), "new json")
                with outputs.file(path("r.png")) as tmp:
                    with open(tmp, "wb") as f:
                        f.write(b"half a figure")
                        os.kill(os.getpid(), signal.{sig})
                        time.sleep(5)
                        f.write(b"the rest")
                outputs.write_text(path("r.md"), "new md")
        except supervise.Stopped as e:
            print("stopped", e.signum)
    """, tmp_path)
    assert (rc, err) == (0, "")
    assert out.split() == ["stopped", str(getattr(signal, sig).value)]
    assert _set(tmp_path) == {"r.json": "old r.json\n", "r.md": "old r.md\n",
                              "r.png": "old r.png\n"}


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_stop_during_the_renames_takes_effect_once_the_set_is_complete(sig, tmp_path):
    # the signal arrives after the first of three renames, and the process runs Python
    # code before the next one (where a handler would raise): the set is still completed
    _old(tmp_path, "r.json", "r.md", "r.png")
    rc, out, err = _child(f"""
        replace = os.replace
        def replace_then_signal(src, dst):
            replace(src, dst)
            if dst.endswith("r.json"):
                os.kill(os.getpid(), signal.{sig})
                for _ in range(10 ** 6):
                    pass
        os.replace = replace_then_signal
        try:
            with outputs.together():
                for n in ("r.json", "r.md", "r.png"):
                    outputs.write_text(path(n), "new " + n)
            print("not stopped")
        except supervise.Stopped as e:
            print("stopped", e.signum)
    """, tmp_path)
    assert (rc, err) == (0, "")
    assert out.split() == ["stopped", str(getattr(signal, sig).value)]
    assert _set(tmp_path) == {"r.json": "new r.json", "r.md": "new r.md", "r.png": "new r.png"}


def test_the_handlers_are_put_back_after_a_set(tmp_path):
    rc, out, err = _child("""
        stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        before = [signal.getsignal(s) for s in stops]
        with outputs.together():
            outputs.write_text(path("a"), "a")
        print([signal.getsignal(s) for s in stops] == before)
    """, tmp_path)
    assert (rc, out, err) == (0, "True\n", "")


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: Modules that write files other than through yasgd.outputs, and why.
WRITE_THEIR_OWN = {
    "yasgd/outputs.py": "the mechanism itself",
    "yasgd/logging.py": "a run's logs, appended line by line as the run goes",
    "yasgd/bench/procs.py": "a timed process's log, written as it runs",
    "yasgd/bench/study_run.py": "a training run's log, written as it runs",
    "yasgd/bench/study_worker.py": "a run's result, through its own temporary and rename",
    "yasgd/bench/runcache.py": "the run cache, through its own temporary and rename",
    "yasgd/checkpoint_format.py": "a checkpoint's files, in a folder renamed when whole",
    "yasgd/data/im2rec.py": "records streamed into .part files, renamed when whole",
    "yasgd/data/testdata.py": "test images into a folder it creates",
    "yasgd/data/verify.py": "a duplicate of the standard error stream",
    "yasgd/ops/build.py": "the linker script of the operator library's build",
    "yasgd/writable.py": "the probe of whether a file can be written",
    "yasgd/train.py": "the probe of the run folder, and its config and provenance at start",
    "yasgd/config.py": "a run's resolved config, into the run folder at start",
    "yasgd/provenance.py": "a run's provenance, into the run folder at start",
    "yasgd/faults.py": "the file a job script reads after a stop (its marker)",
}


def _writes(tree):
    """Line numbers of calls that write a file: open() for writing, json.dump, savefig."""
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        if name in ("open", "fdopen"):
            mode = node.args[1] if len(node.args) > 1 else next(
                (k.value for k in node.keywords if k.arg == "mode"), None)
            if isinstance(mode, ast.Constant) and set(str(mode.value)) & set("wax+"):
                out.append(node.lineno)
        elif name in ("savefig", "dump") and not (
                name == "dump" and isinstance(f, ast.Attribute)
                and getattr(f.value, "id", "") not in ("json", "yaml")):
            out.append(node.lineno)
    return sorted(out)


def test_the_finder_sees_each_kind_of_write():
    tree = ast.parse("open(p, 'w')\nopen(p, mode='ab')\nos.fdopen(fd, 'w')\njson.dump(x, f)\n"
                     "fig.savefig(p)\nopen(p)\nopen(p, 'rb')\npickle.dumps(x)\n")
    assert _writes(tree) == [1, 2, 3, 4, 5]


def test_every_other_module_writes_its_files_through_outputs():
    found = {}
    for folder, dirs, files in os.walk(os.path.join(ROOT, "yasgd")):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, ROOT)
                with open(path) as f:
                    lines = _writes(ast.parse(f.read()))
                if lines and rel not in WRITE_THEIR_OWN:
                    found[rel] = lines
    assert not found, f"files written other than through yasgd.outputs: {found}"
    idle = []
    for m in WRITE_THEIR_OWN:   # the allowance only shrinks
        path = os.path.join(ROOT, m)
        if not os.path.exists(path):
            idle.append(m)
            continue
        with open(path) as f:
            if not _writes(ast.parse(f.read())):
                idle.append(m)
    assert not idle, f"WRITE_THEIR_OWN names modules that write nothing: {idle}"
