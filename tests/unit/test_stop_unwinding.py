"""``yasgd.supervise.stop_by_unwinding`` where a raised stop cannot simply propagate: a
signal that lands in a finaliser, processes forked by a library's worker pool (gluon's
DataLoader) that inherit the handler, and a clean-up that never ends. Each case runs in a
process of its own, with real signals, real forks and MXNet's own DataLoader.
"""
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from yasgd.supervise import _live, _stat

# timed processes and signals: alone, after the other unit tests (pytest.ini, "serial")
pytestmark = pytest.mark.serial

HEAD = """
import os, signal, sys, threading, time
from yasgd import supervise
from yasgd.supervise import stop_by_unwinding
stop_by_unwinding()
"""


def _start(body, tmp):
    """``body`` after HEAD in a fresh interpreter, in a session of its own, its output in
    files (a process it leaves behind cannot hold a pipe open), its temporary files in
    ``tmp`` (a pool's worker ended by SIGTERM leaves its folder there): the Popen."""
    with open(tmp / "out", "w") as out, open(tmp / "err", "w") as err:
        return subprocess.Popen([sys.executable, "-c", HEAD + textwrap.dedent(body)],
                                stdout=out, stderr=err, start_new_session=True,
                                env=dict(os.environ, OMP_NUM_THREADS="1", TMPDIR=str(tmp)),
                                preexec_fn=hangup_as_in_a_terminal)


def hangup_as_in_a_terminal():
    """SIGHUP's default action in the child, also when the tests run under ``nohup``
    (whose ignored SIGHUP a child inherits, and yasgd then leaves ignored)."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _end(proc, tmp, timeout):
    """Wait for ``proc`` at most ``timeout`` s, then kill whatever is left of its session:
    its (exit status, stdout, stderr); None for a status it did not reach."""
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        rc = None
    _kill_session(proc.pid)
    proc.wait()
    return rc, (tmp / "out").read_text(), (tmp / "err").read_text()


def _until_printed(proc, tmp, text, timeout):
    """Wait at most ``timeout`` s for ``text`` in the output of :func:`_start`'s process
    ``proc``; fails (the process ended, its output and errors shown) if it is not printed."""
    deadline = time.monotonic() + timeout
    while text not in (tmp / "out").read_text():
        if time.monotonic() >= deadline or proc.poll() is not None:
            rc, out, err = _end(proc, tmp, 0)
            pytest.fail(f"{text!r} not printed (exit status {rc}); output {out!r}, "
                        f"errors {err!r}")
        time.sleep(0.01)


def _session(sid):
    """The live processes of session ``sid`` but its leader."""
    out = []
    for pid in os.listdir("/proc"):
        fields = _stat(f"/proc/{pid}/stat") if pid.isdigit() else None
        if _live(fields) and int(fields[3]) == sid and int(pid) != sid:
            out.append(int(pid))
    return out


def _kill_session(sid):
    """SIGKILL whatever is left of session ``sid`` (workers may have left its group)."""
    for pid in _session(sid) + [sid]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _run(body, tmp, timeout=60):
    return _end(_start(body, tmp), tmp, timeout)


@pytest.mark.parametrize("where", ["__del__", "weakref.finalize"])
def test_a_stop_that_lands_in_a_finaliser_is_not_lost(where, tmp_path):
    # the handler runs at the loop's backward jump, inside the finaliser, where Python
    # could only print the exception ("Exception ignored in ...") and go on
    rc, out, err = _run(f"""
        import weakref

        def land():
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(10000):
                pass

        class Held:
            def __del__(self):
                if {where == "__del__"}:
                    land()

        try:
            held = Held()
            if {where == "weakref.finalize"}:
                weakref.finalize(held, land)
            del held
            print("dropped", flush=True)
            time.sleep(10)
            print("not stopped", flush=True)
        except supervise.Stopped as e:
            print("stopped", e.signum, flush=True)
            sys.exit(128 + e.signum)
        """, tmp_path)
    assert out.split() == ["dropped", "stopped", str(int(signal.SIGTERM))], (out, err)
    assert rc == 128 + signal.SIGTERM
    assert "Exception ignored" not in err and "Traceback" not in err, err


# C code that runs Python code and prints what it raises (PyErr_Print), then goes on: as
# numpy's import_array does with whatever interrupts its import of numpy's core
LANDS_IN_C = """
        import ctypes
        def printed_by_c(sig):
            code = f"import os\\nos.kill(os.getpid(), {int(sig)})\\nfor _ in range(10**4): pass\\n"
            return ctypes.pythonapi.PyRun_SimpleString(code.encode())
"""


def test_a_stop_that_c_code_prints_and_drops_is_not_lost(tmp_path):
    rc, out, err = _run(LANDS_IN_C + """
        try:
            print("dropped", printed_by_c(signal.SIGTERM), flush=True)
            time.sleep(10)
            print("not stopped", flush=True)
        except supervise.Stopped as e:
            print("stopped", e.signum, flush=True)
            sys.exit(128 + e.signum)
        """, tmp_path)
    assert out.split() == ["dropped", "-1", "stopped", str(int(signal.SIGTERM))], (out, err)
    assert rc == 128 + signal.SIGTERM
    assert err == "", err


def test_trains_stop_before_training_dropped_by_c_code_is_not_lost(tmp_path):
    # yasgd train's own handler (yasgd.faults) with the hook the CLI adds to it
    rc, out, err = _run(LANDS_IN_C + """
        from yasgd import faults
        faults.install_stop_handlers()
        supervise.keep_stops(faults.Interrupted)
        try:
            print("dropped", printed_by_c(signal.SIGINT), flush=True)
            time.sleep(10)
            print("not stopped", flush=True)
        except faults.Interrupted as e:
            sys.exit(faults.report_stop(e))
        """, tmp_path)
    assert (rc, out.split()) == (130, ["dropped", "-1"]), (out, err)
    assert err == "yasgd: stopped by SIGINT before training started (no checkpoint)\n", err


def test_the_error_raised_in_place_of_a_dropped_stop_is_reported_as_the_stop(tmp_path):
    # the error reaches the top before the stop is sent again: dropped_stops.cause names the
    # stop, and blocks the signal sent again, which stays pending instead of landing later
    rc, out, err = _run(LANDS_IN_C + """
        from yasgd import dropped_stops
        printed_by_c(signal.SIGTERM)
        try:
            raise ImportError("raised in its place")
        except BaseException as e:
            stop = dropped_stops.cause(e)
        time.sleep(0.5)
        pending = signal.sigpending()
        print(type(stop).__name__, stop.signum, signal.SIGTERM in pending, flush=True)
        print(type(dropped_stops.cause(ValueError())).__name__, flush=True)
        """, tmp_path)
    assert (rc, err) == (0, ""), err
    assert out.split() == ["Stopped", str(int(signal.SIGTERM)), "True", "Stopped"], out


def test_a_stop_that_nothing_catches_is_printed_as_ever(tmp_path):
    # not dropped: it unwound the whole stack; Python prints it and ends as on any signal
    rc, out, err = _run("""
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(10000):
            pass
        print("not stopped", flush=True)
        """, tmp_path)
    assert out == "" and rc is not None and rc != 0, (rc, out, err)
    assert "Traceback" in err and "yasgd.supervise.Stopped: SIGTERM" in err, err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
                         ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_child_forked_outside_multiprocessing_ends_quietly_on_a_stop(sig, tmp_path):
    # os.fork() runs no after-fork hook: the child keeps the parent's handler, which in a
    # process it does not own ends it as 128 + N (ChildStopped), unwinding, with no
    # traceback and no "yasgd: ..." line of the parent's; the parent goes on
    rc, out, err = _run(f"""
        pid = os.fork()
        if pid == 0:
            try:
                time.sleep(30)
            finally:
                print("child unwound", flush=True)
            os._exit(0)
        time.sleep(0.5)
        os.kill(pid, {int(sig)})
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status), flush=True)
        print("parent goes on", flush=True)
        """, tmp_path)
    assert (rc, err) == (0, ""), err
    assert out.splitlines() == ["child unwound", f"child {128 + sig}", "parent goes on"]


def test_a_forked_child_ends_on_sigterm_whatever_thread_it_lands_on(tmp_path):
    # the child's main thread waits on a lock with SIGTERM blocked, so the signal goes to
    # its other thread: a Python handler would never run, a default action ends it
    rc, out, err = _run("""
        import multiprocessing as mp
        ctx = mp.get_context("fork")
        lock = ctx.Lock()
        lock.acquire()

        def child():
            threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
            signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
            lock.acquire()

        p = ctx.Process(target=child)
        p.start()
        time.sleep(0.5)
        os.kill(p.pid, signal.SIGTERM)
        p.join(10)
        print(p.exitcode)
        if p.exitcode is None:
            p.kill()
        """, tmp_path)
    assert rc == 0, err
    assert out.split() == [str(-signal.SIGTERM)], (out, err)
    assert "Traceback" not in err, err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
                         ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_group_signal_stops_the_parent_which_ends_its_pool(sig, tmp_path):
    # a terminal's Ctrl-C or hang-up, or a scheduler's kill of the job, signals the whole
    # process group while a pool's workers are busy: the parent stops by unwinding and
    # ends its pool; no worker prints a traceback, none is left, nothing hangs
    proc = _start("""
        import multiprocessing as mp

        def job(i):
            time.sleep(0.01)
            return os.getpgrp()

        try:
            with mp.get_context("fork").Pool(2) as pool:
                for k, group in enumerate(pool.imap(job, range(100000))):
                    if k == 20:
                        print("groups", os.getpgrp(), group, flush=True)
        except supervise.Stopped as e:
            print("stopped", e.signum, flush=True)
            sys.exit(128 + e.signum)
        """, tmp_path)
    _until_printed(proc, tmp_path, "groups", 60)
    workers = _session(proc.pid)
    os.killpg(proc.pid, sig)
    try:
        proc.wait(timeout=40)
    except subprocess.TimeoutExpired:
        pass
    left = [pid for pid in workers if _live(_stat(f"/proc/{pid}/stat"))]
    rc, out, err = _end(proc, tmp_path, 0)
    groups = out.split()[1:3]
    assert groups[0] != groups[1], out           # the workers left the parent's group
    assert out.split()[3:] == ["stopped", str(int(sig))], (out, err)
    assert (rc, err, left) == (128 + sig, "", []), (out, err)


def test_a_worker_whose_parent_drops_a_transfer_says_nothing(tmp_path):
    # a worker hands a descriptor to its parent through multiprocessing's resource
    # sharer (as gluon's DataLoader hands over its shared-memory batches); the parent
    # drops the connection half-way, as a parent stopped there does
    rc, out, err = _run("""
        import multiprocessing as mp
        import socket
        from multiprocessing import resource_sharer
        ctx = mp.get_context("fork")

        def child(conn):
            r, w = os.pipe()
            conn.send(resource_sharer.DupFd(r)._id)
            conn.recv()
            raise_in_thread = threading.Thread(target=lambda: sys.excepthook(
                ValueError, ValueError("still reported"), None))
            raise_in_thread.start()
            raise_in_thread.join()

        here, there = ctx.Pipe()
        p = ctx.Process(target=child, args=(there,))
        p.start()
        address, _ = here.recv()
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(address)
        time.sleep(0.5)
        here.send("done")
        p.join(10)
        print(p.exitcode)
        """, tmp_path)
    assert (rc, out.split()) == (0, ["0"]), (out, err)
    assert err == "ValueError: still reported\n", err


def test_a_clean_up_that_never_ends_is_cut_short(tmp_path):
    proc = _start("""
        supervise.CLEANUP_S = 2.0

        def close_for_good():
            threading.Event().wait()      # a clean-up that waits for good

        try:
            print("running", flush=True)
            time.sleep(60)
        finally:
            close_for_good()
        """, tmp_path)
    _until_printed(proc, tmp_path, "running\n", 30)
    os.kill(proc.pid, signal.SIGTERM)
    rc, _, err = _end(proc, tmp_path, 20)
    assert rc == 128 + signal.SIGTERM
    # the line names the call the main thread waits in (a line of Python's threading.py)
    # and the code outside the standard library that made it
    assert re.fullmatch(r"yasgd: stopped by SIGTERM; its clean-up had not ended 2 s later and "
                        r"was cut short; it waited in wait \(threading\.py:\d+\), called from "
                        r"close_for_good \(<string>:10\)\n", err), err


def test_gluon_dataloader_workers_end_when_it_is_dropped(tmp_path):
    # gluon's DataLoader ends its worker processes with SIGTERM when it is dropped
    # (Pool.terminate) and waits for them; each round must end, and quietly
    rc, out, err = _run("""
        import mxnet as mx
        import numpy as np
        from mxnet import gluon
        data = gluon.data.ArrayDataset(mx.nd.array(np.random.rand(256, 3, 16, 16)),
                                       mx.nd.arange(256))
        state = {"round": 0, "at": time.monotonic()}

        def watch():
            while time.sleep(1) or time.monotonic() - state["at"] < 20:
                pass
            print("hung in round", state["round"], flush=True)
            os._exit(3)
        threading.Thread(target=watch, daemon=True).start()
        for r in range(100):
            state["round"], state["at"] = r, time.monotonic()
            loader = gluon.data.DataLoader(data, batch_size=32, num_workers=2)
            for x, _ in loader:
                x.wait_to_read()
            del loader
        print("rounds", r + 1, flush=True)
        """, tmp_path, timeout=300)
    assert (rc, out.split()) == (0, ["rounds", "100"]), (out, err)
    assert "Traceback" not in err, err


def test_the_launcher_is_one_thread_again_when_it_takes_its_signals_over(tmp_path):
    # a child tied to its parent gets SIGTERM once per thread of the parent that ends when
    # the parent is killed; a second SIGTERM makes mpirun exit at once, its ranks left
    # running. supervise() ends the clean-up watch first; stop_by_unwinding starts it again
    rc, out, err = _run("""
        print(threading.active_count())
        supervise._end_watch()
        print(threading.active_count())
        stop_by_unwinding()
        print(threading.active_count())
        """, tmp_path)
    assert (rc, err, out.split()) == (0, "", ["2", "1", "2"])


def test_the_clean_up_watch_never_takes_a_stop_signal(tmp_path):
    # the kernel gives a process's signal to a thread that does not block it; a handler runs
    # in the main thread only once that thread runs Python code again, which a main thread
    # waiting on a lock or a child may not do for long: only the main thread may take one
    rc, out, err = _run("""
        def blocked(tid):
            with open(f"/proc/self/task/{tid}/status") as f:
                return [line.split()[1] for line in f if line.startswith("SigBlk:")][0]
        time.sleep(0.2)
        print(blocked(threading.get_native_id()), blocked(supervise._watcher[0].native_id))
        """, tmp_path)
    assert (rc, err) == (0, ""), err
    main, watch = (int(mask, 16) for mask in out.split())
    stops = [signal.SIGHUP, signal.SIGINT, signal.SIGTERM]
    assert all(watch >> (sig - 1) & 1 for sig in stops), out
    assert not any(main >> (sig - 1) & 1 for sig in stops), out
