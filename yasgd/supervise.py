"""Stop signals and the processes yasgd starts. Mostly the launcher's hold on its job
(:func:`supervise`): mpirun (or horovodrun) started in a session of its own, the stop
signals turned into a stop of the ranks, and no way for the job to outlive its launcher
or to keep it waiting for good.

- The first SIGINT or SIGTERM goes, as that signal, straight to every rank (a SIGHUP as
  SIGTERM), whose own handlers stop them at one step with a checkpoint.
- A second signal, or ``stop_timeout`` seconds after the first without an end, kills the
  job: ranks that ignore the signal or are wedged in a call never keep it alive.
- ``timeout``: the whole job's limit (exit status 124).
- An mpirun whose ranks have all ended but that has not exited is killed after
  ``stuck_after`` seconds; it gets SIGTERM when the launcher dies (``PR_SET_PDEATHSIG``).

Commands that stop by unwinding (the launcher's start-up, data tools, benchmarks: all but
``yasgd train``, whose ranks stop at a step with a checkpoint) have :func:`stop_by_unwinding`
turn every stop signal (:func:`stop_signals`) into :class:`Stopped`, a KeyboardInterrupt
that carries the signal: their clean-up runs (for at most ``CLEANUP_S`` seconds), and
``yasgd`` exits 128 + its number with one line. Their worker processes
(:func:`worker_setup`) are the command's to end, not the signal's.
"""
from __future__ import annotations

import contextlib
import glob
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from typing import Callable, Dict, List, Optional, Type

from yasgd import dropped_stops, stack_place, usage

STOP_FILE_ENV = "YASGD_STOP_FILE"   # yasgd.faults.STOP_FILE_ENV (not imported: no numpy here)
POLL_S = 0.5          # how often the supervisor looks at mpirun and its ranks
STUCK_AFTER_S = 30.0  # a launcher with no rank left this long has hung: see _wait
STOP_TIMEOUT_S = 120.0  # --stop-timeout's default: the watchdog's floor (yasgd.watchdog)
CLEANUP_S = 30.0      # how long a command that stops by unwinding may take to clean up
AGAIN_S = 0.01        # a stop dropped where it landed is sent again this much later
PR_SET_PDEATHSIG = 1


class Stopped(KeyboardInterrupt):
    """A stop signal, raised where it lands (:func:`stop_by_unwinding`), as Ctrl-C is."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class ChildStopped(SystemExit):
    """A stop in a process forked (not by multiprocessing) from one that stops by unwinding."""

    def __init__(self, signum: int):
        super().__init__(128 + signum)
        self.signum = signum


def stop_by_unwinding(stopped: Type[Stopped] = Stopped) -> Dict[int, object]:
    """From here on every stop signal (:func:`stop_signals`) raises ``stopped`` where it
    lands; the handlers it replaced, to put back. The first one bounds the clean-up
    (:func:`_watch`); one dropped where it lands is not lost (:func:`keep_stops`).
    Processes that ``multiprocessing`` forks (gluon's DataLoader) are set up by
    :func:`worker_setup`; any other forked with the handler raises :class:`ChildStopped`."""
    owner = os.getpid()

    def handler(signum, frame):
        if os.getpid() != owner:
            raise ChildStopped(signum)
        _events.put(("stop", signum))
        raise stopped(signum)
    keep_stops(stopped, ChildStopped)
    if not _hooked:
        from multiprocessing import util
        # keyed on this module, which lives as long as the process
        util.register_after_fork(sys.modules[__name__],
                                 lambda _: worker_setup(os.getppid()))
        _hooked.append(True)
    return {sig: signal.signal(sig, handler) for sig in stop_signals()}


def worker_setup(parent: int) -> None:
    """A worker process (``multiprocessing``'s, a pool's) leaves its parent's process group:
    a stop signal to the group (Ctrl-C, a hang-up, ``kill -- -PGID``) reaches only the
    parent, which ends the workers. SIGINT and SIGHUP are ignored; SIGTERM keeps its
    default action, how a pool ends its workers (a Python handler runs only when the main
    thread next runs Python code, which a worker waiting on a lock may never do). It is
    tied to its parent (``PR_SET_PDEATHSIG``); a broken connection is not reported."""
    os.setpgrp()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    sys.excepthook = _quiet_when_cut_off(sys.excepthook)
    tie = die_with_parent(parent)
    if tie is not None:
        tie()


def _quiet_when_cut_off(hook: Callable) -> Callable:
    """A worker's ``sys.excepthook``, silent for a broken connection: ``multiprocessing``'s
    resource sharer reports through it the connection that a stopping parent drops
    half-way (the parent reports the stop). Anything else goes to ``hook``."""
    def excepthook(kind, value, tb) -> None:
        if not issubclass(kind, (ConnectionError, EOFError)):
            hook(kind, value, tb)
    return excepthook


_hooked: List[bool] = []
_watcher: List[threading.Thread] = []
# requests to _watch: SimpleQueue.put is safe in a signal handler or a finaliser, whatever
# the main thread was doing (starting a thread there may deadlock on threading's own lock)
_events: "queue.SimpleQueue" = queue.SimpleQueue()


def _watch() -> None:
    """A thread of its own: ``CLEANUP_S`` seconds after the first stop, ends a process whose
    clean-up has not ended (a pool waiting for good on a worker) with 128 + N and one line
    naming where the main thread waits (:mod:`yasgd.stack_place`); sends a stop dropped
    where it landed (:func:`keep_stops`) to the main thread again. It blocks the stop
    signals: one the kernel gave it would wait until the main thread next ran Python code."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
    main, first, deadline = threading.main_thread().ident, None, None
    while True:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            what, signum = _events.get(timeout=left)
        except queue.Empty:
            where = stack_place.thread_place(main)
            say(usage.one_line(f"yasgd: stopped by {signal.Signals(first).name}; its clean-up "
                               f"had not ended {CLEANUP_S:.0f} s later and was cut short"
                               + (f"; it waited in {where}" if where else "")))
            os._exit(128 + first)
        if what == "quit":
            return
        if what == "stop" and first is None:
            first, deadline = signum, time.monotonic() + CLEANUP_S
        elif what == "again":
            time.sleep(AGAIN_S)
            signal.pthread_kill(main, signum)


def _end_watch() -> None:
    """End :func:`_watch` (a process taking its signals over): a child tied to a process
    (:func:`die_with_parent`) gets SIGTERM once per thread of it that ends when it is
    killed, and mpirun, on a second SIGTERM, exits at once and leaves its ranks running."""
    for thread in _watcher:
        _events.put(("quit", 0))
        thread.join()
    _watcher.clear()


def keep_stops(*kinds: type) -> None:
    """A stop of ``kinds`` that a finaliser or C code drops where it lands (numpy's
    ``import_array`` as opencv is imported, MXNet's ``NDArray.__del__``) is not printed:
    :func:`_watch` sends its signal again a moment later (:mod:`yasgd.dropped_stops`)."""
    if not _watcher:
        _watcher.append(threading.Thread(target=_watch, daemon=True))
        _watcher[0].start()
    dropped_stops.keep(kinds, lambda signum: _events.put(("again", signum)))


def stop_signals() -> List[int]:
    """The signals the launcher turns into a stop of its job: SIGINT, SIGTERM, and SIGHUP
    unless it was started with SIGHUP ignored (``nohup``: the job is meant to outlive the
    terminal)."""
    sigs = [signal.SIGINT, signal.SIGTERM]
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        sigs.append(signal.SIGHUP)
    return sigs


def say(line: str) -> None:
    """One line on stderr; nothing when stderr is gone (a closed terminal after SIGHUP)."""
    with contextlib.suppress(OSError, ValueError):
        print(line, file=sys.stderr, flush=True)


def _stat(path: str) -> Optional[List[str]]:
    """``/proc/PID/stat``'s fields after the name (state, parent pid, ...); None: gone."""
    try:
        with open(path) as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _live(fields: Optional[List[str]]) -> bool:
    """Whether :func:`_stat`'s fields are those of a process that is not a zombie."""
    return bool(fields) and fields[0] != "Z"


def _children() -> dict:
    """Live (not zombie) processes of this host by parent pid, from /proc."""
    kids: dict = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        fields = _stat(stat)
        if _live(fields):
            kids.setdefault(int(fields[1]), []).append(int(stat.split("/")[2]))
    return kids


def _live_children(pid: int) -> List[int]:
    """The live (not zombie) children of ``pid``: from its own ``/proc/PID/task/*/children``
    (a few small reads, as the supervisor does every poll of a long job), else from a scan
    of the whole of /proc (kernels without that file)."""
    lists = glob.glob(f"/proc/{pid}/task/*/children")
    if not lists:
        return _children().get(pid, [])
    kids = []
    for path in lists:
        try:
            with open(path) as f:
                kids += [int(k) for k in f.read().split()]
        except (OSError, ValueError):
            pass
    return [kid for kid in kids if _live(_stat(f"/proc/{kid}/stat"))]


def descendants(root: int) -> List[int]:
    """The live (not zombie) processes under ``root``, at every depth."""
    kids = _children()
    out, todo = [], [root]
    while todo:
        for pid in kids.get(todo.pop(), []):
            todo.append(pid)
            out.append(pid)
    return out


def rank_pids(root: int) -> List[int]:
    """Processes under ``root`` that are ranks (OpenMPI or Horovod set their rank)."""
    out = []
    for pid in descendants(root):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = b"\0" + f.read()
        except OSError:
            continue
        if b"\0OMPI_COMM_WORLD_RANK=" in environ or b"\0HOROVOD_RANK=" in environ:
            out.append(pid)
    return out


def _wait(proc: subprocess.Popen, timeout: Optional[float], stuck_after: float,
          stop_deadline: Callable[[], Optional[float]] = lambda: None):
    """mpirun's exit status; ``"timeout"`` past ``timeout`` seconds; ``"unstopped"`` past
    ``stop_deadline()`` (a monotonic time, once a stop signal has set one); ``"stuck"``
    when it has had no live child process for ``stuck_after`` seconds and still not
    exited. A launcher runs its ranks as its children and exits once they have ended,
    within a second; OpenMPI 4.1 at times stays in its event loop for good when many ranks
    that never start MPI end together (``-np 64 true``), and then ignores SIGTERM too."""
    deadline = None if timeout is None else time.monotonic() + timeout
    childless_since = None
    while True:
        try:
            return proc.wait(timeout=POLL_S)
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            return "timeout"
        stop_by = stop_deadline()
        if stop_by is not None and now >= stop_by:
            return "unstopped"
        if _live_children(proc.pid):
            childless_since = None
        elif childless_since is None:
            childless_since = now
        elif now - childless_since >= stuck_after:
            return "stuck"


def die_with_parent(parent: Optional[int] = None) -> Optional[Callable[[], None]]:
    """A ``preexec_fn`` that has the kernel send the child SIGTERM when the thread that
    starts it ends, however the process ends (SIGKILL, the out-of-memory killer:
    ``PR_SET_PDEATHSIG``); None where prctl is not to be had. ``parent``: the parent's pid
    (default: this process, the one that will start the child). Between fork and exec it
    calls only prctl (looked up here), getppid and kill, so threads in the parent do not
    matter."""
    import ctypes
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid() if parent is None else parent

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:          # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)
    return preexec


def child_setup(unblock: List[int]) -> Callable[[], None]:
    """The ``preexec_fn`` of a command the launcher starts: ``unblock`` unblocked (the
    launcher blocks them while it starts the command), then :func:`die_with_parent`'s (mpirun, on
    SIGTERM, ends its ranks)."""
    tie = die_with_parent()

    def preexec() -> None:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, unblock)
        if tie is not None:
            tie()
    return preexec


def supervise(cmd: List[str], env: dict, timeout: Optional[float],
               stuck_after: float = STUCK_AFTER_S,
               stop_timeout: float = STOP_TIMEOUT_S,
               signal_for: Callable[[int, int], int] = lambda pid, signum: signum) -> int:
    """mpirun's (``cmd``'s) exit status, or the launcher's (128 + a stop signal, 124);
    ``signal_for(rank pid, signal)``: what a stop sends that rank."""
    _end_watch()    # one thread: mpirun gets its parent-death SIGTERM once
    signals: List[int] = []
    first_at: List[float] = []
    job: List[subprocess.Popen] = []

    def kill_all() -> None:
        for pid in rank_pids(job[0].pid):
            _kill(pid, signal.SIGKILL)
        _kill(-job[0].pid, signal.SIGKILL)

    def stop(signum: int) -> None:
        # the ranks' own handlers stop them at one step with a checkpoint; they know
        # SIGINT and SIGTERM, so a hang-up reaches them as SIGTERM
        forward = signal.SIGTERM if signum == signal.SIGHUP else signum
        ranks = rank_pids(job[0].pid)
        for pid in ranks:
            _kill(pid, signal_for(pid, forward))
        if not ranks:   # nothing started yet: stop mpirun itself
            _kill(-job[0].pid, signal.SIGTERM)

    def on_signal(signum, frame):
        signals.append(signum)
        if not job:                 # mpirun could not be started: nothing to stop
            return
        if len(signals) > 1:
            say(f"yasgd.launch: second signal ({signal.Signals(signum).name}): killing "
                 "the job")
            kill_all()
            return
        first_at.append(time.monotonic())
        stop(signum)

    # from here on a signal stops the job, never the launcher alone; one that comes while
    # mpirun is being started waits, blocked, until there is a job to stop
    sigs = stop_signals()
    signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    try:
        for sig in sigs:
            signal.signal(sig, on_signal)
        job.append(subprocess.Popen(cmd, env=env, start_new_session=True,
                                    preexec_fn=child_setup(sigs)))
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, sigs)
    rc = _wait(job[0], timeout, stuck_after,
               lambda: first_at[0] + stop_timeout if first_at else None)
    if rc == "timeout":
        say(f"yasgd.launch: error: job exceeded {timeout:.0f} s; killing it")
        kill_all()
        job[0].wait()
        return 124
    if rc == "unstopped":
        name = signal.Signals(signals[0]).name
        say(f"yasgd.launch: error: the job has not ended {stop_timeout:.0f} s after "
             f"{name} (--stop-timeout); killing it (a checkpoint it was writing is "
             "discarded, the previous one is intact)")
        kill_all()
        job[0].wait()
        return 128 + signals[0]
    if rc == "stuck":
        say(f"yasgd.launch: error: {os.path.basename(cmd[0])} has had no rank running for "
             f"{stuck_after:.0f} s and has not exited; killing it (the ranks' exit statuses "
             "are unknown)")
        kill_all()
        job[0].wait()
        rc = 1
    if len(signals) > 1:
        return 128 + signals[-1]
    stop_file = env[STOP_FILE_ENV]
    if os.path.isfile(stop_file):
        with open(stop_file) as f:
            signame = (f.read().split() or ["SIGTERM"])[0]
        return 128 + (signal.SIGINT if signame == "SIGINT" else signal.SIGTERM)
    if signals and rc != 0:
        say(f"yasgd.launch: job stopped by {signal.Signals(signals[0]).name} "
             f"({os.path.basename(cmd[0])} exit status {rc})")
        return 128 + signals[0]
    return rc


def _kill(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass
