"""A training bench never replaces the record at ``--out`` with one that lacks some of its
runs (yasgd.bench.study_run.check_record): refused before any work, one line, exit 2, the
record's bytes unchanged."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from yasgd import UsageError
from yasgd.bench import cache_entry, output, study, study_run
from yasgd.bench.study_plan import QUICK

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
YASGD = os.path.join(os.path.dirname(sys.executable), "yasgd")
RESULTS = os.path.join(ROOT, "examples", "results")


# a well-formed entry of code that is not this checkout's: its run trains again
OTHER_CODE = {"code": {"yasgd.schedule": "0" * 64}, "env": {}, "result": {
    "val_top1": 0.9, "test_top1": 0.9, "diverged": False, "curve": [], "wall_s": 1.0,
    "threads": 1, "code": {"yasgd.schedule": "0" * 64}, "env": {}}}


def _arm(name):
    return study.Arm(name, name, 1024, "lars", (1.0, 2.0, 4.0), (), 2, "x", 0)


def _setup(tmp_path, cached=("k1", "k2"), quick=True):
    out, cache = tmp_path / "out", tmp_path / "cache"
    out.mkdir(parents=True)
    cache.mkdir()
    for k in cached:
        (cache / f"{k}.json").write_text(json.dumps(OTHER_CODE))   # it counts as there
    record = {"quick": quick, "records": [{"arm": "a", "key": "k1"}, {"arm": "b", "key": "k2"}]}
    (out / "bench_x.json").write_text(json.dumps(record))
    return str(out / "bench_x.json"), str(cache)


def test_a_record_whose_runs_the_sitting_holds_may_be_replaced(tmp_path):
    path, cache = _setup(tmp_path)
    s = study_run.Study([_arm("a"), _arm("b"), _arm("c")], QUICK, str(tmp_path / "out"), cache)
    study_run.check_record("x", path, s, quick=True)              # no error
    # another scale's record is another table; no record, or not JSON: nothing to lose
    study_run.check_record("x", path, s, quick=False)
    study_run.check_record("x", str(tmp_path / "none.json"), s, quick=True)
    (tmp_path / "bad.json").write_text("{not json")
    study_run.check_record("x", str(tmp_path / "bad.json"), s, quick=True)


@pytest.mark.parametrize("record", [
    [], 5, {"records": 5}, {"records": "ab"}, {"records": {"arm": "a"}},
    {"records": [{"arm": ["x"], "key": "k"}]}, {"records": [{"arm": "a", "key": {"k": 1}}]},
    {"records": [5, None, "a"]}])
def test_a_record_of_another_shape_is_none_of_a_benchs(tmp_path, record):
    # JSON that is not a training bench's record holds no runs to lose (as a file that is
    # not JSON); it raised a TypeError from the set of arms or the list of runs
    path, cache = _setup(tmp_path)
    with open(path, "w") as f:
        json.dump(record, f)
    s = study_run.Study([_arm("a")], QUICK, str(tmp_path / "out"), cache)
    study_run.check_record("x", path, s, quick=True)


def test_runs_missing_from_the_cache_or_arms_left_out_are_refused(tmp_path):
    path, cache = _setup(tmp_path, cached=("k1",))
    s = study_run.Study([_arm("a"), _arm("b")], QUICK, str(tmp_path / "out"), cache)
    with pytest.raises(UsageError, match=r"bench x: --out: .*bench_x.json holds 2 run\(s\), 1 "
                                         r"of them not in the cache .*cache; this sitting's"):
        study_run.check_record("x", path, s, quick=True)
    path, cache = _setup(tmp_path / "2")
    s = study_run.Study([_arm("a")], QUICK, str(tmp_path / "2" / "out"), cache)
    with pytest.raises(UsageError, match=r"holds the runs of 1 arm\(s\) that --arms leaves out "
                                         r"\(b\)"):
        study_run.check_record("x", path, s, quick=True)


@pytest.mark.parametrize("text,why", [
    ("{}", "code is missing (must be an object of strings)"),
    ("[]", "the top level must be an object, got a list"),
    ("{not json", "not JSON")])
def test_a_run_whose_cache_file_is_not_an_entry_is_refused(tmp_path, text, why):
    """The record holds that run's results; a report without it would lose them."""
    path, cache = _setup(tmp_path)
    os.makedirs(os.path.join(cache, "k3.json"))
    with open(os.path.join(cache, "k2.json"), "w") as f:
        f.write(text)
    rec = json.loads(open(path).read())
    rec["records"].append({"arm": "a", "key": "k3"})
    with open(path, "w") as f:
        json.dump(rec, f)
    s = study_run.Study([_arm("a"), _arm("b")], QUICK, str(tmp_path / "out"), cache)
    with pytest.raises(UsageError) as e:
        study_run.check_record("x", path, s, quick=True)
    assert str(e.value) == (
        f"bench x: --out: {path} holds 3 run(s), 2 of them not in the cache {cache} (k2.json "
        f"there is not a run a bench wrote: {why}, and 1 more like it); this sitting's "
        f"report would drop them: pass --cache with the cache they are in, or another --out")


def test_the_command_refuses_a_mistyped_cache_before_any_work(tmp_path):
    out = tmp_path / "res"
    out.mkdir()
    for ext in ("json", "md"):
        shutil.copy(os.path.join(RESULTS, f"bench_ablation.{ext}"), out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    run = subprocess.run([YASGD, "bench", "ablation", "--max-runs", "0", "--out", str(out),
                          "--cache", str(tmp_path / "empty")], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 2, run.stderr
    assert run.stdout == "" and len(run.stderr.splitlines()) == 1, run.stderr
    assert run.stderr.startswith(f"yasgd: error: bench ablation: --out: {out}/bench_ablation"
                                 f".json holds "), run.stderr
    assert "not in the cache" in run.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert not (tmp_path / "empty").exists()                    # nothing made either


def test_max_runs_0_keeps_a_record_whose_runs_it_would_not_train_again(tmp_path):
    """Entries of other code train again in a sitting that trains; ``--max-runs 0`` trains
    none, so its report would lack them: refused."""
    path, cache = _setup(tmp_path)
    s = study_run.Study([_arm("a"), _arm("b")], QUICK, str(tmp_path / "out"), cache)
    study_run.check_record("x", path, s, quick=True, max_runs=1)
    with pytest.raises(UsageError, match=r"bench x: --out: .*bench_x.json holds 2 run\(s\), 2 "
                                         r"of them of other code than this checkout's; "
                                         r"--max-runs 0 trains none of them again"):
        study_run.check_record("x", path, s, quick=True, max_runs=0)


def test_a_record_of_the_other_scale_is_kept_where_its_runs_are_not_in_the_cache(tmp_path):
    path, cache = _setup(tmp_path, cached=("k1",), quick=False)
    s = study_run.Study([_arm("a")], QUICK, str(tmp_path / "out"), cache)
    with pytest.raises(UsageError, match=r"holds 2 run\(s\), 1 of them not in the cache"):
        study_run.check_record("x", path, s, quick=True)


def _deep(p):
    p.write_text("[" * 200_000)


def _pipe(p):
    os.mkfifo(p)


def _device(p):
    os.symlink("/dev/zero", p)


def _huge(p):
    with open(p, "wb") as f:
        f.truncate(output.MAX_JSON_BYTES + 1)


@pytest.mark.parametrize("make,why", [
    (_deep, "JSON nested deeper than the parser goes"),
    (_pipe, "a pipe, not a regular file"),     # a read would wait for a writer for good
    (_device, "a device, not a regular file"),     # a read would never end
    (_huge, f"{output.MAX_JSON_BYTES + 1:,} bytes, more than the {output.MAX_JSON_BYTES:,}"),
], ids=["nested", "pipe", "device", "huge"])
def test_a_cache_file_a_bench_cannot_have_written_is_named_not_read(tmp_path, make, why):
    make(tmp_path / "k1.json")
    assert cache_entry.Cache(str(tmp_path)).read("k1")[0] is None
    assert why in cache_entry.Cache(str(tmp_path)).read("k1")[1]
    with pytest.raises(ValueError, match=why.split(",")[0]):
        output.read_json(str(tmp_path / "k1.json"))     # a record at --out is read so too


def test_a_result_field_never_replaces_what_the_run_is(tmp_path):
    s = study_run.Study([_arm("a")], QUICK, str(tmp_path / "out"), str(tmp_path / "c"))
    res = {"arm": "ghost", "key": "0" * 16, "lr": 99.0, "seed": 7, "val_top1": 0.5}
    search = study.Search(_arm("a"), [1.0], 1.0, True, False, [], {(1.0, 0): res})
    (rec,) = s.records([search])
    run = s.run_of(_arm("a"), 1.0, 0)
    assert (rec["arm"], rec["key"], rec["lr"], rec["seed"]) == ("a", run.key, run.lr, 0)
    assert rec["val_top1"] == 0.5


def test_a_report_that_cannot_be_written_is_one_line_and_a_refused_sitting_makes_no_out(
        tmp_path):
    from yasgd import outputs
    out, cache = tmp_path / "out", tmp_path / "cache"
    (tmp_path / "blocked").mkdir()

    def report(*args):          # a real write that fails: its target is a folder
        outputs.write_text(str(tmp_path / "blocked"), "x")
    args = ("x", "bench x", [_arm("a")], QUICK, str(out), True, 1)
    with pytest.raises(UsageError, match=rf"bench x: --out {out}: writing its report failed "
                                         rf"\(Is a directory\); every finished run is kept"):
        study_run.run_bench(*args, 0, None, str(cache), report)
    with study_run.cache_lock(str(cache)):      # a sitting holds the cache: the next is refused
        out2 = tmp_path / "out2"
        with pytest.raises(UsageError, match="another bench is training into this cache"):
            study_run.run_bench("x", "bench x", [_arm("a")], QUICK, str(out2), True, 1, 1,
                                None, str(cache), report)
        assert not out2.exists()
