"""yasgd.launch's environment: jobs/common.sh's tuning defaults are filled in unless
--no-tuning-defaults, which the benchmarks use to measure Horovod's own defaults; OpenMPI's
single-copy shared memory is switched off exactly where the host forbids it; ``yasgd
launch`` and ``python -m yasgd.launch`` run a command the same way; a launcher that hangs
with no rank left is killed, and one that still runs its ranks is not."""
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROBE = ("import os; print('FUSION=%s CYCLE=%s OMP=%s' % (os.environ.get("
         "'HOROVOD_FUSION_THRESHOLD'), os.environ.get('HOROVOD_CYCLE_TIME'), "
         "os.environ.get('OMP_NUM_THREADS')))")


def _launch(*flags):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HOROVOD_", "OMP_", "OMPI_", "PMIX_"))}
    out = subprocess.run([sys.executable, "-m", "yasgd.launch", "-np", "2", "--timeout", "60",
                          *flags, "--", sys.executable, "-c", PROBE],
                         env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    # one line per rank (mpirun's output forwarding may run the two lines together)
    found = re.findall(r"FUSION=\S+ CYCLE=\S+ OMP=\d+", out.stdout)
    assert len(found) == 2 and found[0] == found[1], out.stdout
    return found[0]


def test_launch_fills_in_common_sh_defaults():
    assert _launch() == "FUSION=0 CYCLE=5 OMP=1"


def test_launch_no_tuning_defaults_leaves_horovod_defaults():
    # Horovod then uses its own 64 MB fusion buffer and cycle time; OMP per rank still set
    assert _launch("--no-tuning-defaults") == "FUSION=None CYCLE=None OMP=1"


# --- OpenMPI's single-copy shared memory (CMA) -------------------------------------------
from yasgd import launch, supervise  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_resume import wait_until  # noqa: E402
from test_stop_signals import _cmdline  # noqa: E402

SEND = """
import numpy as np
from mpi4py import MPI
c = MPI.COMM_WORLD
a = np.arange(1 << 22, dtype=np.float32) * (c.rank + 1)   # 16 MB: vader's get path
b = np.empty_like(a)
c.Allreduce(a, b)
assert np.array_equal(b, np.arange(1 << 22, dtype=np.float32) * 3), b[:4]
import sys
sys.stdout.write(f'SUM-OK {c.rank}\\n')   # one write: the two ranks share mpirun's stdout
sys.stdout.flush()
"""


def test_single_copy_probe_matches_openmpi():
    """Where the probe says yes (it does here), OpenMPI with CMA forced on (so it cannot fall
    back to two copies) then moves a 16 MB allreduce correctly: the probe's 'yes' is
    OpenMPI's. (A host that forbids CMA makes the probe say no: then there is nothing to
    check against OpenMPI here; the next test covers the "no" path on any host.)"""
    if not launch.single_copy_allowed():
        pytest.skip("this host forbids process_vm_readv: the launcher switches CMA off")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_"))}
    env.update(OMP_NUM_THREADS="1", OMPI_MCA_btl_vader_single_copy_mechanism="cma")
    cmd = launch.mpirun_command(2, [sys.executable, "-c", SEND], env=env)
    assert "btl_vader_single_copy_mechanism" not in cmd   # the environment's choice wins
    out = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert sorted(re.findall(r"SUM-OK \d", out.stdout)) == ["SUM-OK 0", "SUM-OK 1"], out.stdout
    # and the launcher leaves OpenMPI its own choice (no "none") where CMA works
    assert "btl_vader_single_copy_mechanism" not in launch.mpirun_command(2, ["true"], env={})


def test_single_copy_probe_says_no_when_forbidden():
    """A process that may not be read by its own user's processes (an unprivileged user,
    not dumpable: the kernel's ptrace check refuses process_vm_readv, as a container's
    policy does) gets 'no', and the launcher then switches the single copy off."""
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to an unprivileged user")
    code = (
        "import ctypes, ctypes.util, os, sys\n"
        "from yasgd import launch\n"
        "try:\n"
        "    os.setgid(65534); os.setuid(65534)\n"
        "except PermissionError:\n"
        "    print('NOSETUID'); sys.exit(0)\n"
        "ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)   # PR_SET_DUMPABLE 0\n"
        "print('ALLOWED', launch.single_copy_allowed())\n"
        "cmd = launch.mpirun_command(2, ['true'], env={})\n"
        "print('NONE', cmd[cmd.index('btl_vader_single_copy_mechanism') + 1])\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    if "NOSETUID" in out.stdout:
        pytest.skip("root here may not change its user id")
    assert "ALLOWED False" in out.stdout and "NONE none" in out.stdout, out.stdout


# --- the two entries: ``yasgd launch`` and ``python -m yasgd.launch`` ----------------------
YASGD = os.path.join(os.path.dirname(sys.executable), "yasgd")


@pytest.mark.parametrize("entry", [[YASGD, "launch"], [sys.executable, "-m", "yasgd.launch"]],
                         ids=["yasgd launch", "python -m yasgd.launch"])
def test_both_entries_run_a_command(entry):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_"))}
    out = subprocess.run([*entry, "-np", "1", "--timeout", "60", "--", sys.executable, "-c",
                          "print(1)"], env=env, cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["1"], out.stdout
    bad = subprocess.run([*entry, "-np", "0", "--", sys.executable, "-c", "print(1)"],
                         env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.count("\n") == 1 and bad.stderr.startswith("yasgd: error: launch: ")


# --- a launcher that hangs after its ranks have ended ------------------------------------
# OpenMPI 4.1 at times stays in its event loop for good, ignoring SIGTERM, when many ranks
# that never start MPI end at once (as `mpirun -np 64 true` does at times, unlike ranks
# that call MPI_Init and MPI_Finalize): not reproducible on
# demand, so a real process stands in for it: one that ignores SIGTERM, runs no child and
# never exits.
HUNG = ("import os, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(600)")


def test_supervisor_kills_a_launcher_with_no_rank_left(tmp_path, capfd):
    env = {"PATH": os.environ["PATH"], supervise.STOP_FILE_ENV: str(tmp_path / "stopped")}
    t0 = time.monotonic()
    rc = supervise.supervise([sys.executable, "-c", HUNG, str(tmp_path / "pid")], env,
                           timeout=120, stuck_after=2)
    took = time.monotonic() - t0
    err = capfd.readouterr().err
    assert rc == 1 and 2 <= took < 30, (rc, took)
    assert "has had no rank running for 2 s and has not exited; killing it" in err, err
    assert err.count("\n") == 1, err
    pid = int((tmp_path / "pid").read_text())
    assert not os.path.exists(f"/proc/{pid}"), "the hung launcher is still alive"


def test_supervisor_leaves_a_launcher_whose_ranks_run():
    # the launcher has no rank for the first instants and then one for 4 s: twice the
    # stuck limit in all, never that long without a child
    cmd = ["bash", "-c", "sleep 4; exit 7"]
    env = {"PATH": os.environ["PATH"], supervise.STOP_FILE_ENV: "/nonexistent/stopped"}
    assert supervise.supervise(cmd, env, timeout=120, stuck_after=2) == 7


def test_no_mpirun_is_one_line(tmp_path):
    # a PATH with the command but no mpirun (a login node without its MPI module)
    os.symlink(shutil.which("true"), tmp_path / "true")
    out = subprocess.run([sys.executable, "-m", "yasgd.launch", "-np", "2",
                          "--no-tuning-defaults", "--", "true"],
                         env=dict(os.environ, PATH=str(tmp_path)), cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stdout == "", out.stdout + out.stderr
    assert out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith("yasgd: error: launch: mpirun not found on PATH"), out.stderr


@pytest.mark.parametrize("train,message", [
    (["train", "{tmp}/missing.yaml"], "config file not found: {tmp}/missing.yaml"),
    (["train", "examples/configs/tiny.yaml", "optim.lr=-1", "run.dir={tmp}"],
     "config key optim.lr must be a finite number > 0, got -1.0"),
    # the world size is the launch's: 3 ranks do not divide tiny's batch of 256
    (["train", "examples/configs/tiny.yaml", "run.dir={tmp}"],
     "train.global_batch=256 is not divisible by ranks (3)"),
    # train's own arguments, by train's parser (check-config would take these two)
    (["train", "examples/configs/tiny.yaml", "run.dir={tmp}", "--device", "gpu"],
     "train: unrecognized arguments: --device gpu (see yasgd train --help)"),
    # the data on this host, as train checks it before it starts
    (["train", "examples/configs/tiny.yaml", "run.dir={tmp}", "train.global_batch=264",
      "data.root={tmp}/nodata"], "dataset directory not found: {tmp}/nodata"),
    # and the run directory (a folder /proc cannot hold, as root too), and what it resumes
    (["train", "examples/configs/tiny.yaml", "run.dir=/proc/yasgd-none/runs",
      "train.global_batch=264"], "run directory /proc/yasgd-none/runs is not writable"),
    (["train", "examples/configs/tiny.yaml", "run.dir={tmp}", "train.global_batch=264",
      "run.resume={tmp}/gone"], "run.resume: {tmp}/gone is neither a checkpoint nor a run "
                                "directory"),
    # a rule of the ranks' device: this host's ranks compute on its CPU
    (["train", "examples/configs/tiny.yaml", "run.dir={tmp}", "train.global_batch=264",
      "model.dtype=float16"], "config key model.dtype=float16 needs GPUs"),
    # the dataset's labels: Fashion-MNIST's run to 9
    (["train", "examples/configs/tiny.yaml", "run.dir={tmp}", "train.global_batch=264",
      "model.classes=9"], "config key model.classes=9 is too few for the labels of "),
    (["train", "examples/configs/tiny.yaml", "run.dir={tmp}", "train.global_batch=264",
      "data.limit=200"], "config key data.limit=200 keeps 200 training images, fewer than one "
                         "step of train.global_batch=264"),
    # a parameter MXNet would refuse to allocate
    (["train", "examples/configs/tiny.yaml", "run.dir={tmp}", "train.global_batch=264",
      "model.width=4000"], "config key model.width=4000: the widest 3x3 convolution's weight "
                           "would have 2,304,000,000 elements"),
])
@pytest.mark.parametrize("entry", ["yasgd", "python -m yasgd.cli"])
def test_a_bad_training_is_one_line_before_any_rank(tmp_path, train, message, entry):
    head = [YASGD] if entry == "yasgd" else [sys.executable, "-m", "yasgd.cli"]
    out = subprocess.run([YASGD, "launch", "-np", "3", "--", *head,
                          *[a.format(tmp=tmp_path) for a in train]],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stdout == "", out.stdout + out.stderr
    assert out.stderr.count("\n") == 1, out.stderr      # not once a rank, nor mpirun's report
    assert out.stderr.startswith("yasgd: error: " + message.format(tmp=tmp_path)), out.stderr
    assert os.listdir(tmp_path) == []



@pytest.mark.parametrize("command,message", [
    (["bogus"], "argument command: invalid choice: 'bogus'"),
    ([], "the following arguments are required: command"),
    (["simulate", "--gpus", "0"], "simulate: argument --gpus: must be an integer >= 1, got '0'"),
    (["preflight", "--timeout", "nan"], "preflight: argument --timeout: "),
    (["bench", "optimizer", "--jobs", "x"], "bench: argument --jobs: "),
])
@pytest.mark.parametrize("entry", ["yasgd", "python -m yasgd.cli"])
def test_any_yasgd_command_its_parser_refuses_is_one_line_before_any_rank(command, message,
                                                                          entry):
    head = [YASGD] if entry == "yasgd" else [sys.executable, "-m", "yasgd.cli"]
    out = subprocess.run([YASGD, "launch", "-np", "3", "--", *head, *command], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stdout == "", out.stdout + out.stderr
    assert out.stderr.count("\n") == 1, out.stderr      # not once a rank, nor mpirun's report
    assert out.stderr.startswith("yasgd: error: " + message), out.stderr


@pytest.mark.parametrize("command,head", [(["simulate", "--help"], "usage: yasgd simulate"),
                                          (["--version"], "yasgd ")])
def test_a_yasgd_commands_help_and_version_are_printed_once(command, head):
    out = subprocess.run([YASGD, "launch", "-np", "3", "--", YASGD, *command], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert out.stdout.count(head) == 1, out.stdout      # not once a rank

# --- stop signals to the launcher ----------------------------------------------------------
# Each rank writes its pid to DIR/pid-RANK once its handlers are set; MODE says what it does
# with SIGTERM: "ignore" (a rank that never stops: wedged in a C call, or a command that
# traps it), "stop" (what a yasgd rank does: writes the stop marker and exits 0), or
# nothing (the default action: it dies).
RANK = ("import os, signal, sys, time\n"
        "rank, out, mode = os.environ['OMPI_COMM_WORLD_RANK'], sys.argv[1], sys.argv[2]\n"
        "def stop(signum, frame):\n"
        "    open(os.path.join(out, 'got-' + rank), 'w').write(signal.Signals(signum).name)\n"
        "    open(os.environ['YASGD_STOP_FILE'], 'w').write(signal.Signals(signum).name)\n"
        "    sys.exit(0)\n"
        "if mode == 'ignore':\n"
        "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "    signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "elif mode == 'stop':\n"
        "    signal.signal(signal.SIGTERM, stop)\n"
        "open(os.path.join(out, 'pid-' + rank), 'w').write(str(os.getpid()))\n"
        "time.sleep(float(sys.argv[3]))\n")


class Launcher:
    """``python -m yasgd.launch -np 2`` of RANK, in its own session, SIGHUP's disposition
    set as given (the test runner's own may be either); whatever is left at the end is
    SIGKILLed by pid."""

    def __init__(self, tmp, mode, sleep=60, hup=signal.SIG_DFL, flags=()):
        self.tmp = tmp
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_"))}
        env["OMP_NUM_THREADS"] = "1"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "yasgd.launch", "-np", "2", "--timeout", "120", *flags,
             "--", sys.executable, "-c", RANK, str(tmp), mode, str(sleep)],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGHUP, hup))
        self.pids = set()

    def ranks(self, timeout=60):
        """The two ranks' pids, once both have set their handlers."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            files = [self.tmp / f"pid-{r}" for r in (0, 1)]
            if all(f.exists() and f.read_text() for f in files):
                self.pids = {int(f.read_text()) for f in files} | set(
                    supervise._children().get(self.proc.pid, []))
                return
            assert self.proc.poll() is None, self.proc.communicate()
            time.sleep(0.05)
        raise AssertionError("the ranks did not start")

    def finish(self, timeout=60):
        t0 = time.monotonic()
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, time.monotonic() - t0, err

    def left(self):
        return [p for p in self.pids if supervise._live(supervise._stat(f"/proc/{p}/stat"))]

    def cleanup(self):
        for pid in [self.proc.pid] + self.left():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=30)


@pytest.fixture
def launchers():
    started = []
    yield lambda *a, **k: started.append(Launcher(*a, **k)) or started[-1]
    for job in started:
        job.cleanup()


def _gone(job, within):
    wait_until(lambda: not job.left(), within, "the job's processes to end")


def test_ranks_that_do_not_stop_are_killed_after_the_stop_timeout(tmp_path, launchers):
    job = launchers(tmp_path, "ignore", flags=["--stop-timeout", "2"])
    job.ranks()
    job.proc.send_signal(signal.SIGTERM)
    rc, took, err = job.finish()
    assert rc == 143 and 2 <= took < 15, (rc, took, err)
    lines = [l for l in err.splitlines() if l.startswith("yasgd.launch:")]
    assert len(lines) == 1 and "the job has not ended 2 s after SIGTERM (--stop-timeout)" in \
        lines[0], err
    _gone(job, 5)


def test_a_second_sigterm_kills_the_job_at_once(tmp_path, launchers):
    job = launchers(tmp_path, "ignore")                     # default --stop-timeout: 120 s
    job.ranks()
    job.proc.send_signal(signal.SIGTERM)
    time.sleep(1.0)
    assert job.proc.poll() is None                          # the ranks ignore the first
    job.proc.send_signal(signal.SIGTERM)
    rc, took, err = job.finish()
    assert rc == 143 and took < 10, (rc, took, err)
    assert "yasgd.launch: second signal (SIGTERM): killing the job" in err, err
    _gone(job, 5)


def test_sighup_stops_the_ranks_as_sigterm_does(tmp_path, launchers):
    job = launchers(tmp_path, "stop")
    job.ranks()
    job.proc.send_signal(signal.SIGHUP)
    rc, took, err = job.finish()
    assert rc == 143 and took < 15, (rc, took, err)
    assert [(tmp_path / f"got-{r}").read_text() for r in (0, 1)] == ["SIGTERM"] * 2
    _gone(job, 5)


def test_sighup_ignored_at_start_leaves_the_job_running(tmp_path, launchers):
    # nohup: the job is meant to outlive the terminal
    job = launchers(tmp_path, "stop", sleep=3, hup=signal.SIG_IGN)
    job.ranks()
    job.proc.send_signal(signal.SIGHUP)
    rc, took, err = job.finish()
    assert rc == 0, (rc, err)
    assert not list(tmp_path.glob("got-*"))


def test_a_launcher_killed_outright_takes_its_ranks_with_it(tmp_path, launchers):
    job = launchers(tmp_path, "")                           # ranks die of SIGTERM
    job.ranks()
    job.proc.send_signal(signal.SIGKILL)
    job.proc.wait(timeout=30)
    # mpirun gets SIGTERM from the kernel (PR_SET_PDEATHSIG) and ends its ranks
    _gone(job, 20)


def _ctrl_c_once(tmp_path, seen, what, **extra_env):
    """Ctrl-C (SIGINT to its process group) to a launch of a tiny training as soon as
    ``seen(launcher pid)`` finds processes: (exit status, stdout, stderr, what it found)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_"))}
    env.update(extra_env)
    proc = subprocess.Popen([YASGD, "launch", "-np", "2", "--timeout", "60", "--", YASGD,
                             "train", "examples/configs/tiny.yaml", f"run.dir={tmp_path}"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        deadline, found = time.monotonic() + 60, []
        while not found and time.monotonic() < deadline and proc.poll() is None:
            found = seen(proc.pid)
        assert found, f"no {what} was seen"
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            for pid in [proc.pid] + supervise.descendants(proc.pid):
                os.kill(pid, signal.SIGKILL)
            proc.wait(timeout=30)
    return proc.returncode, out, err, found


def test_ctrl_c_while_the_ranks_start_is_no_traceback(tmp_path):
    # a rank's Python catches SIGINT from early in its start-up (as KeyboardInterrupt: in
    # the interpreter's own start-up a fatal error with a traceback, later a traceback or
    # "yasgd: interrupted"), yasgd's stop handlers SIGTERM too: until they do, a stop sends
    # the rank SIGTERM, which ends it without a word
    rc, out, err, _ = _ctrl_c_once(tmp_path, lambda launcher: [
        r for r in supervise.rank_pids(launcher)
        if launch.catches(r, signal.SIGINT) and not launch.catches(r, signal.SIGTERM)],
        "rank starting")
    assert rc == 130, err
    assert "yasgd.launch: job stopped by SIGINT" in err, err
    for word in ("Traceback", "Fatal Python error", "KeyboardInterrupt", "yasgd: interrupted"):
        assert word not in err, err
    assert not os.listdir(tmp_path), os.listdir(tmp_path)


# what the launcher runs before mpirun, each found by its command line: a yasgd command's
# arguments checked by its parser, a training's config checked for the world size, the
# tuning defaults read from jobs/common.sh
HELPERS = {"parse": "from yasgd.cli import parse", "check-config": "check-config",
           "common.sh": "env -0"}


@pytest.mark.parametrize("helper", sorted(HELPERS))
def test_ctrl_c_while_the_launcher_starts_is_one_line(tmp_path, helper):
    # Ctrl-C (SIGINT to the launcher's process group) while the helper runs: it is in a
    # session of its own, so the signal reaches the launcher alone, which ends the helper.
    # A helper that got it printed its interpreter's "Fatal Python error: init_import_site"
    # or a KeyboardInterrupt traceback, depending on the moment it landed
    sessions = {}

    def helper_seen(launcher):
        for c in supervise._live_children(launcher):
            fields = supervise._stat(f"/proc/{c}/stat")
            if fields and HELPERS[helper] in _cmdline(c):
                sessions[c] = int(fields[3])
        return list(sessions)
    # bash reads $BASH_ENV first: the shell that reads jobs/common.sh lasts long enough to be
    # seen, however loaded this host is (the two others are Python's start, hundreds of ms)
    slow = tmp_path.parent / f"{tmp_path.name}-bash-env"
    slow.write_text("sleep 2\n")
    rc, out, err, child = _ctrl_c_once(tmp_path, helper_seen, f"{helper} helper",
                                       BASH_ENV=str(slow))
    assert sessions[child[0]] == child[0], (sessions, child)     # it leads a session
    assert rc == 130, err
    assert err == "yasgd.launch: stopped by SIGINT before any rank started\n", err
    assert out == "" and os.listdir(tmp_path) == []
    assert not [p for p in child if supervise._live(supervise._stat(f"/proc/{p}/stat"))]
