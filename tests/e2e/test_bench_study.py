"""``yasgd bench ablation --quick`` and ``bench largebatch --quick`` end to end: real training
runs in real processes, a real SIGTERM in the middle, the cache continuing the bench.

The quick scale trains 2 epochs of 2,048 images (accuracies there mean nothing; what is
checked is the method and the files): the interrupted bench keeps every finished run, leaves
no worker process behind and exits 143; the same command then trains only what is missing,
finishes every arm's search and seeds, and writes the JSON (``seeds``,
``recipe_minus_baseline_8k``), the table and the plot; ``bench largebatch`` over the same
cache trains none of the runs the two benches share. A bench whose code is edited under it
stops at the first run of the new code, and the same command then finishes on it; a second
sitting on a cache that one is training into is refused; a bench ended by a hang-up or by
SIGKILL leaves no worker training.
"""
import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_resume import wait_until  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
YASGD = os.path.join(os.path.dirname(sys.executable), "yasgd")


def _env():
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    for k in [k for k in env if k.startswith(("OMPI_", "PMI_", "PMIX_", "HOROVOD_"))]:
        del env[k]
    return env


def _bench(name, out, *args, timeout=600):
    return subprocess.run([YASGD, "bench", name, "--quick", "--out", str(out), *args],
                          cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout)


def test_ablation_quick_resumes_after_sigterm_and_shares_runs_with_largebatch(tmp_path):
    out = tmp_path / "res"
    cache = out / "runs_cache"
    work = out / "study_runs" / "_work"
    proc = subprocess.Popen([YASGD, "bench", "ablation", "--quick", "--jobs", "2", "--out",
                             str(out)], cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        # the signal lands as the third run starts (its spec is written just before its
        # process): a start under way when the stop comes is stopped too, never missed
        deadline, specs = time.time() + 300, []
        while time.time() < deadline and len(specs) < 3:
            assert proc.poll() is None, proc.stdout.read()
            specs = sorted(work.glob("*.spec.json"), key=lambda p: p.stat().st_mtime_ns)
            time.sleep(0.005)
        assert len(specs) >= 3, "the third run did not start within 300 s"
        proc.send_signal(signal.SIGTERM)
        text, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, text
    assert "interrupted by SIGTERM" in text and "yasgd: stopped by SIGTERM" in text
    assert "Traceback" not in text
    third = specs[2].with_name(specs[2].name.replace(".spec.json", ".log"))
    assert not third.exists() or "final test accuracy" not in third.read_text(), \
        "the run that was starting when the bench was stopped trained to its end"
    kept = {p.name for p in cache.glob("*.json")}
    assert kept
    time.sleep(1)
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(out) not in ps, "a worker of the interrupted bench is still running"

    done = _bench("ablation", out)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert kept <= {p.name for p in cache.glob("*.json")}
    d = json.load(open(out / "bench_ablation.json"))
    arms = d["setup"]["arms"]
    assert {a["arm"] for a in arms} == {"baseline", "lars-1k", "no-warmup"}
    assert d["partial"] is False and all(a["complete"] for a in arms)
    assert d["seeds"] == [0, 1]
    assert all(a["seeds"] == [0, 1] and len(a["grid_lrs"]) >= 3 for a in arms)
    by = {a["arm"]: a for a in arms}
    want = 100 * (by["lars-1k"]["mean_test_top1"] - by["baseline"]["mean_test_top1"])
    assert abs(d["recipe_minus_baseline_8k"] - want) < 1e-9
    # every run in the table is in the cache, the interrupted runs' results were kept
    keys = {r["key"] for r in d["records"]}
    assert {k[:-5] for k in kept} <= keys <= {p.name[:-5] for p in cache.glob("*.json")}
    # one code version: each module any run loaded, with the digest every run recorded
    from yasgd.bench import runcache
    code, ran = d["setup"]["code"], [json.loads((cache / f"{k}.json").read_text())
                                     for k in keys]
    assert all(e["code"].items() <= code["modules"].items() for e in ran)
    assert set(code["modules"]) == {m for e in ran for m in e["code"]}
    assert code["version"] == runcache.code_version(code["modules"], code["env"])
    assert f"Code version of every run in this table: {code['version']}, " in (
        out / "bench_ablation.md").read_text()
    # every run records the machine it trained on; the report names it, run by run
    from yasgd.bench import machine
    here = machine.machine_label()
    assert {r["machine"] for r in d["records"]} == {here}
    assert d["hardware"]["runs_on"] == [[here, len(d["records"])]]
    assert f"Runs trained on: {here} ({len(d['records'])} runs). Table built on: " in (
        out / "bench_ablation.md").read_text()
    # the table, the search table and the two fresh-seed tables
    assert (out / "bench_ablation.md").read_text().count("| no warm-up |") == 4
    assert (out / "bench_ablation.png").stat().st_size > 1000
    # the recipe and the technique arm trained their fresh seed (2); the baseline did not
    assert by["lars-1k"]["fresh_seeds"] == by["no-warmup"]["fresh_seeds"] == [2]
    assert "fresh_seeds" not in by["baseline"]
    fa = d["fresh"]
    row, = fa["rows"]
    assert [a["arm"] for a in fa["arms"]] == ["no-warmup"] and fa["recipe"]["arm"] == "lars-1k"
    assert fa["checks"] == 1 + (row["beyond_spread"] is not False) and not fa["pending"]
    fresh_diff = 100 * (by["lars-1k"]["fresh_test_top1_by_seed"][0]
                        - by["no-warmup"]["fresh_test_top1_by_seed"][0])
    assert row["fresh_buys_pts"] == pytest.approx(fresh_diff, abs=1e-9)
    assert row["buys_pts"] == pytest.approx(-100 * (by["no-warmup"]["mean_test_top1"]
                                                    - by["lars-1k"]["mean_test_top1"]), abs=1e-9)
    # the two arms with a fresh seed, read seed by seed from the runs that trained
    se = fa["seed_effects"]
    assert se["arms"] == ["lars-1k", "no-warmup"] and se["seeds"] + se["fresh_seeds"] == [0, 1, 2]
    tests = [by[a]["test_top1_by_seed"] + by[a]["fresh_test_top1_by_seed"] for a in se["arms"]]
    assert se["mean_by_seed"] == pytest.approx([50 * (x + y) for x, y in zip(*tests)], abs=1e-9)
    assert "| 2 | fresh (no choice read it) |" in (out / "bench_ablation.md").read_text()
    line = d["acceptance"][-1]
    assert line["criterion"].startswith("the technique rows on fresh seeds")
    assert (line["value"], line["met"]) == (fa["passed"], fa["passed"] == fa["checks"])

    n_before = len(list(cache.glob("*.json")))
    lb = _bench("largebatch", out, "--arms", "baseline,lars-1k,sgd-1k")
    assert lb.returncode == 0, lb.stdout[-3000:] + lb.stderr[-3000:]
    started = [ln for ln in lb.stdout.splitlines() if " started] " in ln]
    # the shared arms' runs are read from the cache (the recipe's fresh seed among them);
    # largebatch trains SGD's and the fresh seed (2) of the baseline
    assert started and all(" sgd-1k " in ln or " seed 2: " in ln for ln in started), lb.stdout
    fresh = sorted(ln.split("] ")[1].split(" lr ")[0] for ln in started if " seed 2: " in ln)
    assert fresh == ["baseline", "sgd-1k"], lb.stdout
    assert len(list(cache.glob("*.json"))) == n_before + len(started)
    d2 = json.load(open(out / "bench_largebatch.json"))
    assert {a["arm"] for a in d2["setup"]["arms"]} == {"baseline", "lars-1k", "sgd-1k"}
    by2 = {a["arm"]: a for a in d2["setup"]["arms"]}
    assert by2["baseline"]["seeds"] == [0, 1] and by2["baseline"]["fresh_seeds"] == [2]
    assert by2["lars-1k"]["test_top1_by_seed"] == by["lars-1k"]["test_top1_by_seed"]
    # the check on the fresh seed: three arms and the two comparisons at 1K, all judged
    fr = d2["fresh"]
    assert [c["comparison"] for c in fr["comparisons"]] == ["recipe - baseline at 1K",
                                                            "recipe - SGD at 1K"]
    assert fr["checks"] == 5 and not fr["pending"]
    for a in fr["arms"]:
        want = 100 * (by2[a["arm"]]["fresh_test_top1_by_seed"][0] - a["mean"])
        assert a["shift_pts"] == pytest.approx(want, abs=1e-9)
        assert a["allowed_pts"] == pytest.approx(by2[a["arm"]]["spread_pts"], abs=1e-9)
    line = d2["acceptance"][-1]
    assert line["criterion"].startswith("the headline on fresh seeds")
    assert (line["value"], line["threshold"], line["met"]) == (fr["passed"], 5,
                                                               fr["passed"] == 5)
    assert "The compared arms on fresh seeds" in (out / "bench_largebatch.md").read_text()
    # the plots each bench wrote are those it names for the check before any work
    from yasgd.bench import ablation, largebatch
    assert d2["plots"] == largebatch.plots(True) and d["plots"] == ablation.plots(True)
    assert all((out / n).stat().st_size > 1000 for n in d2["plots"] + d["plots"])


def test_a_bench_whose_code_changes_while_it_runs_stops_with_one_line(tmp_path):
    """A pull or an edit under a running bench: the run of the new code is kept, the bench
    stops (one error line, exit 1) instead of asking for that run again and again, and the
    same command then finishes on the new code, reading the kept run."""
    import shutil
    copy = tmp_path / "checkout"
    shutil.copytree(os.path.join(ROOT, "yasgd"), copy / "yasgd",
                    ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "res"
    env = dict(_env(), PYTHONPATH=str(copy), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-c", "import sys; from yasgd.cli import main; "
           "sys.exit(main(sys.argv[1:]))", "bench", "largebatch", "--quick", "--arms",
           "baseline", "--jobs", "1", "--out", str(out)]
    proc = subprocess.Popen(cmd, cwd=str(tmp_path), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        intro = proc.stdout.readline()      # printed once the bench has read its code
        assert "runs side by side; cache " in intro, intro
        with open(copy / "yasgd" / "schedule.py", "a") as f:
            f.write("# an edit while the bench runs\n")
        rest, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, intro + rest + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "yasgd: error: the training code changed while the bench ran (yasgd.schedule): "), err
    kept = list((out / "runs_cache").glob("*.json"))
    assert len(kept) == 1, kept

    done = subprocess.run(cmd, cwd=str(tmp_path), env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    d = json.loads((out / "bench_largebatch.json").read_text())
    assert kept[0].name[:-5] in {r["key"] for r in d["records"]}
    started = [ln for ln in done.stdout.splitlines() if " started] " in ln]
    assert len(started) == len(d["records"]) - 1, done.stdout
    assert d["setup"]["code"]["modules"]["yasgd.schedule"] == hashlib.sha256(
        (copy / "yasgd" / "schedule.py").read_bytes()).hexdigest()


def test_one_training_sitting_at_a_time_on_a_cache(tmp_path):
    """A second sitting on a cache a bench is training into is refused at once (one line,
    exit 2, nothing trained): it would train the same runs again beside the first. A table
    from the cache as it is (--max-runs 0) is not refused; after the first ends, the second
    goes on from the cache."""
    cache = tmp_path / "a" / "runs_cache"
    first = subprocess.Popen([YASGD, "bench", "largebatch", "--quick", "--arms", "baseline",
                              "--jobs", "1", "--out", str(tmp_path / "a")], cwd=ROOT,
                             env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
    try:
        intro = first.stdout.readline()     # printed once the sitting holds the cache
        assert "runs side by side; cache " in intro, intro
        second = _bench("largebatch", tmp_path / "b", "--arms", "baseline", "--jobs", "1",
                        "--cache", str(cache), timeout=120)
        peek = _bench("largebatch", tmp_path / "c", "--arms", "baseline", "--max-runs", "0",
                      "--cache", str(cache), timeout=120)
        assert first.poll() is None, "the first sitting ended before the checks"
    finally:
        first.send_signal(signal.SIGTERM)
        rest = first.communicate(timeout=120)[0]
    assert second.returncode == 2, second.stdout + second.stderr
    assert second.stderr.splitlines() == [
        f"yasgd: error: --cache {cache}: another bench is training into this cache; the same "
        f"command continues from it once that one ends (or give another --cache)"]
    assert not (tmp_path / "b" / "study_runs").exists() and second.stdout == ""
    assert peek.returncode == 0, peek.stdout + peek.stderr
    assert first.returncode == 143, intro + rest
    kept = {p.name for p in cache.glob("*.json")}
    again = _bench("largebatch", tmp_path / "b", "--arms", "baseline", "--jobs", "1",
                   "--max-runs", "1", "--cache", str(cache), timeout=300)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert kept < {p.name for p in cache.glob("*.json")}


def _worker_pids(out):
    """The study workers training into ``out`` (by their command line)."""
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    args = f.read().decode(errors="replace")
                with open(f"/proc/{d}/stat") as f:
                    zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
            except OSError:
                continue
            if "yasgd.bench.study_worker" in args and str(out) in args and not zombie:
                pids.append(int(d))
    return pids


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGKILL], ids=["SIGHUP", "SIGKILL"])
def test_a_bench_that_ends_takes_its_workers_with_it(tmp_path, sig):
    # a closed terminal (SIGHUP) or a kill that nothing can catch (SIGKILL): the worker,
    # in its own session, would otherwise train on unwatched and write its result
    out = tmp_path / "res"
    proc = subprocess.Popen([YASGD, "bench", "largebatch", "--quick", "--arms", "baseline",
                             "--jobs", "1", "--out", str(out)], cwd=ROOT, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))
    workers = []
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not workers and proc.poll() is None:
            workers = _worker_pids(out)
            time.sleep(0.02)
        assert workers, "no worker started"
        proc.send_signal(sig)
        proc.communicate(timeout=60)
        wait_until(lambda: not _worker_pids(out), 10, "the ended bench's worker to end")
    finally:
        for pid in [proc.pid] + _worker_pids(out):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    time.sleep(5)                       # longer than a quick run: nothing finishes later
    assert not list(out.glob("**/*.result.json")), "the worker went on and finished its run"
    assert not list((out / "runs_cache").glob("*.json"))
