"""The MLPerf log reader (yasgd/simulate/mlperf_logs.py) on logs written here in the three formats
the recorded runs use (v0.5 ``:::MLPv0.5.0``, v0.6 ``:::MLL``, v0.7 on ``:::MLLOG``), against the
figures worked out by hand from the stamps; and the recorded entries against the reader's rule."""
import json
import math
import os
import statistics
import subprocess
import sys

import pytest

from yasgd import UsageError
from yasgd.simulate import mlperf_logs as ml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _stamps(t0=1000.0, epochs=(9.0, 4.0, 4.2, 3.9, 4.1), evals_after=(1, 3, 5),
            eval_s=(0.5, 0.9, 0.6), startup=1.5, accs=(0.60, 0.70, 0.76), tail=0.25,
            train_samples=None):
    """(seconds, key, value, metadata): run_start, then epochs of the given lengths back to
    back, evaluations of the lengths eval_s after the epochs in evals_after, run_stop tail s
    later."""
    out = [(t0, "run_start", None, {}), (t0, "global_batch_size", 3200, {})]
    if train_samples:
        out.append((t0, "train_samples", train_samples, {}))
    t = t0 + startup
    acc, ev = iter(accs), iter(eval_s)
    for n, d in enumerate(epochs, 1):
        out += [(t, "epoch_start", None, {"epoch_num": n}),
                (t + d, "epoch_stop", None, {"epoch_num": n})]
        t += d
        if n in evals_after:
            d = next(ev)
            out += [(t, "eval_start", None, {"epoch_num": n}),
                    (t + d, "eval_stop", None, {"epoch_num": n}),
                    (t + d, "eval_accuracy", next(acc), {"epoch_num": n})]
            t += d
    return out + [(t + tail, "run_stop", None, {"status": "success"})]


def _mllog(stamps):
    return "".join(
        "noise before :::MLLOG " + json.dumps({"namespace": "", "time_ms": round(s * 1000),
                                               "event_type": "POINT_IN_TIME", "key": k,
                                               "value": v, "metadata": m}) + "\n"
        + "some other line\n" for s, k, v, m in stamps)


def _mll(stamps):
    return "".join(f":::MLL {s:.3f} {k}: " + json.dumps({"value": v, "metadata": m}) + "\n"
                   + "2019-06-18 Node[0] not an event\n" for s, k, v, m in stamps)


def _mlp05(stamps):
    """v0.5: each epoch's start as ``train_epoch: <n - 1>`` (no epoch_stop), the accuracy as a
    dict, and ``run_final`` after ``run_stop``."""
    out = []
    for s, k, v, m in stamps:
        if k == "epoch_stop":
            continue
        if k == "epoch_start":
            k, v = "train_epoch", m["epoch_num"] - 1
        if k == "eval_accuracy":
            v = {"epoch": m["epoch_num"], "value": v}
        line = f":::MLPv0.5.0 resnet {s:.9f} (/workspace/mlperf_log_utils.py:49) {k}"
        out.append(line + ("" if v is None else f": {json.dumps(v)}"))
        if k == "run_stop":
            out.append(f":::MLPv0.5.0 resnet {s + 0.05:.9f} (/workspace/x.py:1) run_final")
    return "\n".join(out) + "\n"


def test_a_v05_run_is_timed_between_train_epoch_stamps():
    # the epoch after the last train_epoch stamp is counted but not timed; evaluations that
    # fall between two stamps are taken out of that epoch; the run ends at run_final
    r = ml.read_run(_mlp05(_stamps()))
    run_s = 1.5 + (9 + 4 + 4.2 + 3.9 + 4.1) + (0.5 + 0.9 + 0.6) + 0.25 + 0.05
    assert r["run_s"] == pytest.approx(run_s, abs=1e-3)
    assert (r["epochs"], r["evals"], r["final_accuracy"]) == (5, 3, 0.76)
    assert r["median_epoch_s"] == pytest.approx(4.0, abs=1e-4)     # median of 4, 4.2, 3.9
    assert r["first_epoch_s"] == pytest.approx(9.0, abs=1e-3)
    assert r["eval_s_median"] == pytest.approx(0.6, abs=1e-4)
    assert r["stamps_cover_run"] == pytest.approx(round((21.1 + 3 * 0.6) / run_s, 3), abs=1e-9)


@pytest.mark.parametrize("fmt", [_mllog, _mll])
def test_one_run_read_by_the_rule(fmt):
    r = ml.read_run(fmt(_stamps()))
    run_s = 1.5 + (9 + 4 + 4.2 + 3.9 + 4.1) + (0.5 + 0.9 + 0.6) + 0.25
    assert r["run_s"] == pytest.approx(run_s, abs=1e-3)
    assert (r["epochs"], r["evals"], r["final_accuracy"]) == (5, 3, 0.76)
    assert r["median_epoch_s"] == pytest.approx(4.05, abs=1e-4)    # median of 4, 4.2, 3.9, 4.1
    assert r["first_epoch_s"] == pytest.approx(9.0, abs=1e-3)
    assert r["eval_s_median"] == pytest.approx(0.6, abs=1e-4)
    assert r["run_start_to_first_epoch_s"] == pytest.approx(1.5, abs=1e-3)
    # the evaluations count as their number x their median (the recorded rule), not their sum
    assert r["stamps_cover_run"] == pytest.approx(round((25.2 + 3 * 0.6) / run_s, 3), abs=1e-9)


def _folder(tmp_path, tails, uncovered=None):
    for i, tail in enumerate(tails):
        st = _stamps(tail=tail)
        if i == uncovered:          # a run whose stamps leave most of it out
            st = _stamps(tail=100.0)
        (tmp_path / f"result_{i}.txt").write_text(_mllog(st))
    (tmp_path / "scaling.json").write_text("{}")
    return str(tmp_path)


def test_a_results_folder_median_score_and_runs_used(tmp_path):
    folder = _folder(tmp_path, tails=(0.3, 0.1, 5.0, 0.2, 0.4), uncovered=2)
    e = ml.read_results(folder, gpus=64)
    assert e["files"] == [f"result_{i}.txt" for i in range(5)]
    assert e["runs_used"] == ["result_0.txt", "result_1.txt", "result_3.txt", "result_4.txt"]
    steps = math.ceil(1_281_167 / 3200)
    assert (e["global_batch"], e["per_gpu_batch"], e["steps_per_epoch"]) == (3200, 50, steps)
    assert e["median_epoch_s"] == pytest.approx(4.05, abs=1e-4)
    assert e["iteration_s"] == pytest.approx(4.05 / steps, abs=1e-6)
    assert e["images_per_s"] == pytest.approx(3200 * steps / 4.05, abs=0.1)
    # the score: the middle three of five run times (fastest and slowest out), in that order
    times = {r["file"]: r["run_s"] for r in e["runs"]}
    assert e["score_runs"] == ["result_3.txt", "result_0.txt", "result_4.txt"]
    assert e["score_s"] == pytest.approx(sum(times[f] for f in e["score_runs"]) / 3, abs=1e-3)
    assert (e["epochs"], e["evals"]) == (5, 3)


def test_the_training_set_is_the_logs_where_they_give_it(tmp_path):
    # MLPerf v0.7 on (and yasgd's own mlperf.log) log train_samples; ImageNet's where absent
    for i in range(3):
        (tmp_path / f"result_{i}.txt").write_text(_mllog(_stamps(train_samples=50_000)))
    e = ml.read_results(str(tmp_path), gpus=8)
    assert e["train_samples"] == 50_000 and e["steps_per_epoch"] == math.ceil(50_000 / 3200)
    assert e["images_per_s"] == pytest.approx(3200 * 16 / 4.05, abs=0.1)
    assert "score_s" not in e                               # a score needs five runs
    (tmp_path / "result_3.txt").write_text(_mllog(_stamps(train_samples=60_000)))
    with pytest.raises(UsageError, match=r"different train_samples: \[50000, 60000\]"):
        ml.read_results(str(tmp_path), gpus=8)


def test_steps_are_counted_in_integers_and_a_batch_is_no_more_than_an_epoch(tmp_path):
    # 2**60 + 1 samples in batches of 8: one step more than 2**57, which a float quotient loses
    (tmp_path / "result_0.txt").write_text(_mllog(_stamps(train_samples=2 ** 60 + 1)))
    assert ml.read_results(str(tmp_path), gpus=8, batch=8)["steps_per_epoch"] == 2 ** 57 + 1
    (tmp_path / "result_0.txt").write_text(_mllog(_stamps(train_samples=1000)))
    with pytest.raises(UsageError, match=f"^{tmp_path}: the logs' global_batch_size 3200 is "
                       "more than the 1,000 training samples of an epoch"):
        ml.read_results(str(tmp_path), gpus=8)


def test_the_recorded_entries_follow_the_readers_rule():
    # the runs used and the iteration, from each recorded entry's own runs (single-node entries
    # too; test_simulate_validate checks the multi-node scores)
    with open(os.path.join(REPO, "examples", "results", "mlperf_logs.json")) as f:
        rec = json.load(f)
    for e in rec["single_node"] + rec["multi_node"]:
        used = [r["file"] for r in e["runs"] if r["stamps_cover_run"] >= ml.COVER]
        assert e["runs_used"] == used
        assert e["train_samples"] == ml.IMAGENET_TRAIN
        steps = math.ceil(e["train_samples"] / e["global_batch"])
        assert e["iteration_s"] == pytest.approx(e["median_epoch_s"] / steps, abs=1e-6)
        assert e["median_epoch_s"] == pytest.approx(statistics.median(
            r["median_epoch_s"] for r in e["runs"] if r["file"] in used), abs=1e-9)


def test_bad_logs_are_one_clear_error(tmp_path):
    st = [s for s in _stamps() if s[1] != "run_stop"]
    with pytest.raises(UsageError, match="0 run_stop stamps"):
        ml.read_run(_mllog(st))
    with pytest.raises(UsageError, match="fewer than two epochs"):
        ml.read_run(_mllog([s for s in _stamps() if s[1] != "epoch_stop"]))
    with pytest.raises(UsageError, match="no result_"):
        ml.read_results(str(tmp_path), gpus=8)
    _folder(tmp_path, tails=(0.1,) * 5)
    with pytest.raises(UsageError, match="not a multiple of --gpus 7"):
        ml.read_results(str(tmp_path), gpus=7)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "yasgd.simulate.mlperf_logs", *args],
                          capture_output=True, text=True, cwd=REPO)


def test_cli_prints_the_entry_and_refuses_bad_input(tmp_path):
    (tmp_path / "ok").mkdir()
    folder = _folder(tmp_path / "ok", tails=(0.1, 0.2, 0.3, 0.4, 0.5))
    p = _cli(folder, "--gpus", "64")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == ml.read_results(folder, gpus=64)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "result_0.txt").write_text(":::MLLOG {not json\n")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "result_0.txt").write_bytes(b"\xff\xfe:::MLLOG\n")
    (tmp_path / "short").mkdir()
    (tmp_path / "short" / "result_0.txt").write_text(
        _mllog([s for s in _stamps() if s[1] != "run_stop"]))
    bad = [((folder, "--gpus", "0"), "--gpus"), ((folder,), "--gpus"),
           ((str(tmp_path / "nope"), "--gpus", "8"), "nope"),
           ((folder, "--gpus", "7"), "--gpus 7"),
           ((folder, "--gpus", "8", "--batch", "8" + "0" * 400),
            "--batch 8" + "0" * 36 + "... is more than the 1,281,167 training samples of an "
            "epoch"),
           ((str(tmp_path / "bad"), "--gpus", "8"), "bad/result_0.txt: a line is not an MLPerf"),
           ((str(tmp_path / "bin"), "--gpus", "8"), "bin/result_0.txt: not a text log"),
           ((str(tmp_path / "short"), "--gpus", "8"),
            "short/result_0.txt: the log has 0 run_stop")]
    for args, what in bad:
        p = _cli(*args)
        assert p.returncode == 2 and p.stdout == "", (args, p.stdout)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1, p.stderr
        assert lines[0].startswith("yasgd: error: simulate.mlperf_logs: "), p.stderr
        assert what in lines[0] and "Traceback" not in p.stderr


def _with(stamps, key, value=None, time=None):
    """``stamps`` with the ``key`` stamp given the value ``value`` (or the time ``time``)."""
    out = []
    for s, k, v, m in stamps:
        if k == key:
            s, v = (s, value) if time is None else (time, v)
        out.append((s, k, v, m))
    return out


DEEP = "[" * 200_000          # deeper than json's recursion limit


BAD_LOGS = {   # case: (the log, what the error line says after the file's path)
    "no-run-time": (_mllog(_with(_stamps(), "run_stop", time=1000.0)),
                    "run_stop is not after run_start"),
    # v0.5: run_start moved to run_final's time (5 + 1.5 + 25.2 + 2.0 + 0.25 + 0.05 s)
    "v05-no-run-time": (_mlp05(_with(_stamps(t0=5.0), "run_start", time=34.0)),
                        "run_final is not after run_start"),
    "no-epoch-time": (_mllog(_stamps(epochs=(9.0, 0.0, 0.0, 0.0, 0.0))),
                      "epoch_num 2: epoch_stop is not after epoch_start"),
    # one epoch of no length (or less) among others: refused, though the median is positive
    "epoch-zero": (_mllog(_stamps(epochs=(9.0, 4.0, 0.0, 3.9, 4.1))),
                   "epoch_num 3: epoch_stop is not after epoch_start (epoch_stop - "
                   "epoch_start = 0 s)"),
    "epoch-negative": (_mll(_stamps(epochs=(9.0, 4.0, 4.2, -0.5, 4.1))),
                       "epoch_num 4: epoch_stop is not after epoch_start (epoch_stop - "
                       "epoch_start = -0.5 s)"),
    "v05-epoch-zero": (_mlp05(_stamps(epochs=(9.0, 4.0, 0.0, 3.9, 4.1), evals_after=())),
                       "train_epoch 2: the epoch lasts 0 s"),
    "samples-huge": (_mllog(_stamps(train_samples=10 ** 400)),
                     "train_samples is 1" + "0" * 36 + "..., more than "
                     "9,223,372,036,854,775,807"),
    "deep-mllog": (_mllog(_stamps()) + f":::MLLOG {DEEP}\n", "a line is not an MLPerf event"),
    "deep-mll": (_mll(_stamps()) + f":::MLL 1.0 k: {DEEP}\n", "a line is not an MLPerf event"),
    "nan-time": (_mllog(_stamps()).replace('"time_ms": 1000000', '"time_ms": NaN', 1),
                 "a line is not an MLPerf event"),
    "batch-negative": (_mllog(_with(_stamps(), "global_batch_size", -256)),
                       "global_batch_size is -256"),
    "batch-0": (_mllog(_with(_stamps(), "global_batch_size", 0)), "global_batch_size is 0"),
    "batch-fraction": (_mllog(_with(_stamps(), "global_batch_size", 256.5)),
                       "global_batch_size is 256.5"),
    "batch-text": (_mllog(_with(_stamps(), "global_batch_size", "many")),
                   "global_batch_size is 'many'"),
    "samples-negative": (_mllog(_stamps(train_samples=-1)), "train_samples is -1"),
    "binary": (b"\x7fELF\x02\x01\x01\x00" + b"\x00" * 64,
               "not a text log (a NUL byte at byte 7)"),
}


@pytest.mark.parametrize("case", sorted(BAD_LOGS))
def test_cli_refuses_a_log_it_cannot_read_naming_the_file(tmp_path, case):
    # one line naming the file and what is wrong with it, exit 2, no figures and no traceback:
    # a run of no length, epochs of no length, JSON nested past the parser, a time stamp that
    # is no number, a batch or training set that is no positive integer, a binary file
    log, what = BAD_LOGS[case]
    path = tmp_path / "result_0.txt"
    path.write_bytes(log if isinstance(log, bytes) else log.encode())
    p = _cli(str(tmp_path), "--gpus", "8")
    assert p.returncode == 2 and p.stdout == "", (p.returncode, p.stdout, p.stderr[-2000:])
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("yasgd: error: simulate.mlperf_logs: "), \
        p.stderr[-2000:]
    assert f"{path}: {what}" in lines[0] and "Traceback" not in p.stderr


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_cli_refuses_a_result_that_is_no_regular_file(tmp_path, kind):
    # a FIFO would block the read for good (the 60 s bound), a folder fail it
    path = tmp_path / "result_0.txt"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    p = subprocess.run([sys.executable, "-m", "yasgd.simulate.mlperf_logs", str(tmp_path),
                        "--gpus", "8"], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert (p.returncode, p.stdout) == (2, "")
    assert p.stderr == (f"yasgd: error: simulate.mlperf_logs: {path}: not a regular file\n"), \
        p.stderr


def test_a_v05_value_nested_past_the_parser_is_kept_as_text():
    # v0.5 keeps a value that is not JSON as its text; so too one nested past json's limit
    ev = ml.events(f":::MLPv0.5.0 resnet 1.5 (x.py:1) opt_name: {DEEP}\n")
    assert ev == [{"time_s": 1.5, "key": "opt_name", "value": DEEP, "metadata": {}}]
