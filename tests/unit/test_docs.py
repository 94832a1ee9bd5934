"""The user documents against their records (README.md, docs/*.md).

(a) every generated block (``<!-- yasgd:begin NAME -->`` ... ``<!-- yasgd:end NAME -->``) is
    what ``python -m yasgd.bench.report`` renders from ``examples/results/`` now;
(b) no measured figure (a number with a unit) outside a generated block;
(c) the README stays short: at most 300 lines of at most 100 characters;
(d) no run history: no "issue N", no commit hashes, no "+dirty" builds;
(e) the README's file map names files and folders that exist, and every module of yasgd/.
"""
import glob
import json
import os
import re
import shutil

import pytest

from yasgd.bench import report, report_logs, summary

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
README = os.path.join(ROOT, "README.md")
DOCS = [README] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))

#: A number followed by a unit of time, rate, size, share or ratio ("5.3x"). Settings and
#: published constants outside the blocks are written as config values (`HOROVOD_CYCLE_TIME=5`)
#: or in words; the paper's figures come from examples/results/paper.json.
FIGURE = re.compile(r"(?<![\w.,/])(?<![A-Za-z]-)\d(?:[\d,]*\d)?(?:\.\d+)?"
                    r"(?:\s?(?:ms|s|min|h|img/s|images/s|GB/s|MB)(?![\w/])|\s?%|x(?!\w))")
#: Explicit exceptions: (file name, exact text, why it is not a measured figure).
ALLOWED = [
]
HEX = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")


def _rel(path):
    return os.path.relpath(path, ROOT)


def _read(path):
    with open(path) as f:
        return f.read()


def _outside_blocks(text):
    """The text with every generated block's body blanked (line numbers kept)."""
    return report.BLOCK.sub(lambda m: m.group(1) + "\n" * m.group(3).count("\n") + m.group(4),
                            text)


def test_docs_exist_and_have_blocks():
    assert os.path.exists(README)
    names = [n for p in DOCS for n, _ in report.blocks(_read(p))]
    assert names, "no generated block in README.md or docs/"
    unknown = sorted(set(names) - set(report.RENDERERS))
    assert not unknown, f"blocks without a renderer: {unknown}"


@pytest.mark.parametrize("path", DOCS, ids=_rel)
def test_generated_blocks_match_records(path):
    rec = report.Records()
    text = _read(path)
    bad = []
    for m in report.BLOCK.finditer(text):
        name, body = m.group(2), m.group(3)
        want = report.RENDERERS[name](rec).rstrip("\n") + "\n"
        if body != want:
            old = [ln for ln in body.splitlines() if ln not in want.splitlines()][:3]
            new = [ln for ln in want.splitlines() if ln not in body.splitlines()][:3]
            bad.append(f"{_rel(path)}: block {name} differs from the records "
                       f"(committed: {old}; records give: {new})")
    assert not bad, "\n".join(bad) + "\nrun: python -m yasgd.bench.report"


@pytest.mark.parametrize("path", DOCS, ids=_rel)
def test_no_measured_figure_outside_generated_blocks(path):
    text = _outside_blocks(_read(path))
    allowed = {t for f, t, _ in ALLOWED if f == os.path.basename(path)}
    hits = []
    for i, line in enumerate(text.splitlines(), 1):
        for m in FIGURE.finditer(line):
            if not any(a in line and m.group(0) in a for a in allowed):
                hits.append(f"{_rel(path)}:{i}: {m.group(0)!r} in: {line.strip()[:90]}")
    assert not hits, ("measured figures outside a generated block (render them from a "
                      "record in yasgd/bench/report.py):\n" + "\n".join(hits))


def test_readme_is_short():
    lines = _read(README).splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines (at most 300)"
    long = [f"README.md:{i}: {len(ln)} characters" for i, ln in enumerate(lines, 1)
            if len(ln) > 100]
    assert not long, "lines over 100 characters:\n" + "\n".join(long)
    assert "make test" in _read(README)


@pytest.mark.parametrize("path", DOCS, ids=_rel)
def test_no_run_history(path):
    bad = []
    for i, line in enumerate(_read(path).splitlines(), 1):
        for what, pat in (("issue number", re.compile(r"\bissues? [0-9]", re.I)),
                          ("commit hash", HEX), ("dirty build", re.compile(r"\+dirty")),
                          ("design principle", re.compile(r"design principle \d", re.I))):
            m = pat.search(line)
            if m:
                bad.append(f"{_rel(path)}:{i}: {what} {m.group(0)!r}")
    assert not bad, "\n".join(bad)


def _file_map():
    text = _read(README)
    m = re.search(r"## File map\s*\n+```\n(.*?)```", text, re.S)
    assert m, "README.md has no ## File map code block"
    paths, parent = [], ""
    for line in m.group(1).splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        token = line.split()[0]
        if indent == 0:
            parent = token if token.endswith("/") else ""
            paths.append(token)
        elif indent == 2 and parent:
            paths.append(parent + token)
    return m.group(1), paths


def test_file_map_paths_exist():
    _, paths = _file_map()
    assert len(paths) > 20
    missing = [p for p in paths if not os.path.exists(os.path.join(ROOT, p))]
    assert not missing, f"README.md file map names what does not exist: {missing}"


def test_file_map_lists_every_module():
    block, _ = _file_map()
    modules = [os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "yasgd", "*.py"))
               if not p.endswith("__init__.py")]
    absent = sorted(m for m in modules if not re.search(rf"(?<![\w.]){re.escape(m)}", block))
    assert not absent, f"yasgd modules missing from the README's file map: {absent}"


def test_results_folder_without_a_bench_keeps_its_rows(tmp_path):
    """``--results DIR``: a bench that DIR lacks is read from examples/results, in the
    acceptance table as in its own blocks; so an empty folder changes no block, and one
    bench's new record changes only what quotes it."""
    assert report.stale(report.REPO, str(tmp_path)) == []
    with open(os.path.join(report.DEFAULT_RESULTS, "bench_optimizer.json")) as f:
        d = json.load(f)
    d["acceptance"][0]["value"] = 1.5
    d["acceptance"][0]["met"] = False
    (tmp_path / "bench_optimizer.json").write_text(json.dumps(d))
    rec = report.Records(str(tmp_path))
    rows = report.bench_acceptance(rec)
    assert rows.count("| optimizer |") == len(d["acceptance"])
    for bench in ("allreduce", "throughput", "largebatch", "ablation"):
        assert f"| {bench} |" in rows
    assert "| 1.50x | **not met** |" in rows
    changed = {name for _, name in report.stale(report.REPO, str(tmp_path))}
    assert "bench-acceptance" in changed and "bench-allreduce" not in changed


def test_study_blocks_name_plan_arms_the_tables_lack():
    """An arm the plan has and the recorded tables do not (added after their runs) is named
    under the tables, from the plan itself; a record holding every planned arm names none."""
    from yasgd.bench import report_study, study_plan
    with open(os.path.join(report.DEFAULT_RESULTS, "bench_ablation.json")) as f:
        d = json.load(f)
    planned = study_plan.ablation_arms(study_plan.FULL)
    names = {a.name for a in planned}
    # as recorded, minus two planned arms: both named, in the plan's order, and no others
    gone = [a["arm"] for a in d["setup"]["arms"] if a["arm"] in names][-2:]
    d["setup"]["arms"] = [a for a in d["setup"]["arms"] if a["arm"] not in gone]
    line = "\n".join(report_study._plan_line(d, study_plan.ablation_arms))
    missing = [a.label for a in planned if a.name not in {x["arm"] for x in d["setup"]["arms"]}]
    assert set(gone) <= {a.name for a in planned if a.label in missing}
    assert f"has {len(missing)} arms these tables do not have: " + "; ".join(missing) in line
    # every planned arm recorded: no line
    d["setup"]["arms"] += [{"arm": a.name} for a in planned
                           if a.name not in {x["arm"] for x in d["setup"]["arms"]}]
    assert report_study._plan_line(d, study_plan.ablation_arms) == []


#: The shape of a real ``make test`` log: the install's output (with this machine's paths),
#: the Makefile's pytest commands, progress dots, a warning, pytest's last line of each run
#: (under mpirun one per rank, coloured, one after the other rank's progress, after the launcher
#: echoed the command too) and, here, a failure.
MAKE_TEST_LOG = """\
make[1]: Entering directory '/srv/yasgd'
jobs/install.sh: /srv/yasgd/.venv ready (mxnet 1.9.1, horovod 0.28.1)
OMP_NUM_THREADS=2 .venv/bin/python -m pytest -q -p no:cacheprovider tests/unit
........................................................................ [ 99%]
1357 passed, 1 skipped in 173.59s (0:02:53)
.venv/bin/python -m yasgd.launch -np 2 .venv/bin/python -m pytest -q -p no:cacheprovider tests/multiproc
mpirun -np 2 --oversubscribe .venv/bin/python -m pytest -q -p no:cacheprovider tests/multiproc
\x1b[32m.\x1b[0m\x1b[32m.\x1b[0m\x1b[32m                                 [100%]\x1b[0m
\x1b[32m                    [100%]\x1b[0m\x1b[32m\x1b[32m\x1b[1m26 passed\x1b[0m\x1b[32m in 30.10s\x1b[0m\x1b[0m

\x1b[32m\x1b[32m\x1b[1m26 passed\x1b[0m\x1b[32m in 30.12s\x1b[0m\x1b[0m
.venv/bin/python -m pytest -q -p no:cacheprovider tests/e2e
/srv/yasgd/tests/e2e/conftest.py:12: UserWarning: something
============ 1 failed, 139 passed, 1 skipped in 399.13s (0:06:39) =============
make[1]: *** [Makefile:39: test-e2e] Error 1
"""


def test_make_test_record_keeps_each_suite_and_how_it_ended(tmp_path):
    """``report --make-test-log LOG``: the record holds each suite, pytest's last line of each
    run and make's error, none of the machine's paths; it parses to the same record again,
    and the README block names each suite with its lines."""
    log = tmp_path / "make_test.out"
    log.write_text(MAKE_TEST_LOG)
    results = tmp_path / "results"
    results.mkdir()
    # the function behind --make-test-log, which then rewrites this checkout's documents
    assert report_logs.write_record(str(results), *report_logs.read_log("test", str(log))) \
        == str(results / "make_test.log")
    kept = (results / "make_test.log").read_text()
    assert kept.splitlines() == [
        "pytest tests/unit", "1357 passed, 1 skipped in 173.59s (0:02:53)",
        "pytest tests/multiproc", "26 passed in 30.10s", "26 passed in 30.12s",
        "pytest tests/e2e", "1 failed, 139 passed, 1 skipped in 399.13s (0:06:39)",
        "make[1]: *** [Makefile:39: test-e2e] Error 1"]
    assert "/srv" not in kept
    assert report_logs.make_test_lines(kept) == kept.splitlines()
    block = " ".join(report_logs.make_test(report.Records(str(results))).split())
    assert ("`tests/unit` 1357 passed, 1 skipped in 173.59s (0:02:53); `tests/multiproc` 26 "
            "passed in 30.10s / 26 passed in 30.12s; `tests/e2e` 1 failed, 139 passed, 1 "
            "skipped in 399.13s (0:06:39); make stopped: `make[1]: *** [Makefile:39: "
            "test-e2e] Error 1`.") in block


def test_make_test_record_names_a_suite_run_in_parts_by_marker(tmp_path):
    """A suite that make runs in two pytest runs, chosen by a marker expression (-m): the
    record and the README block name each run with its expression."""
    log = tmp_path / "make_test.out"
    log.write_text('OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q -n 2 -m "not serial" '
                   'tests/unit\n1400 passed, 134 deselected in 140.00s (0:02:20)\n'
                   "OMP_NUM_THREADS=2 .venv/bin/python -m pytest -q -m serial tests/unit\n"
                   "134 passed, 1400 deselected in 40.00s\n")
    results = tmp_path / "results"
    results.mkdir()
    report_logs.write_record(str(results), *report_logs.read_log("test", str(log)))
    kept = (results / "make_test.log").read_text()
    assert kept.splitlines() == [
        'pytest -m "not serial" tests/unit', "1400 passed, 134 deselected in 140.00s (0:02:20)",
        "pytest -m serial tests/unit", "134 passed, 1400 deselected in 40.00s"]
    assert report_logs.make_test_lines(kept) == kept.splitlines()
    block = " ".join(report_logs.make_test(report.Records(str(results))).split())
    assert ('`tests/unit -m "not serial"` 1400 passed, 134 deselected in 140.00s (0:02:20); '
            "`tests/unit -m serial` 134 passed, 1400 deselected in 40.00s.") in block


@pytest.mark.parametrize("text,message", [
    ("make: Nothing to be done for 'all'.\n", "names no pytest suite"),
    ("", "names no pytest suite"),
])
def test_make_test_record_refuses_a_log_without_a_suite(tmp_path, capsys, text, message):
    """A log that is not ``make test``'s output: one error line, exit 2, no record written."""
    log = tmp_path / "other.out"
    log.write_text(text)
    assert report.main(["--results", str(tmp_path), "--make-test-log", str(log)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("yasgd: error: bench.report: --make-test-log: ") and message in err
    assert err.count("\n") == 1 and not (tmp_path / "make_test.log").exists()
    assert report.main(["--results", str(tmp_path), "--make-test-log",
                        str(tmp_path / "none.out")]) == 2
    assert "No such file" in capsys.readouterr().err


@pytest.mark.parametrize("make", [lambda p: p.mkdir(), lambda p: os.mkfifo(p)],
                         ids=["folder", "pipe"])
def test_make_test_record_refuses_a_record_it_cannot_write(tmp_path, capsys, make):
    """A folder or a pipe where the record goes: one line before anything is written (a
    pipe would wait for a reader), this checkout's documents untouched."""
    log = tmp_path / "make_test.out"
    log.write_text("OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/unit\n"
                   "10 passed in 1.00s\n")
    make(tmp_path / "make_test.log")
    readme = open(os.path.join(ROOT, "README.md"), "rb").read()
    assert report.main(["--results", str(tmp_path), "--make-test-log", str(log)]) == 2
    err = capsys.readouterr().err
    assert err == (f"yasgd: error: bench.report: --make-test-log: cannot write its record: "
                   f"{tmp_path / 'make_test.log'} exists and is not a regular file\n")
    assert open(os.path.join(ROOT, "README.md"), "rb").read() == readme


def _bar(epoch: int, done: int) -> str:
    """What tqdm draws on stderr for rank 0's progress bar: a carriage return, the bar."""
    full = "\u2588" * 5 * done
    return (f"\repoch {epoch}/3:  {done * 50}%|{full}{' ' * 5 * (2 - done)}| "
            f"{done}/2 [00:01<00:01,  2.42it/s]")


#: The shape of a real ``make train`` log: the install's output with this machine's paths,
#: the launcher's command, the banner, the progress bar drawn over the epoch lines (tqdm
#: clears its line, then prints the epoch), evaluations every 2 epochs, the end of the run.
MAKE_TRAIN_LOG = (
    "jobs/install.sh: /srv/yasgd/.venv ready (mxnet 1.9.1, horovod 0.28.1)\n"
    "mpirun -np 2 --oversubscribe .venv/bin/yasgd train examples/configs/demo.yaml\n"
    "yasgd: resnet8 on fashion_mnist, 2 ranks x 512 x 4 = global batch 4096, 2 steps/epoch, "
    "3 epochs, optimizer lars\n"
    + _bar(1, 1) + "\r" + " " * 60 + "\r"
    "epoch   1/3  loss 2.2032  train-acc 0.2220  lr 2  14.4s\n"
    + _bar(2, 1) + _bar(2, 2) + "\r" + " " * 60 + "\r"
    "epoch   2/3  loss 1.0038  train-acc 0.7739  lr 7.615  26.9s  test-acc 0.7368\n"
    "/srv/yasgd/yasgd/train.py:9: UserWarning: something\n"
    + _bar(3, 1) + "\r" + " " * 60 + "\r"
    "epoch   3/3  loss 0.8320  train-acc 0.8559  lr 0  20.3s\n"
    "final test accuracy: 0.8586 (85.86 %) after 3 epochs, 61.6 s\n"
    "run directory: /srv/yasgd/runs/demo-20261201-224913\n")


def test_make_train_record_keeps_the_banner_epochs_and_end(tmp_path):
    """``report --make-train-log LOG``: the banner, the first epoch, a ``...`` for the epochs
    left out, each evaluated epoch and the last, and the end of the run; nothing of the
    progress bar or the install; idempotent; the README block quotes it with its figures."""
    log = tmp_path / "make_train.out"
    log.write_text(MAKE_TRAIN_LOG)
    results = tmp_path / "results"
    results.mkdir()
    assert report_logs.write_record(str(results), *report_logs.read_log("train", str(log))) \
        == str(results / "make_train.log")
    kept = (results / "make_train.log").read_text().splitlines()
    assert kept == [
        "yasgd: resnet8 on fashion_mnist, 2 ranks x 512 x 4 = global batch 4096, 2 steps/epoch,"
        " 3 epochs, optimizer lars",
        "epoch   1/3  loss 2.2032  train-acc 0.2220  lr 2  14.4s",
        "epoch   2/3  loss 1.0038  train-acc 0.7739  lr 7.615  26.9s  test-acc 0.7368",
        "epoch   3/3  loss 0.8320  train-acc 0.8559  lr 0  20.3s",
        "final test accuracy: 0.8586 (85.86 %) after 3 epochs, 61.6 s",
        "run directory: runs/demo-20261201-224913"]
    assert report_logs.make_train_lines("\n".join(kept)) == kept
    assert "/srv" not in "\n".join(kept)
    # epochs 2 and 3 of 5 not evaluated: one "..." after the first
    five = MAKE_TRAIN_LOG.replace("/3", "/5").replace("2 steps/epoch, 3 epochs",
                                                      "2 steps/epoch, 5 epochs")
    five = five.replace("epoch   2/5", "epoch   4/5").replace("epoch   3/5", "epoch   5/5")
    five = five.replace("  lr 2  14.4s\n", "  lr 2  14.4s\nepoch   2/5  loss 1.9  train-acc "
                        "0.3  lr 4  9.0s\nepoch   3/5  loss 1.5  train-acc 0.5  lr 6  9.0s\n")
    got = report_logs.make_train_lines(five)
    assert got[1:4] == ["epoch   1/5  loss 2.2032  train-acc 0.2220  lr 2  14.4s", "...",
                        "epoch   4/5  loss 1.0038  train-acc 0.7739  lr 7.615  26.9s  "
                        "test-acc 0.7368"]
    assert report_logs.make_train_lines("\n".join(got)) == got
    block = " ".join(report_logs.make_train(report.Records(str(results))).split())
    assert "3 epochs of 2 LARS steps, 61.6 s of training, 20.5 s an epoch" in block


@pytest.mark.parametrize("which,text,message", [
    ("train", "epoch   1/3  loss 2.2  train-acc 0.2  lr 2  14.4s\n", "holds no finished run"),
    ("train", "", "holds no finished run"),
    ("test", "final test accuracy: 0.8586 (85.86 %) after 3 epochs, 61.6 s\n",
     "names no pytest suite"),
])
def test_a_record_is_written_only_from_a_finished_log(tmp_path, capsys, which, text, message):
    """A log that is not a finished ``make train`` (or is ``make train``'s given as ``make
    test``'s): one error line, exit 2, and no record written, the other log's neither."""
    bad = tmp_path / "bad.out"
    bad.write_text(text)
    good = tmp_path / "good.out"
    good.write_text(MAKE_TEST_LOG if which == "train" else MAKE_TRAIN_LOG)
    other = "test" if which == "train" else "train"
    assert report.main(["--results", str(tmp_path), f"--make-{which}-log", str(bad),
                        f"--make-{other}-log", str(good)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"yasgd: error: bench.report: --make-{which}-log: ") and message in err
    assert err.count("\n") == 1
    assert not list(tmp_path.glob("*.log"))


@pytest.mark.parametrize("which", ["train", "test"])
def test_a_record_is_read_only_from_a_regular_file(tmp_path, capsys, which):
    """A folder, a FIFO (which would wait for a writer) or /dev/zero (which never ends) as the
    log: one error line naming it, exit 2, nothing written."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (str(tmp_path), str(fifo), "/dev/zero"):
        assert report.main(["--results", str(tmp_path), f"--make-{which}-log", path]) == 2
        err = capsys.readouterr().err
        assert err == (f"yasgd: error: bench.report: --make-{which}-log: {path} is not a "
                       f"regular file: give the saved output of `make {which}`\n")
    assert not list(tmp_path.glob("*.log"))


def test_summary_agrees_with_the_bench_records(tmp_path):
    """examples/results/SUMMARY.md, from its index on, is what its bench_*.json/.md make now
    (``report --check`` says so too); a changed bench table makes it stale, and only the
    generation stamp above the index may differ."""
    assert not summary.stale(report.DEFAULT_RESULTS)
    for path in glob.glob(os.path.join(report.DEFAULT_RESULTS, "bench_*")) + [
            os.path.join(report.DEFAULT_RESULTS, "SUMMARY.md")]:
        shutil.copy(path, tmp_path)
    text = (tmp_path / "SUMMARY.md").read_text()
    (tmp_path / "SUMMARY.md").write_text(text.replace("Generated ", "Generated long ago, ", 1))
    assert not summary.stale(str(tmp_path))
    md = tmp_path / "bench_ablation.md"
    md.write_text(md.read_text().replace(" met |", " not met |", 1))
    assert summary.stale(str(tmp_path))
    assert not summary.stale(str(tmp_path / "nowhere"))


@pytest.mark.parametrize("path", DOCS, ids=_rel)
def test_every_yasgd_name_a_python_example_uses_is_imported_by_it(path):
    """A ``python`` example's imports, run alone in a fresh interpreter (where no other
    module has imported a submodule for it), reach every ``yasgd.X.Y`` name it uses."""
    import subprocess
    import sys
    for block in re.findall(r"```python\n(.*?)```", _read(path), re.S):
        imports = "\n".join(ln for ln in block.splitlines()
                            if re.match(r"(import|from) \S", ln))
        names = sorted(set(re.findall(r"\byasgd(?:\.[A-Za-z_]\w*)+", block)))
        probe = imports + "\nimport functools\nmissing = [n for n in " + repr(names) + (
            " if functools.reduce(lambda o, a: getattr(o, a, None), n.split('.')[1:], yasgd)"
            " is None]\nprint(missing)\n")
        p = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                           cwd=ROOT, timeout=120)
        assert p.returncode == 0 and p.stdout == "[]\n", (_rel(path), p.stdout, p.stderr[-500:])
