"""The stall watchdog: a rank that makes no progress ends the whole job.

One frozen rank (a stuck file-system read, a wedged driver, a deadlock, a node
that stopped answering) leaves every other rank waiting inside a collective for
as long as the allocation lasts: Horovod's own stall shutdown cannot fire while
its controller waits in negotiation for the missing rank. So every rank watches
its *own* progress from a daemon thread. The training loop calls :meth:`beat`
once per step (two attribute writes: nothing is added to the step's device
work); when no beat comes for the timeout, the thread prints one line naming
the rank, its host, the step, the seconds waited and what the rank was doing,
and aborts the job: ``MPI_Abort`` through mpi4py when MPI is initialised (mpirun
then ends every rank, a stopped one included), else ``os._exit`` (the launcher,
horovodrun or the scheduler ends the others). The exit status is
:data:`STALL_EXIT_STATUS`; the last checkpoint is intact, so the job can be
resubmitted with ``run.resume=auto``.

The timeout (``run.stall_timeout_s``): a number of seconds, ``0`` for off, or
``auto`` = max(:data:`AUTO_FLOOR_S`, :data:`AUTO_STEPS` x the median step time),
the step time measured over the log windows of the loop (a window's wall time /
its steps, so MXNet's asynchronous queueing does not shorten it).

Phases that are slow but alive are not stalls. A phase entered with
:meth:`phase` has its own allowance, a multiple of the timeout
(:data:`PHASE_FACTORS`): the start-up until the first log window has been
timed (graph building, hybridization, the first allreduces), the start of an
epoch (loader shuffles and prefetch), evaluation and BN re-estimation (which
beat once per batch, so the allowance covers only one batch), and checkpoint
writing. Waiting in a collective is not a phase of its own: it is exactly where
a live rank waits for a dead one.
"""
from __future__ import annotations

import contextlib
import os
import socket
import statistics
import sys
import threading
import time
from typing import Callable, Iterator, List, Optional

AUTO_FLOOR_S = 120.0
AUTO_STEPS = 20
STALL_EXIT_STATUS = 75          # EX_TEMPFAIL: resubmit with run.resume=auto
PHASE_FACTORS = {"start-up": 5.0, "epoch start": 3.0, "evaluation": 3.0,
                 "BN re-estimation": 3.0, "checkpoint": 3.0}
# What a rank waiting in each phase is doing, for the stall line.
DOING = {"training": "training steps (gradient allreduce and metric reductions are collectives)",
         "start-up": "starting up (graph building, first steps)",
         "epoch start": "starting an epoch (data loader)",
         "evaluation": "evaluating", "BN re-estimation": "re-estimating BN statistics",
         "checkpoint": "writing a checkpoint"}


def abort_job(status: int) -> None:
    """End this rank and, through MPI_Abort where MPI runs, the whole job."""
    try:
        import mpi4py
        mpi4py.rc.initialize = False   # never start MPI here: only use the one Horovod started
        mpi4py.rc.finalize = False
        from mpi4py import MPI
        if MPI.Is_initialized() and not MPI.Is_finalized():
            MPI.COMM_WORLD.Abort(status)
    except Exception:  # noqa: BLE001 -- no mpi4py or no MPI (Gloo, one process): exit alone
        pass
    os._exit(status)


class Watchdog:
    """Per-rank progress watch (see the module docstring).

    ``timeout_s``: seconds, 0 = off, None = auto. ``abort``: called with the
    exit status after the stall line is printed (default :func:`abort_job`).
    """

    def __init__(self, timeout_s: Optional[float], rank: int = 0, size: int = 1,
                 abort: Callable[[int], None] = abort_job, poll_s: float = 1.0):
        self.fixed = timeout_s
        self.rank, self.size = rank, size
        self.abort = abort
        self.poll_s = poll_s
        self.step, self.epoch = 0, 0
        self._last = time.monotonic()
        self._phase, self._factor = "start-up", PHASE_FACTORS["start-up"]
        self._step_times: List[float] = []
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.fired = False

    @property
    def enabled(self) -> bool:
        return self.fixed is None or self.fixed > 0

    def timeout(self) -> float:
        """The steady-state timeout in seconds (auto: from the median step time)."""
        if self.fixed is not None:
            return float(self.fixed)
        if not self._step_times:
            return AUTO_FLOOR_S
        return max(AUTO_FLOOR_S, AUTO_STEPS * statistics.median(self._step_times))

    def limit(self) -> float:
        """Seconds without a beat that count as a stall in the current phase."""
        return self.timeout() * self._factor

    # -- called by the training loop ------------------------------------------------
    def start(self) -> "Watchdog":
        if self.enabled and self._thread is None:
            self._last = time.monotonic()
            self._thread = threading.Thread(target=self._run, name="yasgd-watchdog", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def beat(self, step: Optional[int] = None, epoch: Optional[int] = None) -> None:
        """Progress: a step (or an evaluation batch) completed."""
        if step is not None:
            self.step = step
        if epoch is not None:
            self.epoch = epoch
        self._last = time.monotonic()

    def step_time(self, seconds_per_step: float) -> None:
        """One log window's seconds per step; the first one ends the start-up phase."""
        if seconds_per_step > 0:
            self._step_times.append(float(seconds_per_step))
            del self._step_times[:-64]
        if self._phase == "start-up":
            self._phase, self._factor = "training", 1.0

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """A slow but live phase with its own allowance; the previous phase after it."""
        before = (self._phase, self._factor)
        self._phase, self._factor = name, max(PHASE_FACTORS.get(name, 1.0), before[1])
        self.beat()
        try:
            yield
        finally:
            self._phase, self._factor = before
            self.beat()

    # -- the thread -------------------------------------------------------------------
    def message(self, waited: float) -> str:
        who = f"rank {self.rank} on {socket.gethostname()}" if self.size > 1 else \
            f"the run on {socket.gethostname()}"
        why = ("; a peer rank stopped answering, or this rank's own work hangs" if self.size > 1
               else "")
        return (f"yasgd: error: stall: {who} made no progress for {waited:.0f} s (limit "
                f"{self.limit():.0f} s, run.stall_timeout_s) at step {self.step} (epoch "
                f"{self.epoch + 1}) while {DOING.get(self._phase, self._phase)}{why}; aborting the "
                f"job (exit status {STALL_EXIT_STATUS}); continue with run.resume=auto")

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            waited = time.monotonic() - self._last
            if waited > self.limit():
                self.fired = True
                sys.stderr.write(self.message(waited) + "\n")
                sys.stderr.flush()
                self.abort(STALL_EXIT_STATUS)
                return
