"""The stall watchdog's rules and the signal flags, in one process with real
threads and real signals (the end-to-end runs are tests/e2e/test_faults.py)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from yasgd import faults
from yasgd.watchdog import AUTO_FLOOR_S, AUTO_STEPS, PHASE_FACTORS, STALL_EXIT_STATUS, Watchdog

# timed processes and signals: alone, after the other unit tests (pytest.ini, "serial")
pytestmark = pytest.mark.serial


class Aborted:
    def __init__(self):
        self.status, self.event = None, threading.Event()

    def __call__(self, status):
        self.status = status
        self.event.set()


def watch(timeout, **kw):
    aborted = Aborted()
    w = Watchdog(timeout, rank=1, size=2, abort=aborted, poll_s=0.02, **kw)
    w.step_time(0.01)   # past the start-up phase
    return w, aborted


def test_fires_without_beats_and_names_rank_step_and_phase(capfd):
    w, aborted = watch(0.3)
    w.beat(step=17, epoch=2)
    w.start()
    t0 = time.monotonic()
    assert aborted.event.wait(5)
    took = time.monotonic() - t0
    w.stop()
    assert aborted.status == STALL_EXIT_STATUS and w.fired
    assert 0.3 <= took < 2.0, took
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    line = err[0]
    assert line.startswith("yasgd: error: stall: rank 1 on ") and "at step 17 (epoch 3)" in line
    assert "a peer rank stopped answering" in line and "run.resume=auto" in line


def test_beats_keep_it_alive():
    w, aborted = watch(0.3)
    w.start()
    end = time.monotonic() + 1.2
    while time.monotonic() < end:
        w.beat(step=1)
        time.sleep(0.05)
    w.stop()
    assert aborted.status is None and not w.fired


@pytest.mark.parametrize("phase", sorted(PHASE_FACTORS))
def test_phases_get_their_allowance(phase):
    w, aborted = watch(0.2)
    w.start()
    with w.phase(phase):
        assert w.limit() == pytest.approx(0.2 * max(PHASE_FACTORS[phase], 1.0))
        time.sleep(0.2 * 1.5)          # beyond the steady timeout, inside the allowance
        assert aborted.status is None
    assert w.limit() == pytest.approx(0.2)
    w.stop()


def test_start_up_allowance_until_the_first_timed_window():
    w = Watchdog(10.0, abort=lambda s: None)
    assert w.limit() == 10.0 * PHASE_FACTORS["start-up"]
    w.step_time(0.5)
    assert w.limit() == 10.0


def test_auto_timeout_is_floor_or_multiple_of_the_median_step():
    w = Watchdog(None, abort=lambda s: None)
    assert w.timeout() == AUTO_FLOOR_S
    for t in (0.5, 0.6, 100.0):
        w.step_time(t)
    assert w.timeout() == AUTO_FLOOR_S                 # 20 x median 0.6 = 12 s < floor
    for t in (10.0, 11.0, 12.0, 13.0):
        w.step_time(t)
    assert w.timeout() == pytest.approx(AUTO_STEPS * 11.0)   # median of 7 readings


def test_zero_turns_it_off():
    w = Watchdog(0, abort=lambda s: pytest.fail("aborted"))
    assert not w.enabled
    w.start()
    assert w._thread is None


def test_single_rank_message_speaks_of_no_rank(capfd):
    aborted = Aborted()
    w = Watchdog(0.2, rank=0, size=1, abort=aborted, poll_s=0.02)
    w.step_time(0.01)
    w.start()
    assert aborted.event.wait(5)
    w.stop()
    line = capfd.readouterr().err.strip()
    assert "rank" not in line.split("made no progress")[0] and "peer" not in line


# -- signals -------------------------------------------------------------------------------
def test_signal_names_from_reduced_flags():
    assert faults.signame_of([0.0, 0.0]) is None
    assert faults.signame_of([0.0, 2.0]) == "SIGTERM"
    assert faults.signame_of([1.0, 3.0]) == "SIGINT"     # Ctrl-C wins


def test_exit_statuses():
    assert faults.EXIT_STATUS == {"SIGINT": 130, "SIGTERM": 143}


def run_snippet(code):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=60, cwd=os.path.dirname(os.path.dirname(
                              os.path.dirname(os.path.abspath(__file__)))))


def test_armed_signals_set_flags_and_a_second_sigint_exits_at_once():
    proc = run_snippet("""
        import os, signal, sys
        from yasgd import faults
        faults.install_stop_handlers(); faults.arm()
        os.kill(os.getpid(), signal.SIGTERM); os.kill(os.getpid(), signal.SIGTERM)
        print(faults.local_flags(), flush=True)
        os.kill(os.getpid(), signal.SIGINT)
        print(faults.local_flags(), flush=True)
        os.kill(os.getpid(), signal.SIGINT)
        print("not reached", flush=True)
    """)
    assert proc.returncode == 130, proc.stderr
    assert proc.stdout.splitlines() == ["[0.0, 1.0]", "[1.0, 1.0]"]
    assert proc.stderr.count("received; stopping at the next step") == 1
    assert "second SIGINT" in proc.stderr and "Traceback" not in proc.stderr


def test_unarmed_signal_interrupts_at_once():
    proc = run_snippet("""
        import os, signal, sys, time
        from yasgd import faults
        faults.install_stop_handlers()
        try:
            os.kill(os.getpid(), signal.SIGINT); time.sleep(5)
        except faults.Interrupted as e:
            sys.exit(faults.report_stop(e))
    """)
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip() == "yasgd: stopped by SIGINT before training started (no checkpoint)"


def test_stop_marker_for_a_mapping_launcher(tmp_path, monkeypatch):
    marker = tmp_path / "stopped"
    e = faults.Terminated("stopped by SIGINT at step 3", "SIGINT", "/r/ckpt-0-step3")
    assert faults.report_stop(e) == 130                 # no launcher: the signal's status
    monkeypatch.setenv(faults.STOP_FILE_ENV, str(marker))
    assert faults.report_stop(e) == 0                   # the launcher maps the marker
    assert marker.read_text().split() == ["SIGINT", "/r/ckpt-0-step3"]


def test_single_rank_poll_reads_local_flags():
    from yasgd.dist import World
    faults.reset()
    poll = faults.StopPoll(World())
    assert poll.after_step(1) is None
    faults._state["SIGTERM"] = 1
    try:
        assert poll.after_step(2) == "SIGTERM"
    finally:
        faults.reset()
