"""Stalls and signals, end to end with real processes: a rank frozen with SIGSTOP
(the stall watchdog ends the job), a rank paused for less than the timeout (the
run goes on), Ctrl-C (SIGINT to the launcher's process group, as a terminal
sends it) to the launcher at 1 and 2 ranks and to a plain ``yasgd train``, a
second Ctrl-C, and the launcher's terminal (a pseudo-terminal) closed under it. Every launch is bounded by a timeout; a fixture SIGKILLs whatever
a failed test leaves behind (by PID).

The runs are tiny (tests/e2e/test_resume.py's data: 1,024 Fashion-MNIST images,
4 steps an epoch) but long enough in epochs to be interrupted in the middle.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_resume import (ROOT, SPE, YASGD, common, data_root, descendants, events,  # noqa: E402,F401
                         rank_pid, run_dir, train_steps, wait_until)
from yasgd import checkpoint  # noqa: E402
from yasgd.launch import catches  # noqa: E402
from yasgd.supervise import _live, _stat  # noqa: E402
from yasgd.watchdog import STALL_EXIT_STATUS  # noqa: E402

LIMIT = 200


class Proc:
    """A command in its own session (so that a signal to its process group reaches
    it the way a terminal's Ctrl-C reaches the foreground job), output in files."""

    def __init__(self, tmp, cmd, tag):
        self.out_path, self.err_path = tmp / f"{tag}.out", tmp / f"{tag}.err"
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", YASGD_E2E="1")
        env.pop("OMPI_MCA_odls_base_sigkill_timeout", None)
        env.pop("YASGD_STOP_FILE", None)
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=err,
                                         start_new_session=True)
        self.pids = {self.proc.pid}

    def remember_children(self):
        self.pids.update(descendants(self.proc.pid))

    def ctrl_c(self):
        self.remember_children()
        os.killpg(self.proc.pid, signal.SIGINT)

    def wait(self, timeout=LIMIT):
        self.rc = self.proc.wait(timeout=timeout)
        self.out, self.err = self.out_path.read_text(), self.err_path.read_text()
        return self.rc

    def alive(self):
        """The processes of this job that still exist (zombies excluded)."""
        left = []
        for pid in self.pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                        left.append(pid)
            except OSError:
                pass
        return left

    def kill_all(self):
        self.remember_children()
        for pid in self.pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def tail(self):
        return (self.out_path.read_text()[-3000:] + "\n--- stderr ---\n"
                + self.err_path.read_text()[-3000:])


@pytest.fixture
def procs():
    started = []
    yield started
    for p in started:
        if p.proc.poll() is None:
            p.kill_all()
            p.proc.wait(timeout=30)


def launch(procs, tmp, args, np_=2, tag="job"):
    cmd = [sys.executable, "-m", "yasgd.launch", "-np", str(np_), "--timeout", str(LIMIT), "--",
           YASGD, "train", *args]
    p = Proc(tmp, cmd, tag)
    procs.append(p)
    return p


def long_run(data_root, tmp, name, *extra):
    """Many short epochs with a checkpoint after each: interrupted long before the end."""
    return common(data_root, tmp, name) + ["train.epochs=60", "train.checkpoint_every=1",
                                           "train.keep_checkpoints=3", *extra]


def assert_no_traceback(p):
    assert "Traceback" not in p.out + p.err, p.tail()


# -- the stall watchdog -------------------------------------------------------------------
def test_frozen_rank_ends_the_job_then_resume(data_root, tmp_path, procs):
    args = long_run(data_root, tmp_path, "s", "run.stall_timeout_s=10")
    p = launch(procs, tmp_path, args, tag="stall")
    wait_until(lambda: any(s >= 2 * SPE + 1 for s in train_steps(tmp_path, "s")), 150, "epoch 3")
    victim = rank_pid(p.proc.pid, 1)
    p.remember_children()
    os.kill(victim, signal.SIGSTOP)
    t_stop = time.time()
    try:
        rc = p.wait()
    finally:
        try:
            os.kill(victim, signal.SIGCONT)
        except ProcessLookupError:
            pass
    took = time.time() - t_stop
    assert rc != 0, p.tail()
    assert took < 10 + 30, f"the job needed {took:.0f} s to end after the freeze"
    stall = [line for line in p.err.splitlines() if "yasgd: error: stall: rank 0 on " in line]
    assert len(stall) == 1, p.tail()
    assert "a peer rank stopped answering" in stall[0] and "run.resume=auto" in stall[0], stall
    time.sleep(1)
    assert not p.alive(), f"left behind: {p.alive()}"
    rd = run_dir(tmp_path, "s")
    ckpt = checkpoint.latest_valid(rd)
    assert ckpt is not None, p.tail()
    done = checkpoint.validate(ckpt)["step"]
    resumed = launch(procs, tmp_path, args[:-1] + ["run.resume=auto", "train.epochs=60",
                                                   f"train.max_steps={done + 2 * SPE}"],
                     tag="resumed")
    assert resumed.wait() == 0, resumed.tail()
    assert f"resumed from {ckpt}" in resumed.out, resumed.tail()
    assert events(rd)[-1]["event"] == "end" and events(rd)[-1]["steps"] == done + 2 * SPE
    print(f"\nstall: job ended {took:.1f} s after SIGSTOP (exit {rc}): {stall[0]}")


def test_rank_paused_for_less_than_the_timeout_is_not_a_stall(data_root, tmp_path, procs):
    timeout = 12
    args = common(data_root, tmp_path, "p") + ["train.epochs=8", f"run.stall_timeout_s={timeout}"]
    p = launch(procs, tmp_path, args, tag="pause")
    wait_until(lambda: any(s >= SPE + 1 for s in train_steps(tmp_path, "p")), 150, "epoch 2")
    victim = rank_pid(p.proc.pid, 1)
    os.kill(victim, signal.SIGSTOP)
    time.sleep(timeout * 0.7)
    os.kill(victim, signal.SIGCONT)
    assert p.wait() == 0, p.tail()
    assert "stall" not in p.err, p.tail()
    assert events(run_dir(tmp_path, "p"))[-1]["steps"] == 8 * SPE


def test_stall_exit_status_is_documented_value():
    assert STALL_EXIT_STATUS == 75


# -- Ctrl-C ---------------------------------------------------------------------------------
@pytest.mark.parametrize("np_", [1, 2])
def test_ctrl_c_to_the_launcher_checkpoints_and_exits_130(data_root, tmp_path, procs, np_):
    args = long_run(data_root, tmp_path, "c")
    p = launch(procs, tmp_path, args, np_=np_, tag="ctrlc")
    wait_until(lambda: any(s >= SPE + 1 for s in train_steps(tmp_path, "c")), 150, "epoch 2")
    t0 = time.time()
    p.ctrl_c()
    rc = p.wait()
    took = time.time() - t0
    assert rc == 130, p.tail()
    assert took < 15, f"{took:.1f} s"
    assert_no_traceback(p)
    lines = [line for line in p.err.splitlines() if line.startswith("yasgd: stopped by SIGINT")]
    assert len(lines) == 1 and "continue with run.resume=auto" in lines[0], p.tail()
    rd = run_dir(tmp_path, "c")
    ckpt = checkpoint.latest_valid(rd)
    step = checkpoint.validate(ckpt)["step"]
    assert ckpt in lines[0] and f"at step {step}" in lines[0], (ckpt, lines)
    assert events(rd)[-1]["event"] == "terminated" and events(rd)[-1]["signal"] == "SIGINT"
    time.sleep(0.5)
    assert not p.alive(), f"left behind: {p.alive()}"
    resumed = launch(procs, tmp_path, args + ["run.resume=auto", f"train.max_steps={step + 2}"],
                     np_=np_, tag="resumed")
    assert resumed.wait() == 0, resumed.tail()
    assert f"resumed from {ckpt}" in resumed.out, resumed.tail()
    print(f"\n-np {np_}: exit {rc} {took:.1f} s after Ctrl-C: {lines[0]}")


def test_second_ctrl_c_stops_at_once_keeping_the_checkpoint(data_root, tmp_path, procs):
    args = long_run(data_root, tmp_path, "d")
    p = launch(procs, tmp_path, args, tag="twice")
    wait_until(lambda: any(s >= SPE + 1 for s in train_steps(tmp_path, "d")), 150, "epoch 2")
    rd = run_dir(tmp_path, "d")
    wait_until(lambda: checkpoint.latest_valid(rd) is not None, 60, "a checkpoint")
    p.ctrl_c()
    p.ctrl_c()
    t0 = time.time()
    rc = p.wait()
    assert rc == 130, p.tail()
    assert time.time() - t0 < 15
    assert_no_traceback(p)
    ckpt = checkpoint.latest_valid(rd)
    assert ckpt is not None
    checkpoint.validate(ckpt, deep=True)   # intact
    time.sleep(0.5)
    assert not p.alive(), f"left behind: {p.alive()}"


def test_ctrl_c_to_yasgd_train_itself(data_root, tmp_path, procs):
    args = long_run(data_root, tmp_path, "y", "train.global_batch=128")
    p = Proc(tmp_path, [YASGD, "train", *args], tag="train")
    procs.append(p)
    wait_until(lambda: any(s >= 2 * SPE + 1 for s in train_steps(tmp_path, "y")), 150, "epoch 2")
    t0 = time.time()
    p.ctrl_c()
    rc = p.wait()
    assert rc == 130, p.tail()
    assert time.time() - t0 < 15
    assert_no_traceback(p)
    assert "yasgd: stopped by SIGINT at step" in p.err, p.tail()
    rd = run_dir(tmp_path, "y")
    step = checkpoint.validate(checkpoint.latest_valid(rd))["step"]
    resumed = Proc(tmp_path, [YASGD, "train", *args, "run.resume=auto",
                              f"train.max_steps={step + 2}"], tag="resumed")
    procs.append(resumed)
    assert resumed.wait() == 0, resumed.tail()
    assert "resumed from" in resumed.out


def test_ctrl_c_during_start_up_exits_130_without_traceback(tmp_path, procs):
    p = Proc(tmp_path, [YASGD, "train", os.path.join(ROOT, "examples", "configs", "tiny.yaml"),
                        f"run.dir={tmp_path}"], tag="early")
    procs.append(p)
    # yasgd's stop handlers are in (SIGTERM caught): importing, long before the training
    # loop. Earlier the process is still in Python's own start, which a fixed delay under a
    # loaded host could not rule out
    wait_until(lambda: catches(p.proc.pid, signal.SIGTERM), 60, "the stop handlers")
    p.ctrl_c()
    assert p.wait() == 130, p.tail()
    assert_no_traceback(p)


# the signal sent at the moment opencv's module, imported by MXNet, imports numpy's core
# (numpy's import_array): what interrupts that import is printed and replaced by an
# ImportError, which MXNet takes for "no opencv"
AT_OPENCVS_IMPORT = """
import os, signal, sys
def hook(event, args):
    if event == "import" and args[0] == "numpy._core._multiarray_umath" and not fired:
        fired.append(open(sys.argv[1], "w").close())
        os.kill(os.getpid(), signal.SIGINT)
fired = []
sys.addaudithook(hook)
from yasgd.cli import main
sys.exit(main(sys.argv[2:]))
"""


def test_ctrl_c_that_lands_where_c_code_drops_it_still_stops_the_start_up(tmp_path, procs):
    mark = tmp_path / "signalled"
    run = tmp_path / "runs"
    run.mkdir()
    p = Proc(tmp_path, [sys.executable, "-c", AT_OPENCVS_IMPORT, str(mark), "train",
                        os.path.join(ROOT, "examples", "configs", "tiny.yaml"), f"run.dir={run}"],
             tag="dropped")
    procs.append(p)
    assert p.wait() == 130, p.tail()
    assert mark.exists(), "the signal was not sent: opencv no longer imports numpy's core so"
    assert p.err == "yasgd: stopped by SIGINT before training started (no checkpoint)\n", p.tail()
    assert p.out == "" and os.listdir(run) == []


# -- a closed terminal ----------------------------------------------------------------------
def test_a_closed_terminal_stops_the_launched_job_with_a_checkpoint(data_root, tmp_path):
    """The launcher on a pseudo-terminal of its own, as in an ssh session; closing the
    terminal's master is the hang-up (the kernel sends SIGHUP to the session's leader,
    the launcher). The ranks, in mpirun's session, stop as on SIGTERM, with a checkpoint."""
    import pty
    import select
    import threading
    args = long_run(data_root, tmp_path, "h")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.pop("OMPI_MCA_odls_base_sigkill_timeout", None)
    env.pop("YASGD_STOP_FILE", None)
    cmd = [sys.executable, "-m", "yasgd.launch", "-np", "2", "--timeout", str(LIMIT), "--",
           YASGD, "train", *args]
    pid, fd = pty.fork()
    if pid == 0:                                        # the child: nothing but exec
        try:
            signal.signal(signal.SIGHUP, signal.SIG_DFL)
            os.chdir(ROOT)
            os.execve(cmd[0], cmd, env)
        finally:
            os._exit(127)
    out, reading = [], threading.Event()
    reading.set()

    def drain():            # a terminal that nobody reads would block the job's output
        while reading.is_set():
            if select.select([fd], [], [], 0.1)[0]:
                try:
                    out.append(os.read(fd, 65536))
                except OSError:
                    return
    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    pids, rc, left = {pid}, None, []
    try:
        wait_until(lambda: any(s >= SPE + 1 for s in train_steps(tmp_path, "h")), 150,
                   "epoch 2")
        pids.update(descendants(pid))
        reading.clear()
        reader.join(timeout=10)
        os.close(fd)                                    # the terminal closes
        deadline = time.time() + 60
        while rc is None and time.time() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            rc = os.waitstatus_to_exitcode(status) if done else None
            time.sleep(0.1)
        time.sleep(0.5)
        left = [p for p in pids if _live(_stat(f"/proc/{p}/stat"))]
    finally:
        for p in pids | set(descendants(pid)):          # whatever a failure leaves
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if rc is None:
            os.waitpid(pid, 0)
    text = b"".join(out).decode(errors="replace")
    assert rc == 143, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    assert not left, f"left behind: {left}"
    last = events(run_dir(tmp_path, "h"))[-1]
    assert last["event"] == "terminated" and last["signal"] == "SIGTERM", last
    checkpoint.validate(last["checkpoint"], deep=True)
