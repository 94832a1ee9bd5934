"""Bad records given to the maintainers' report tools, ``python -m yasgd.bench.summary --out
DIR`` and ``python -m yasgd.bench.report --results DIR``: a results JSON that is not JSON, not
an object, lacks (or mistypes) a field the tool reads, or lacks a row a block looks up by
name is refused with one line on stderr, ``yasgd: error: NAME: FILE: what is wrong``, exit
status 2, no traceback, and nothing in DIR (nor the documents) written.

Every test works on a copy of examples/results in tmp_path; the report runs with ``--check``
(which writes nothing) or with its documents redirected to a copy (``report.REPO``).
"""
import os
import shutil
import subprocess
import sys

import pytest

from yasgd.bench import report, summary

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(ROOT, "examples", "results")


@pytest.fixture
def results(tmp_path):
    """A copy of examples/results (its run cache left out: neither tool reads its runs)."""
    out = tmp_path / "R"
    shutil.copytree(RESULTS, out, ignore=shutil.ignore_patterns("runs_cache"))
    return out


def _files(folder):
    """{path relative to folder: bytes} of every file under it."""
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _run(*args):
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)


def _summary(folder):
    return _run("yasgd.bench.summary", "--out", str(folder))


def _check(folder):
    return _run("yasgd.bench.report", "--results", str(folder), "--check")


def _refused(proc, tool, *words):
    """The one error line of a refusal (exit 2, nothing on stdout), holding every word."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert proc.stdout == "" and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and proc.stderr.endswith("\n"), proc.stderr
    assert lines[0].startswith(f"yasgd: error: {tool}: "), lines[0]
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def _truncate(path):
    text = path.read_text()
    path.write_text(text[:len(text) // 2])


def test_an_intact_copy_passes_both_tools(results):
    before = _files(results)
    proc = _check(results)
    assert proc.returncode == 0 and proc.stderr == "", (proc.stdout, proc.stderr)
    assert "generated blocks up to date" in proc.stdout
    assert _files(results) == before
    proc = _summary(results)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout.startswith(f"wrote {results / 'SUMMARY.md'} (8 benchmarks")
    after = _files(results)
    assert {k: v for k, v in after.items() if k != "SUMMARY.md"} == \
        {k: v for k, v in before.items() if k != "SUMMARY.md"}
    assert not summary.stale(str(results))


def test_summary_refuses_a_record_that_is_not_an_object(results):
    bad = results / "bench_optimizer.json"
    bad.write_text("[1]\n")
    before = _files(results)
    line = _refused(_summary(results), "bench.summary", str(bad), "object", "got a list")
    assert _files(results) == before, line


def test_summary_refuses_acceptance_that_is_not_a_list(results):
    bad = results / "bench_optimizer.json"
    bad.write_text('{"acceptance": "x"}\n')
    before = _files(results)
    line = _refused(_summary(results), "bench.summary")
    assert line.endswith(f"{bad}: acceptance must be a list of objects, got a string"), line
    assert _files(results) == before


def test_summary_refuses_invalid_json(results):
    bad = results / "bench_allreduce.json"
    _truncate(bad)
    before = _files(results)
    _refused(_summary(results), "bench.summary", str(bad), "not valid JSON", "line ")
    assert _files(results) == before


@pytest.mark.parametrize("make", [lambda p: p.mkdir(), lambda p: os.mkfifo(p)],
                         ids=["folder", "pipe"])
def test_summary_refuses_a_summary_it_cannot_write_before_reading_anything(results, make):
    (results / "SUMMARY.md").unlink()
    make(results / "SUMMARY.md")
    before = _files(results)
    _refused(_summary(results), "bench.summary", "--out: cannot write SUMMARY.md: ",
             f"{results / 'SUMMARY.md'} exists and is not a regular file")
    assert _files(results) == before


# a pipe would block a plain read for good, a device never end it, a deep nesting exhaust the
# parser's recursion: each is named before it is read
_UNREADABLE = {"folder": lambda p: p.mkdir(),
               "not-utf8": lambda p: p.write_bytes(b"# init \xff\xfe\n"),
               "pipe": os.mkfifo,
               "device": lambda p: p.symlink_to("/dev/zero"),
               "nested": lambda p: p.write_text("[" * 100000)}
_WHY = {"folder": "a directory, not a regular file", "pipe": "a pipe, not a regular file",
        "device": "a device, not a regular file",
        "nested": "JSON nested deeper than the parser goes"}


@pytest.mark.parametrize("tool,name,how,words", [
    ("bench.summary", "bench_zzz.json", "folder", [_WHY["folder"]]),
    ("bench.summary", "bench_init.md", "not-utf8", ["not UTF-8 text"]),
    *(("bench.report", log, how, [words]) for log in ("make_test.log", "make_train.log")
      for how, words in (("folder", _WHY["folder"]),
                         ("not-utf8", "not UTF-8 text (invalid start byte at byte 7)"))),
    *((tool, name, how, [_WHY[how]]) for tool in ("bench.summary", "bench.report")
      for name in ("bench_optimizer.json", "bench_optimizer.md")
      for how in ("pipe", "device", "nested") if how != "nested" or name.endswith(".json")),
    ("bench.report", "SUMMARY.md", "pipe", [_WHY["pipe"]]),
    ("bench.report", "paper.json", "pipe", [_WHY["pipe"]]),
])
def test_a_file_the_report_tools_cannot_read_is_named(results, tool, name, how, words):
    bad = results / name
    if bad.exists():
        bad.unlink()
    _UNREADABLE[how](bad)
    before = _files(results)
    _refused((_summary if tool == "bench.summary" else _check)(results), tool, str(bad), *words)
    assert _files(results) == before


def test_report_refuses_a_record_that_is_not_an_object(results):
    bad = results / "bench_optimizer.json"
    bad.write_text("[]\n")
    before = _files(results)
    _refused(_check(results), "bench.report", str(bad), "object", "got a list")
    assert _files(results) == before


def test_report_names_the_file_of_invalid_json(results):
    bad = results / "bench_optimizer.json"
    _truncate(bad)
    before = _files(results)
    _refused(_check(results), "bench.report", str(bad), "not valid JSON", "line ", "column ")
    assert _files(results) == before


def test_report_names_the_file_and_the_key_it_lacks(results):
    bad = results / "paper.json"
    bad.write_text("{}\n")
    before = _files(results)
    line = _refused(_check(results), "bench.report", str(bad))
    assert line.endswith(f"{bad}: yasgd is missing (must be an object)"), line
    assert _files(results) == before


@pytest.mark.parametrize("name,damage,words", [
    # a field the summary's acceptance table reads, in an item of a list
    ("bench_allreduce.json", lambda d: d["acceptance"][1].pop("criterion"),
     ["acceptance[1].criterion is missing (must be a string)"]),
    ("bench_init.json", lambda d: d["acceptance"].append({"criterion": "c", "met": "yes"}),
     ["acceptance[0].met must be a boolean or null, got a string"]),
    ("bench_data.json", lambda d: d.update(title=7), ["title must be a string, got a number"]),
    ("bench_overlap.json", lambda d: d.update(hardware=[]),
     ["hardware must be an object, got a list"]),
])
def test_summary_names_the_field_of_a_mistyped_record(results, name, damage, words):
    _mistyped(results, name, damage, _summary, "bench.summary", words)


@pytest.mark.parametrize("name,damage,words", [
    ("paper.json", lambda d: d["yasgd"].update(gpus="2048"),
     ["yasgd.gpus must be an integer, got a string"]),
    ("mlperf_logs.json", lambda d: d["multi_node"][3]["runs"][0].pop("first_epoch_s"),
     ["multi_node[3].runs[0].first_epoch_s is missing (must be a number)"]),
    ("bench_optimizer.json", lambda d: d.update(records=[]),
     ["records must be a list of at least 2 objects, got a list of 0"]),
    ("bench_throughput.json", lambda d: d["records"][2].update(median_step_ms=None),
     ["records[2].median_step_ms must be a number, got null"]),
    ("bench_largebatch.json", lambda d: d["setup"].pop("scale"),
     ["setup.scale is missing (must be an object)"]),
])
def test_report_names_the_field_of_a_mistyped_record(results, name, damage, words):
    _mistyped(results, name, damage, _check, "bench.report", words)


@pytest.mark.parametrize("name,damage,words", [
    # a loader the data block compares by name
    ("bench_data.json", lambda d: d.update(results=[r for r in d["results"]
                                                    if r["loader"] != "mx.io.ImageRecordIter"]),
     "no entry 'mx.io.ImageRecordIter', which the generated block data-loaders reads"),
    # an arm the reading (a block that reads five records) looks up in one of them
    ("bench_optimizer.json", lambda d: d.update(records=[
        r for r in d["records"] if r["arm"] != "yasgd fused (MXNet operators)"]),
     "no record with arm='yasgd fused (MXNet operators)', which the generated block "
     "bench-reading reads"),
])
def test_report_names_the_file_of_an_entry_a_block_lacks(results, name, damage, words):
    import json
    bad = results / name
    d = json.loads(bad.read_text())
    damage(d)
    bad.write_text(json.dumps(d))
    before = _files(results)
    line = _refused(_check(results), "bench.report")
    assert line == f"yasgd: error: bench.report: {bad}: {words}"
    assert _files(results) == before


def _mistyped(results, name, damage, tool, tool_name, words):
    """``damage`` the record ``name``, run ``tool`` on the folder: refused naming the file
    and ``words``, and every file as it was."""
    import json
    bad = results / name
    d = json.loads(bad.read_text())
    damage(d)
    bad.write_text(json.dumps(d))
    before = _files(results)
    _refused(tool(results), tool_name, str(bad), *words)
    assert _files(results) == before


@pytest.fixture
def docs(tmp_path, monkeypatch):
    """A copy of README.md and docs/*.md, the report's documents for the test."""
    docs = tmp_path / "repo"
    (docs / "docs").mkdir(parents=True)
    shutil.copy(os.path.join(ROOT, "README.md"), docs)
    for p in os.listdir(os.path.join(ROOT, "docs")):
        if p.endswith(".md"):
            shutil.copy(os.path.join(ROOT, "docs", p), docs / "docs")
    monkeypatch.setattr(report, "REPO", str(docs))
    return docs


def test_report_checks_the_records_before_it_writes_anything(results, docs, tmp_path, capsys):
    """A bad record found before the log given is recorded and before any block is written
    (the documents here a copy of README.md and docs/, should it get that far)."""
    log = tmp_path / "make_test.out"
    log.write_text((results / "make_test.log").read_text().replace("26 passed", "27 passed"))
    bad = results / "bench_throughput.json"
    _truncate(bad)
    before, docs_before = _files(results), _files(docs)
    assert report.main(["--results", str(results), "--make-test-log", str(log)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert err.startswith(f"yasgd: error: bench.report: {bad}: not valid JSON"), err
    assert _files(results) == before and _files(docs) == docs_before


def test_report_writes_no_block_when_a_later_block_lacks_an_entry(results, docs, capsys):
    """Blocks rendered before the one that finds an entry missing are not written either
    (the documents here a copy of README.md and docs/)."""
    import json
    # a README block out of date, so that the rewrite has something to write first
    readme = docs / "README.md"
    readme.write_text(readme.read_text().replace("passed in", "passed  in", 1))
    bad = results / "bench_data.json"
    d = json.loads(bad.read_text())
    d["results"] = [r for r in d["results"] if r["loader"] != "mx.io.ImageRecordIter"]
    bad.write_text(json.dumps(d))
    before, docs_before = _files(results), _files(docs)
    assert report.main(["--results", str(results)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert err.startswith(f"yasgd: error: bench.report: {bad}: no entry "), err
    assert _files(results) == before and _files(docs) == docs_before
    assert not [p for p in docs.rglob(".*") if p.is_file()]   # no temporary left

