"""yasgd.workers.Workers on real forked processes (and spawned ones, its fallback where
``fork`` is missing): results in the order of the jobs, a job's exception raised in the
caller, a worker that dies named as such, and an end in the middle of busy workers that
never waits for good (``multiprocessing.Pool.terminate`` can: see the module's docstring)."""
import os
import signal
import threading
import time

import pytest

from yasgd.workers import WorkerDied, Workers

# timed processes and signals: alone, after the other unit tests (pytest.ini, "serial")
pytestmark = pytest.mark.serial

BIG = 200_000  # bytes a result carries: more than a pipe holds, so workers block writing


def _square(x):
    return x * x


def _big(x):
    return x, os.urandom(BIG)


def _fails_at_7(x):
    if x == 7:
        raise ValueError("job 7")
    return x


def _slow(x):
    time.sleep(0.05)
    return os.getpid()


def _ended_within(fn, seconds):
    done = threading.Event()
    threading.Thread(target=lambda: (fn(), done.set()), daemon=True).start()
    return done.wait(seconds)


@pytest.mark.parametrize("n,chunksize,ahead,jobs", [
    (1, 1, 1, 5), (2, 8, 2, 100), (3, 4, 1, 37), (2, 8, 3, 0), (4, 16, 2, 3),
])
def test_results_come_in_the_order_of_the_jobs(n, chunksize, ahead, jobs):
    with Workers(_square, list(range(jobs)), n, chunksize=chunksize, ahead=ahead) as w:
        assert list(w) == [x * x for x in range(jobs)]
        procs = list(w._procs)
    assert all(p.exitcode is not None for p in procs), "a worker outlived the block"


def test_a_jobs_exception_is_raised_in_the_caller():
    with Workers(_fails_at_7, list(range(40)), 2, chunksize=4) as w:
        got = []
        with pytest.raises(ValueError, match="job 7"):
            for x in w:
                got.append(x)
    assert got == list(range(4))  # the chunk with job 7 yields nothing


def test_a_worker_that_dies_is_named_with_its_jobs():
    jobs = list(range(200))
    with Workers(_slow, jobs, 2, chunksize=2) as w:
        it = iter(w)
        first = next(it)  # worker 0's pid: chunk 0 went to worker 0
        os.kill(first, signal.SIGKILL)
        with pytest.raises(WorkerDied) as e:
            for _ in it:
                pass
    assert e.value.how == "it was killed by SIGKILL"
    assert len(e.value.jobs) == 2 and e.value.jobs[0] % 4 == 0, e.value.jobs  # worker 0's


def test_workers_leave_the_process_group_and_ignore_ctrl_c():
    with Workers(_slow, list(range(100)), 2, chunksize=1) as w:
        pids = {next(iter(w))}
        assert all(os.getpgid(p) == p != os.getpgrp() for p in (x.pid for x in w._procs))
        for p in w._procs:
            os.kill(p.pid, signal.SIGINT)
            os.kill(p.pid, signal.SIGHUP)
        time.sleep(0.2)
        assert all(p.exitcode is None for p in w._procs), "a worker ended on SIGINT/SIGHUP"
        assert pids <= {p.pid for p in w._procs}


def test_ending_busy_workers_at_any_point_never_waits_for_good():
    # Each round leaves both workers busy, blocked writing results no one reads, and ends
    # them from another thread; 15 s bounds each end. On multiprocessing.Pool (imap, then
    # terminate and join) rounds like these hang.
    for i in range(60):
        w = Workers(_big, list(range(4000)), 2)
        it = iter(w)
        got = [next(it)[0] for _ in range(16 + i % 50)]
        assert got == list(range(len(got)))
        assert _ended_within(w.close, 15), f"close() did not return (round {i})"


def test_where_fork_is_missing_the_workers_are_spawned(monkeypatch):
    # the fallback: a fresh interpreter per worker, the functions and jobs pickled; the
    # same order, the same setup (a process group of its own), the same death as an error
    import multiprocessing
    monkeypatch.setattr(multiprocessing, "get_all_start_methods", lambda: ["spawn"])
    with Workers(_square, list(range(50)), 2, chunksize=4) as w:
        assert list(w) == [x * x for x in range(50)]
        procs = list(w._procs)
    assert [type(p).__name__ for p in procs] == ["SpawnProcess"] * 2
    assert all(p.exitcode is not None for p in procs), "a worker outlived the block"
    with Workers(_slow, list(range(200)), 2, chunksize=2) as w:
        it = iter(w)
        first = next(it)                # worker 0 has set itself up
        deadline = time.monotonic() + 30  # worker 1 may still be starting its interpreter
        while time.monotonic() < deadline and os.getpgid(w._procs[1].pid) != w._procs[1].pid:
            time.sleep(0.01)
        assert all(os.getpgid(p) == p != os.getpgrp() for p in (x.pid for x in w._procs))
        os.kill(first, signal.SIGKILL)
        with pytest.raises(WorkerDied, match="it was killed by SIGKILL"):
            for _ in it:
                pass
