"""A file in a training bench's cache that is not an entry a bench wrote
(yasgd.bench.cache_entry) is a miss, said in one line naming the file, never a traceback: its
run trains again and its entry replaces the file. Real files, the real ``Study`` and the real
``yasgd bench`` command (``--max-runs 0``: nothing trains)."""
import json
import os
import subprocess
import sys

import pytest

from yasgd.bench import cache_entry, runcache, study_plan as plan, study_run
from yasgd.bench.record_shape import mismatch

YASGD = os.path.join(os.path.dirname(sys.executable), "yasgd")


def _entry(result_fields=None, **top):
    """A well-formed entry of this checkout's code (the code map of a module on disk)."""
    code = {"yasgd.schedule": runcache._source_sha("yasgd.schedule")}
    env = runcache.environment()
    result = {"val_top1": 0.9, "test_top1": 0.89, "diverged": False, "error": None,
              "curve": [{"epoch": 4, "val_top1": 0.8}], "wall_s": 290.0, "threads": 1,
              "code": code, "env": env}
    result.update(result_fields or {})
    return dict({"key": "k", "code": code, "env": env, "result": result}, **top)


def _without(field):
    e = _entry()
    del e["result"][field]
    return e


# (file text, what the line says is wrong with it)
BAD = {
    "not-json": ("{not json", "not JSON"),
    "empty-file": ("", "not JSON"),
    "list": ("[]", "the top level must be an object, got a list"),
    "null": ("null", "the top level must be an object, got null"),
    "text": ('"a run"', "the top level must be an object, got a string"),
    "number": ("3", "the top level must be an object, got a number"),
    "code-list": (json.dumps(_entry(code=[1])), "code must be an object of strings, got a list"),
    "code-digest-number": (json.dumps(_entry(code={"yasgd.schedule": 1})),
                           'code["yasgd.schedule"] must be a string, got a number'),
    "no-result": (json.dumps({k: v for k, v in _entry().items() if k != "result"}),
                  "result is missing (must be an object)"),
    "result-list": (json.dumps(_entry(result=[])), "result must be an object, got a list"),
    "val-text": (json.dumps(_entry({"val_top1": "0.9"})),
                 "result.val_top1 must be a number in [0, 1] or null, got a string"),
    "val-percent": (json.dumps(_entry({"val_top1": 90.1})),
                    "result.val_top1 must be a number in [0, 1] or null, got a number"),
    "test-nan": (json.dumps(_entry({"test_top1": float("nan")})),
                 "result.test_top1 must be a number in [0, 1] or null, got a number"),
    "test-flag": (json.dumps(_entry({"test_top1": True})),
                  "result.test_top1 must be a number in [0, 1] or null, got true"),
    "diverged-text": (json.dumps(_entry({"diverged": "no"})),
                      "result.diverged must be a boolean, got a string"),
    "wall-negative": (json.dumps(_entry({"wall_s": -1})),
                      "result.wall_s must be a finite number >= 0, got a number"),
    "wall-infinite": (json.dumps(_entry({"wall_s": float("inf")})),
                      "result.wall_s must be a finite number >= 0, got a number"),
    "threads-zero": (json.dumps(_entry({"threads": 0})),
                     "result.threads must be an integer >= 1, got a number"),
    "threads-float": (json.dumps(_entry({"threads": 1.5})),
                      "result.threads must be an integer >= 1, got a number"),
    "curve-no-top1": (json.dumps(_entry({"curve": [{"epoch": 4}]})),
                      "result.curve[0].val_top1 is missing (must be a number in [0, 1])"),
    "curve-epoch-nan": (json.dumps(_entry({"curve": [{"epoch": float("nan"), "val_top1": 0.5}]})),
                        "result.curve[0].epoch must be a finite number, got a number"),
    "curve-dict": (json.dumps(_entry({"curve": {"epoch": 4}})),
                   "result.curve must be a list of objects, got an object"),
    "result-code-list": (json.dumps(_entry({"code": []})),
                         "result.code must be an object of strings, got a list"),
    "env-text": (json.dumps(_entry({"env": "cpu"})), "result.env must be an object, got a string"),
    # the line names what is wrong, never the value: a long one leaves it one short line
    "long-value": (json.dumps(_entry({"val_top1": "x" * 500})),
                   "result.val_top1 must be a number in [0, 1] or null, got a string)"),
}
# every field the searches, tables and plots read from a run's result
READ = ["val_top1", "test_top1", "diverged", "wall_s", "threads", "curve", "code", "env"]
BAD.update({f"no-{f}": (json.dumps(_without(f)), f"result.{f} is missing (must be ")
            for f in READ})


def test_a_well_formed_entry_of_this_code_is_served(tmp_path, capsys):
    cache = cache_entry.Cache(str(tmp_path))
    cache.put("k", _entry())
    assert cache.get("k")["result"]["val_top1"] == 0.9
    assert cache.get("absent") is None
    # one of other code is a miss as in runcache, and no line: a change of code asks for it
    cache.put("old", _entry(code={"yasgd.schedule": "0" * 64}))
    assert cache.get("old") is None
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_file_that_is_not_an_entry_is_a_miss_said_once(tmp_path, capsys, case):
    text, why = BAD[case]
    (tmp_path / "k.json").write_text(text)
    cache = cache_entry.Cache(str(tmp_path))
    assert cache.get("k") is None
    assert cache.get("k") is None                     # read again: not said again
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"cache {tmp_path}: k.json is not a run a bench wrote ("), lines
    assert why in lines[0] and lines[0].endswith("); its run trains again"), lines
    assert (tmp_path / "k.json").read_text() == text    # nothing lost by reading it


def test_an_unreadable_entry_is_a_miss(tmp_path, capsys):
    (tmp_path / "k.json").mkdir()
    assert cache_entry.Cache(str(tmp_path)).get("k") is None
    out = capsys.readouterr().out
    assert "k.json is not a run a bench wrote (a directory, not a regular file)" in out, out


def test_the_check_passes_every_run_the_benches_recorded():
    """The shape is the one the benches write: every entry of the shipped cache has it."""
    root = os.path.join(os.path.dirname(study_run.__file__), "..", "..", "examples",
                        "results", "runs_cache")
    names = [n for n in os.listdir(root) if n.endswith(".json")]
    assert len(names) > 100
    for n in names:
        with open(os.path.join(root, n)) as f:
            assert mismatch(json.load(f), cache_entry.ENTRY) is None, n


def test_the_run_of_a_bad_entry_trains_again_and_its_entry_replaces_it(tmp_path, monkeypatch,
                                                                          capsys):
    arm = plan.headline_arms(plan.QUICK)[0]
    st = study_run.Study([arm], plan.QUICK, str(tmp_path))
    first = st.searches()[0].needed[0]
    key = st.run_of(arm, *first).key
    bad = tmp_path / "runs_cache" / f"{key}.json"
    bad.parent.mkdir()
    bad.write_text("[]")
    trained = []
    monkeypatch.setattr(st, "_train", lambda run, threads, procs: (
        trained.append(run.key) or dict(_entry()["result"], code=dict(st.code_at_start))))
    st.run(1, max_runs=1)
    assert trained == [key]
    assert st.cache.get(key)["result"]["val_top1"] == 0.9
    assert capsys.readouterr().out.count(f"{key}.json is not a run a bench wrote") == 1


@pytest.mark.parametrize("bench", ["largebatch", "ablation"])
def test_the_bench_command_reads_a_cache_with_bad_entries_in_one_line_each(tmp_path, bench):
    arms = (plan.headline_arms if bench == "largebatch" else plan.ablation_arms)(plan.QUICK)
    st = study_run.Study(arms, plan.QUICK, str(tmp_path / "x"))
    keys = sorted({st.run_of(s.arm, *n).key for s in st.searches() for n in s.needed})
    cache = tmp_path / "cache"
    cache.mkdir()
    for k, text in zip(keys, ["[]", "null", "{not json", '{"code": 1}']):
        (cache / f"{k}.json").write_text(text)
    run = subprocess.run([YASGD, "bench", bench, "--quick", "--max-runs", "0", "--out",
                          str(tmp_path / "out"), "--cache", str(cache)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr + run.stdout, run.stderr
    said = [ln for ln in run.stdout.splitlines() if "is not a run a bench wrote" in ln]
    assert sorted(ln.split(": ")[1].split(" ")[0] for ln in said) == sorted(
        f"{k}.json" for k in keys[:4]), run.stdout
    assert (tmp_path / "out" / f"bench_{bench}.json").exists()
