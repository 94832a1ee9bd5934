"""yasgd.writable: whether an output can be written, found by trying on real files and
folders (procfs for a file system that takes no new entry, even for root)."""
import errno
import os
import subprocess
import sys

import pytest

from yasgd import outputs, writable

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


def test_file_problem_replaces_only_an_earlier_output(tmp_path):
    ours = (lambda head: head.startswith(b"#!/bin/bash\n# made by us"), "one of ours")
    mine = tmp_path / "mine.sh"
    mine.write_text("#!/bin/bash\n# made by us\necho\n")
    empty = tmp_path / "empty.sh"
    empty.write_text("")
    other = tmp_path / "config.yaml"
    other.write_text("train: {epochs: 3}\n")
    assert writable.file_problem(str(mine), *ours) is None
    assert writable.file_problem(str(empty), *ours) is None      # nothing to lose
    assert writable.file_problem(str(tmp_path / "new.sh"), *ours) is None
    assert writable.file_problem(str(other), *ours) == (
        f"{other} exists and is not one of ours; writing would lose it (remove it or name "
        "another file)")
    assert writable.file_problem(str(other)) is None             # no test: any file goes
    assert other.read_text() == "train: {epochs: 3}\n"


@pytest.mark.parametrize("args,kind", [
    (["jobs", "render", "--scheduler", "pbs", "--nodes", "1", "--config", "{cfg}", "-o", "{cfg}"],
     "a job script written by yasgd jobs render"),
    (["jobs", "submit", "--scheduler", "slurm", "--nodes", "1", "--config", "{cfg}", "--dry-run",
      "-o", "{cfg}"], "a job script written by yasgd jobs render"),
    (["simulate", "--json", "{cfg}"], "a JSON written by yasgd simulate"),
    (["simulate", "--plot", "{png}"], "a PNG written by yasgd simulate"),
])
def test_an_output_option_never_replaces_a_file_it_did_not_write(tmp_path, args, kind):
    # the config the job reads, or a figure of the user's, named as the output by a slip:
    # refused, and kept as it was
    cfg, png = tmp_path / "run.yaml", tmp_path / "figure.png"
    text, figure = "train: {epochs: 8, global_batch: 64}\n", b"\x89PNG\r\n\x1a\n not ours"
    cfg.write_text(text)
    png.write_bytes(figure)
    p = subprocess.run([YASGD, *[a.format(cfg=cfg, png=png) for a in args]],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stdout == "", p.stdout + p.stderr
    assert p.stderr.count("\n") == 1 and f"exists and is not {kind}; writing would lose it" \
        in p.stderr, p.stderr
    assert cfg.read_text() == text and png.read_bytes() == figure
    assert sorted(os.listdir(tmp_path)) == ["figure.png", "run.yaml"]


def test_an_output_option_replaces_its_own_earlier_output(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("train: {epochs: 8, global_batch: 64}\n")
    for scheduler in ("pbs", "slurm"):     # the second replaces the first
        p = subprocess.run([YASGD, "jobs", "render", "--scheduler", scheduler, "--nodes", "1",
                            "--config", str(cfg), "-o", str(tmp_path / "job.sh")],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
    assert "#SBATCH --nodes=1" in (tmp_path / "job.sh").read_text()
    for _ in range(2):
        p = subprocess.run([YASGD, "simulate", "--json", str(tmp_path), "--plot", str(tmp_path)],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
    assert sorted(os.listdir(tmp_path)) == ["job.sh", "run.yaml", "simulate.json",
                                            "simulate.png"]


# A stop signal that lands while a check's entry exists: os.rmdir of the probe folder (the one
# entry writable makes) first sends SIGTERM to the process itself, so the signal is real and
# lands inside the window.
_STOP_IN_PROBE = """
import os, signal, sys
def hooked(path, *a, _real=os.rmdir, **kw):
    if ".yasgd-probe-" in os.fspath(path):
        os.kill(os.getpid(), signal.SIGTERM)
    return _real(path, *a, **kw)
os.rmdir = hooked
{body}
"""


@pytest.mark.parametrize("args", [
    ["bench", "optimizer", "--quick", "--out", "{out}/res"],
    ["provenance", "{out}/run"],
    ["simulate", "--json", "{out}/sim.json"],
    ["simulate", "--plot", "{out}/sim.png"],
    ["jobs", "render", "--scheduler", "pbs", "--nodes", "1", "--config", "{cfg}", "-o",
     "{out}/job.sh"],
    ["data", "im2rec", "{src}", "{out}/rec"],
    ["train", "{cfg}", "run.dir={out}/runs"],
], ids=["bench --out", "provenance", "simulate --json", "simulate --plot", "jobs render",
        "data im2rec", "train run.dir"])
def test_a_stop_during_an_output_check_leaves_nothing_behind(tmp_path, args):
    # the command stops as a stop signal makes it (exit 143, one line), after the check's
    # entry is gone: the user's folder holds what it held
    for split in ("train", "val"):
        (tmp_path / "src" / split / "a").mkdir(parents=True)
    (tmp_path / "run.yaml").write_text("train: {epochs: 8, global_batch: 64}\n")
    out = tmp_path / "out"
    out.mkdir()
    args = [a.format(out=out, src=tmp_path / "src", cfg=tmp_path / "run.yaml") for a in args]
    body = f"from yasgd.cli import main\nsys.exit(main({args!r}))"
    p = subprocess.run([sys.executable, "-c", _STOP_IN_PROBE.format(body=body)],
                       capture_output=True, text=True, timeout=120)
    # train says where it stopped: "... before training started (no checkpoint)"
    assert p.returncode == 143 and p.stderr.count("\n") == 1, p.stderr[-3000:]
    assert p.stderr.startswith("yasgd: stopped by SIGTERM"), p.stderr
    assert os.listdir(out) == [], os.listdir(out)


def test_the_check_alone_is_what_a_stop_in_its_window_breaks(tmp_path):
    # the hazard the commands' checks are held against: the same signal, the check called
    # bare under a handler that unwinds, leaves its probe folder behind
    body = ("from yasgd import supervise, writable\nsupervise.stop_by_unwinding()\n"
            f"try:\n    writable.dir_problem({str(tmp_path)!r})\n"
            "except supervise.Stopped:\n    sys.exit(143)")
    p = subprocess.run([sys.executable, "-c", _STOP_IN_PROBE.format(body=body)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 143, p.stderr
    assert len(_left(tmp_path)) == 1 and os.listdir(tmp_path) == _left(tmp_path)


def test_every_output_check_of_a_command_is_held():
    # the checks are called only through outputs.checked, named as its first argument, or
    # through outputs.file_problem and dir_problem, which call it. The
    # one bare call is in yasgd.config's check_run_dir (a module in the cached runs' code
    # map, left as it is); that function is then a check too, called only through it
    import ast
    import glob
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    checks = {"dir_problem", "file_problem", "entry_problem", "check_run_dir"}
    bare = []
    for path in glob.glob(os.path.join(root, "yasgd", "**", "*.py"), recursive=True):
        rel = os.path.relpath(path, root)
        if rel == os.path.join("yasgd", "writable.py"):
            continue
        tree = ast.parse(open(path).read())
        where = {}      # each call -> the innermost function around it ("" at module level)
        for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
            for node in ast.walk(fn):
                where[node] = fn.name   # ast.walk goes outer first: inner functions win
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else getattr(f, "attr", None)
                held = (isinstance(f, ast.Attribute) and getattr(f.value, "id", "") == "outputs"
                        or rel == os.path.join("yasgd", "outputs.py") and isinstance(f, ast.Name))
                if name in checks and not held:     # outputs' own: name_problem, then checked
                    bare.append((rel, where.get(node, ""), name))
    assert bare == [(os.path.join("yasgd", "config.py"), "check_run_dir", "dir_problem")], bare


# --- names too long for the file system -------------------------------------------------
# writable's checks make a short entry in the nearest existing folder, so they pass a path
# whose own names the file system will refuse (ENAMETOOLONG); outputs.name_problem counts
# them against the limits the file system states (pathconf), in bytes.

def _refused(make):
    with pytest.raises(OSError) as e:
        make()
    return e.value.errno == errno.ENAMETOOLONG


def test_a_name_past_the_file_systems_limit_is_told_before_anything_is_made(tmp_path):
    n = os.pathconf(tmp_path, "PC_NAME_MAX")
    # the premise: the file system makes a name of n bytes, refuses n + 1, and writable's
    # try does not see it
    os.mkdir(tmp_path / ("a" * n))
    assert _refused(lambda: os.mkdir(tmp_path / ("b" * (n + 1))))
    assert writable.dir_problem(str(tmp_path / ("b" * (n + 1)))) is None
    assert outputs.name_problem(str(tmp_path / ("c" * n) / "d")) is None
    assert outputs.name_problem(str(tmp_path / ("c" * (n + 1)) / "d")) == (
        f"the name '{'c' * 60}...' is {n + 1} bytes, more than the {n} that a name may have "
        f"on the file system of {tmp_path}")
    # bytes, as the file system counts them: "é" is two in UTF-8
    assert outputs.name_problem(str(tmp_path / ("é" * (n // 2)))) is None
    wide = str(tmp_path / ("é" * (n // 2 + 1)))
    assert f"is {2 * (n // 2 + 1)} bytes" in outputs.name_problem(wide)
    assert os.listdir(tmp_path) == ["a" * n]


def test_a_file_counts_the_temporary_it_is_written_through(tmp_path):
    n = os.pathconf(tmp_path, "PC_NAME_MAX")
    extra = len(os.path.basename(outputs.temporary(str(tmp_path / "x.json")))) - len("x.json")
    fits = tmp_path / ("f" * (n - extra - 5) + ".json")     # its temporary: exactly n bytes
    assert len(os.path.basename(outputs.temporary(str(fits)))) == n
    assert outputs.file_problem(str(fits)) is None
    outputs.write_text(str(fits), "{}\n")
    assert fits.read_text() == "{}\n"
    over = tmp_path / ("g" * (n - extra - 4) + ".json")     # one byte more: its own name fits
    assert len(over.name) < n
    assert outputs.file_problem(str(over)).endswith(
        f"(the temporary the file is written through) is {n + 1} bytes, more than the {n} "
        f"that a name may have on the file system of {tmp_path}")
    assert _refused(lambda: outputs.write_text(str(over), "{}\n"))  # what it would meet
    assert os.listdir(tmp_path) == [fits.name]


def _deep(base, total):
    """A path under ``base`` of ``total`` bytes, in names of at most 200."""
    path = base
    while len(path) < total:
        k = min(200, total - len(path) - 1)
        if total - len(path) - 1 - k == 1:      # leave no gap of "/" alone
            k -= 1
        path = os.path.join(path, "p" * k)
    assert len(path) == total
    return path


def test_a_path_past_the_systems_limit_is_told(tmp_path):
    limit = os.pathconf(tmp_path, "PC_PATH_MAX")     # bytes, the closing NUL included
    longest, over = _deep(str(tmp_path), limit - 1), _deep(str(tmp_path), limit)
    os.makedirs(longest)                                # the premise, both sides of it
    assert _refused(lambda: os.makedirs(over))
    assert outputs.name_problem(longest) is None
    assert outputs.name_problem(over) == (
        f"the path is {limit} bytes, more than the {limit - 1} that the system takes")


@pytest.mark.parametrize("args, message", [
    (["simulate", "--json", "{out}/{long}.json"], "--json {out}/{long}.json: the name "),
    # the name fits; the temporary it is written through does not
    (["simulate", "--plot", "{out}/{near}.png"], "--plot {out}/{near}.png: the name "),
    (["jobs", "render", "--scheduler", "pbs", "--nodes", "1", "--config", "{cfg}", "-o",
      "{out}/{near}.sh"], "--output '{out}/{near}.sh': the name "),
    (["bench", "optimizer", "--quick", "--out", "{out}/{long}"],
     "bench --out {out}/{long} must be a writable directory (or one that can be created): "),
    (["bench", "ablation", "--quick", "--max-runs", "0", "--out", "{out}/res", "--cache",
      "{out}/{long}/cache"], "bench --cache {out}/{long}/cache must be a writable directory"),
    (["provenance", "{out}/{long}"], "provenance RUN_DIR {out}/{long} must be a writable"),
    (["data", "im2rec", "{src}", "{out}/{long}"], "im2rec: cannot write output folder "
                                                  "{out}/{long}: the name "),
    (["train", "{cfg}", "run.dir={out}/{long}"], "config key run.dir={out}/{long}: the run's "
                                                 "folder run-YYYYmmdd-HHMMSS cannot be made in "
                                                 "it: the name "),
    (["check-config", "{cfg}", "run.dir={out}/{long}", "--run-dir"], "config key run.dir="),
], ids=["simulate --json", "simulate --plot", "jobs render", "bench --out", "bench --cache",
        "provenance", "data im2rec", "train run.dir", "check-config --run-dir"])
def test_every_output_with_a_name_too_long_is_one_line_before_any_work(tmp_path, args, message):
    for split in ("train", "val"):
        (tmp_path / "src" / split / "a").mkdir(parents=True)
    (tmp_path / "run.yaml").write_text("train: {epochs: 8, global_batch: 64}\n")
    out = tmp_path / "out"
    out.mkdir()
    n = os.pathconf(out, "PC_NAME_MAX")
    names = dict(out=out, src=tmp_path / "src", cfg=tmp_path / "run.yaml", long="n" * (n + 1),
                 near="m" * (n - 4))
    p = subprocess.run([YASGD, *[a.format(**names) for a in args]], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 2 and p.stdout == "", p.stdout + p.stderr
    assert p.stderr.count("\n") == 1, p.stderr
    assert p.stderr.startswith("yasgd: error: " + message.format(**names)), p.stderr
    assert "bytes, more than the" in p.stderr
    assert os.listdir(out) == []


# --- every file and folder a bench writes under --out --------------------------------------
# A bench writes its report pair (bench_NAME.json/.md), the plots its module names
# (``plots(quick)``) and, for the training studies, the runs' folder and the cache. A folder,
# a pipe or a file it cannot replace at one of those names is one line before any work,
# never a traceback (or a write that waits for a pipe's reader) after it.

def _bench_outputs():
    import importlib
    from yasgd.cli import BENCHES, STUDY_BENCHES
    out = []
    for name in BENCHES:
        mod = importlib.import_module(f"yasgd.bench.{name}")
        for f in [f"bench_{name}.json", f"bench_{name}.md", *mod.plots(True)]:
            out.append((name, f, "file"))
        if name in STUDY_BENCHES:
            out += [(name, "study_runs", "the runs' folder"), (name, "runs_cache", "the run cache")]
    return out


def test_each_bench_names_the_plots_its_record_holds():
    """The names each bench declares are those its committed full-scale record lists."""
    import importlib
    import json
    from yasgd.cli import BENCHES
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for name in BENCHES:
        with open(os.path.join(root, "examples", "results", f"bench_{name}.json")) as f:
            plots = json.load(f).get("plots") or []
        assert importlib.import_module(f"yasgd.bench.{name}").plots(False) == plots, name


@pytest.mark.parametrize("bench,name,kind", _bench_outputs(),
                         ids=[f"{b}-{n}" for b, n, _ in _bench_outputs()])
def test_a_bench_output_that_cannot_be_written_is_one_line_before_any_work(tmp_path, bench,
                                                                             name, kind):
    out = tmp_path / "res"
    out.mkdir()
    if kind == "file":
        (out / name).mkdir()            # a folder where the bench writes a file
        message = (f"yasgd: error: bench --out {out}: cannot write {name}: {out / name} "
                   f"exists and is not a regular file")
    else:
        (out / name).write_text("x\n")  # a file where the study makes a folder
        message = (f"yasgd: error: bench --out: {kind} {out / name} must be a writable "
                   f"directory (or one that can be created): {out / name} is not a directory")
    before = sorted(os.listdir(out))
    p = subprocess.run([YASGD, "bench", bench, "--quick", "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert (p.returncode, p.stdout, p.stderr) == (2, "", message + "\n")
    assert sorted(os.listdir(out)) == before and _left(out) == []


def test_a_pipe_at_a_bench_output_is_refused_not_waited_on(tmp_path):
    os.mkfifo(tmp_path / "bench_init.md")
    p = subprocess.run([YASGD, "bench", "init", "--quick", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stdout == "", p.stderr
    assert p.stderr == (f"yasgd: error: bench --out {tmp_path}: cannot write bench_init.md: "
                        f"{tmp_path / 'bench_init.md'} exists and is not a regular file\n")
