"""Stop signals to the commands that stop by unwinding (all but ``yasgd train``, whose ranks
stop at a step with a checkpoint: tests/e2e/test_faults.py): ``yasgd data im2rec`` with a
pool of worker processes, signalled as a terminal or a scheduler signals a job (its whole
process group) while it writes. Each signal ends it with one line and exit status 128 + its
number, the partial files removed, no worker left, no traceback from the parent or a worker.
A worker that dies ends it with one line. A bench killed outright leaves none of the
processes it started. ``yasgd bench data`` signalled while gluon's DataLoader loads with
worker processes of its own making ends the same way. A bench signalled while it writes
its results leaves the results it had before, whole.
"""
import os
import signal
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_resume import wait_until  # noqa: E402
from yasgd.data.testdata import make_imagenet_folder  # noqa: E402
from yasgd.supervise import _children, _live, _stat, descendants  # noqa: E402

YASGD = os.path.join(os.path.dirname(sys.executable), "yasgd")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    # about two seconds of writing with 2 workers here: the signal lands while it writes
    return make_imagenet_folder(str(tmp_path_factory.mktemp("inet")), 400, 1)


def _writing(folder, out, **popen):
    """``yasgd data im2rec`` with 2 workers, in its own session, once it writes records:
    the process and its workers' pids."""
    proc = subprocess.Popen([YASGD, "data", "im2rec", folder, str(out), "--workers", "2"],
                            env=dict(os.environ, OMP_NUM_THREADS="1"), start_new_session=True,
                            **popen)
    part = out / "train.rec.part"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None and not (
            part.exists() and part.stat().st_size > 0):
        time.sleep(0.005)
    workers = _children().get(proc.pid, [])
    if proc.poll() is not None or len(workers) < 2:
        proc.kill()
        raise AssertionError("im2rec was not writing")
    return proc, workers


def _left(workers):
    return [w for w in workers if _live(_stat(f"/proc/{w}/stat"))]


def _killed_alone(proc, started):
    """SIGKILL ``proc`` alone; each of the processes it ``started`` ends within 10 s."""
    proc.kill()
    proc.wait(timeout=30)
    wait_until(lambda: not _left(started), 10, "the processes it started to end")


def _kill_all(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.parametrize("sig,line", [
    (signal.SIGINT, "yasgd: interrupted"),
    (signal.SIGTERM, "yasgd: stopped by SIGTERM"),
    (signal.SIGHUP, "yasgd: stopped by SIGHUP"),
], ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_im2rec_stopped_while_it_writes(folder, tmp_path, sig, line):
    out = tmp_path / "rec"
    proc, workers = _writing(folder, out, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))
    try:
        os.killpg(proc.pid, sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    assert proc.returncode == 128 + sig, err
    assert err.rstrip("\n").splitlines()[-1] == line, err
    assert "Traceback" not in err and "ForkPoolWorker" not in err, err
    assert not list(out.glob("*.part")) and not (out / "train.rec").exists(), os.listdir(out)
    time.sleep(0.5)
    assert not _left(workers), "a worker is left"


def test_im2rec_killed_outright_takes_its_workers_with_it(folder, tmp_path):
    # the workers are out of its process group (a group's signal is the parent's to handle)
    # and tied to it instead: SIGKILL, which it cannot handle, still ends them
    proc, workers = _writing(folder, tmp_path / "rec", stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        _killed_alone(proc, workers)
    finally:
        _kill_all([proc.pid] + workers)


def test_im2rec_worker_killed_is_one_line_naming_its_images(folder, tmp_path):
    # a worker that dies (the OOM killer, a crash in the decoder) ends the command with
    # the images it held, not a wait for results that never come
    out = tmp_path / "rec"
    proc, workers = _writing(folder, out, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        os.kill(workers[0], signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    last = err.rstrip("\n").splitlines()[-1]
    assert proc.returncode == 2, err
    assert last.startswith("yasgd: error: im2rec: a worker process died while it encoded "
                           "one of ") and "(it was killed by SIGKILL)" in last, err
    assert str(folder) in last and "Traceback" not in err, err
    assert not list(out.glob("*.part")) and not (out / "train.rec").exists(), os.listdir(out)
    time.sleep(0.5)
    assert not _left(workers), "a worker is left"


@pytest.mark.parametrize("bench,worker", [
    ("optimizer", "yasgd.bench.optimizer"),   # a worker process (procs.run_process)
    ("allreduce", "yasgd.bench.allreduce"),   # 2 ranks through yasgd.launch (launch_ranks)
])
def test_a_bench_killed_outright_takes_its_timed_processes_with_it(tmp_path, bench, worker):
    # SIGKILL to the bench alone (not its group: nothing else reaches its children), once
    # its timed processes run: each is tied to it and ends, the launcher's ranks included
    # not --quick: left alone, its timed processes run for longer than the wait below
    proc = subprocess.Popen([YASGD, "bench", bench, "--out", str(tmp_path)],
                            env=dict(os.environ, OMP_NUM_THREADS="1"), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started = []
    try:
        def workers_run():
            tree = descendants(proc.pid)
            started[:] = tree
            ranks = [p for p in tree if _cmdline(p).split()[1:3] == ["-m", worker]]
            return len(ranks) == (2 if bench == "allreduce" else 1)
        wait_until(workers_run, 120, f"{worker} to start")
        assert len(started) == (4 if bench == "allreduce" else 1), started  # launcher, mpirun
        _killed_alone(proc, started)
    finally:
        _kill_all([proc.pid] + started)


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@pytest.mark.parametrize("sig,line", [
    (signal.SIGINT, "yasgd: interrupted"),
    (signal.SIGTERM, "yasgd: stopped by SIGTERM"),
    (signal.SIGHUP, "yasgd: stopped by SIGHUP"),
], ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_bench_data_stopped_while_gluons_worker_processes_load(tmp_path, sig, line):
    # `bench data` times gluon's DataLoader with worker processes of its own making (a
    # multiprocessing.Pool): the group's signal reaches only the bench, which ends the
    # pool as the DataLoader does; one line, no worker's traceback, nothing left (no process,
    # nothing in the temporary folder, where the workers made their sockets), no result
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen([YASGD, "bench", "data", "--quick", "--out", str(tmp_path)],
                            env=dict(os.environ, OMP_NUM_THREADS="1", TMPDIR=str(tmp)),
                            start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))
    workers = []
    try:
        for out in proc.stdout:         # the arm before the one with worker processes
            if out.lstrip().startswith("gluon ImageFolderDataset"):
                break
        wait_until(lambda: len(descendants(proc.pid)) >= 2, 60, "the DataLoader's workers")
        workers = descendants(proc.pid)
        time.sleep(0.3)
        os.killpg(proc.pid, sig)
        _, err = proc.communicate(timeout=60)
    finally:
        _kill_all([proc.pid] + workers)
    assert (proc.returncode, err) == (128 + sig, line + "\n"), err
    wait_until(lambda: not _left(workers), 10, "the DataLoader's workers to end")
    assert not (tmp_path / "bench_data.json").exists()
    assert os.listdir(tmp) == []


def test_a_bench_stopped_while_it_writes_its_results_leaves_the_old_ones(tmp_path):
    # the folder holds an earlier result; the group's SIGTERM lands the moment the bench
    # starts writing the new one (its first file appears): the old plot, JSON and table
    # stay as they were, whole, and nothing else is left in the folder
    names = ["bench_optimizer.json", "bench_optimizer.md", "bench_optimizer.png"]
    for n in names:
        (tmp_path / n).write_text(f"an earlier {n}\n")
    before = {n: os.stat(tmp_path / n).st_mtime_ns for n in names}
    proc = subprocess.Popen([YASGD, "bench", "optimizer", "--quick", "--out", str(tmp_path)],
                            env=dict(os.environ, OMP_NUM_THREADS="1"), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while proc.poll() is None and time.monotonic() < deadline:
            entries = os.listdir(tmp_path)
            if len(entries) > len(names) or any(
                    os.stat(tmp_path / n).st_mtime_ns != before[n] for n in names):
                os.killpg(proc.pid, signal.SIGTERM)
                break
            time.sleep(0.001)
        _, err = proc.communicate(timeout=60)
    finally:
        _kill_all([proc.pid])
    assert (proc.returncode, err) == (143, "yasgd: stopped by SIGTERM\n"), err
    assert sorted(os.listdir(tmp_path)) == names
    assert [(tmp_path / n).read_bytes()[:40] for n in names] == [
        f"an earlier {n}\n".encode() for n in names]
