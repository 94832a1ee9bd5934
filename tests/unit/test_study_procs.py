"""The processes of a training bench's sitting (``yasgd.bench.study_procs``), on real
processes, threads and signals: a stop reaches every worker that started, one whose start
was under way when the stop came included, and its whole session; no worker starts after
it; and the bench's wait lets its main thread run a stop that another thread received. The
bench's own stop, as a run starts, is tests/e2e/test_bench_study.py.
"""
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from yasgd.bench.study_procs import Workers, first_done

SLEEP = ["sleep", "60"]


def _gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "Z"


def _until(cond, timeout=10.0):
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def test_a_start_under_way_when_the_stop_comes_is_waited_for_and_stopped(tmp_path):
    w, got, forked = Workers(), {}, tmp_path / "forked"

    def between_fork_and_exec():
        forked.touch()
        time.sleep(1.0)

    t = threading.Thread(target=lambda: got.update(
        p=w.start("a", SLEEP, preexec_fn=between_fork_and_exec)))
    t.start()
    try:
        _until(forked.exists)           # the child exists; Popen has not returned
        w.stop()
        t.join(10)
        assert got["p"].wait(timeout=10) == -signal.SIGTERM
    finally:
        t.join(10)
        if "p" in got and got["p"].poll() is None:
            got["p"].kill()
            got["p"].wait()
    with pytest.raises(Workers.Cancelled, match="run b not started: the bench is stopping"):
        w.start("b", SLEEP)


def test_the_stop_reaches_the_workers_session_and_passes_over_ended_ones(tmp_path):
    w, pidfile = Workers(), tmp_path / "child"
    ended = w.start("ended", ["true"])
    ended.wait()
    done = w.start("done", SLEEP)
    w.ended("done")                     # its thread saw it end: not signalled again
    p = w.start("a", ["sh", "-c", f"sleep 60 & echo $! > {pidfile}; wait"])
    try:
        _until(lambda: pidfile.exists() and pidfile.read_text().strip())
        child = int(pidfile.read_text())
        w.stop()
        assert p.wait(timeout=10) == -signal.SIGTERM
        _until(lambda: _gone(child))
        assert done.poll() is None
    finally:
        for q in (p, done):
            if q.poll() is None:
                q.kill()
                q.wait()


class _Stop(Exception):
    pass


def test_the_wait_runs_a_stop_that_another_thread_received():
    # the kernel gives a process's signal to any thread that does not block it; Python runs
    # the handler in the main thread, once that thread runs Python code again
    def handler(signum, frame):
        raise _Stop(signum)

    old = signal.signal(signal.SIGTERM, handler)
    release, ident = threading.Event(), []
    try:
        with ThreadPoolExecutor(1) as ex:
            run = ex.submit(lambda: ident.append(threading.get_ident()) or release.wait(10))
            _until(lambda: ident)
            threading.Timer(0.2, signal.pthread_kill, (ident[0], signal.SIGTERM)).start()
            t0 = time.monotonic()
            try:
                with pytest.raises(_Stop):
                    first_done([run], poll=0.1)
                took = time.monotonic() - t0
            finally:
                release.set()
    finally:
        signal.signal(signal.SIGTERM, old)
    assert took < 3, took               # the run it waited for lasts 10 s
