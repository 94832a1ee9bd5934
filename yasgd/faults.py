"""Surviving faults: SIGINT / SIGTERM (Ctrl-C, a scheduler's walltime, ``scancel``),
non-finite losses. The stall watchdog is :mod:`yasgd.watchdog`.

Signals. :func:`install_stop_handlers` makes SIGINT and SIGTERM set a flag
instead of killing the process. Every step, each rank starts a non-blocking
Horovod allreduce of its flags and reads the one it started a step earlier
(:class:`StopPoll`): a rank never waits for that result beyond the previous
step's own communication, and every rank reads the same reduced value at the
same step, so all of them stop at the same step boundary, at most one step after
the first rank saw the signal. ``fit`` then writes a checkpoint of that step and
raises :class:`Terminated`; the CLI prints where the run stopped and how to
continue. Exit status: 130 for SIGINT, 143 for SIGTERM (128 + the signal). Under
a launcher that maps it (``yasgd.launch``, the job scripts: they export
:data:`STOP_FILE_ENV`), the ranks write that marker file and exit 0 instead, so
that mpirun ends at once rather than aborting the job, and the launcher exits
130 / 143 after reading the marker.

A second SIGINT while a stop is pending ends the process at once (status 130,
no checkpoint; the previous checkpoint is intact, checkpoints being written
atomically). Before the training loop runs (imports, Horovod start-up, data
loading) there is nothing to checkpoint: a signal then stops the process at once
with the same status. Repeated SIGTERMs (a scheduler signals every process and
mpirun forwards its own) only set the flag again.

Non-finite loss. The loop keeps, on the device and without a host sync, the
number of steps since the epoch's running loss sum became non-finite
(``bad += 1 - isfinite(loss_sum)``, two tiny operators per step). At the log
interval the loss is checked after the metric allreduce; if it is not finite,
:func:`first_nonfinite_step` turns each rank's count into the first step at
which its loss was NaN/inf and takes the minimum over ranks (one more small
allreduce, on the error path only), so the error names the exact step.
"""
from __future__ import annotations

import os
import signal
import sys
from typing import Optional

import numpy as np

STOP_FILE_ENV = "YASGD_STOP_FILE"
EXIT_STATUS = {"SIGINT": 128 + signal.SIGINT, "SIGTERM": 128 + signal.SIGTERM}   # 130, 143
TERM_EXIT_STATUS = EXIT_STATUS["SIGTERM"]


class StopRequested(Exception):
    """Some rank received SIGINT/SIGTERM; every rank raises this at the same step."""

    def __init__(self, step: int, epoch: int, signame: str):
        super().__init__(f"stop requested at step {step} by {signame}")
        self.step, self.epoch, self.signame = step, epoch, signame


class Terminated(Exception):
    """The run stopped on a signal after writing a checkpoint (exit 130 / 143)."""

    def __init__(self, message: str, signame: str = "SIGTERM", checkpoint: Optional[str] = None):
        super().__init__(message)
        self.signame, self.checkpoint = signame, checkpoint

    @property
    def exit_status(self) -> int:
        return EXIT_STATUS[self.signame]


class Interrupted(BaseException):
    """A signal arrived before the training loop ran: nothing to checkpoint."""

    def __init__(self, signame: str):
        super().__init__(f"stopped by {signame} before training started (no checkpoint)")
        self.signame = signame


_state = {"SIGINT": 0, "SIGTERM": 0, "armed": False}


def _on_signal(signum, frame) -> None:
    name = signal.Signals(signum).name
    pending = _state["SIGINT"] or _state["SIGTERM"]
    if not _state["armed"]:
        raise Interrupted(name)
    if name == "SIGINT" and _state["SIGINT"]:
        sys.stderr.write("yasgd: second SIGINT: stopping now, without a checkpoint\n")
        sys.stderr.flush()
        os._exit(EXIT_STATUS["SIGINT"])
    _state[name] += 1
    if not pending:
        sys.stderr.write(f"yasgd: {name} received; stopping at the next step with a checkpoint "
                         f"(Ctrl-C again to stop at once)\n")
        sys.stderr.flush()


def install_stop_handlers() -> None:
    """SIGINT and SIGTERM set the stop flags (main thread only; a no-op elsewhere)."""
    try:
        signal.signal(signal.SIGINT, _on_signal)
        signal.signal(signal.SIGTERM, _on_signal)
    except ValueError:   # not the main thread
        pass


def arm() -> None:
    """From here on a signal stops the training loop at a step boundary."""
    _state["armed"] = True


def local_flags() -> list:
    return [float(_state["SIGINT"] > 0), float(_state["SIGTERM"] > 0)]


def reset() -> None:
    """Forget received signals (tests)."""
    _state.update(SIGINT=0, SIGTERM=0, armed=False)


def signame_of(flags) -> Optional[str]:
    """The signal that stops the run from (summed) flags [SIGINT, SIGTERM]; SIGINT wins."""
    if flags[0] > 0:
        return "SIGINT"
    if flags[1] > 0:
        return "SIGTERM"
    return None


class StopPoll:
    """The per-step stop decision, the same on every rank, without a blocking sync.

    :meth:`after_step` starts the allreduce of this rank's flags and reads the
    one started one step earlier; it returns the signal's name when every rank
    must stop now. On one rank it reads the local flags directly."""

    def __init__(self, world):
        self.world = world
        self.pending = None

    def after_step(self, step: int) -> Optional[str]:
        if self.world.size == 1:
            return signame_of(local_flags())
        import mxnet as mx
        import horovod.mxnet as hvd
        previous = self.pending
        # two alternating names: the previous one may still be in flight
        self.pending = hvd.allreduce(mx.nd.array(local_flags(), ctx=mx.cpu()), average=False,
                                     name=f"yasgd.stop.{step % 2}")
        if previous is None:
            return None
        return signame_of(previous.asnumpy())   # SYNC: the allreduce started one step ago

    def drain(self) -> None:
        """Wait for the last allreduce started (before anything else collective)."""
        if self.pending is not None:
            self.pending.wait_to_read()
            self.pending = None


def report_stop(e: BaseException) -> int:
    """Print the stop line (rank 0 only: ranks share mpirun's stderr) and return the
    exit status: 130 / 143, or 0 after writing the marker for a launcher that
    maps it (:data:`STOP_FILE_ENV`), so that mpirun does not abort the job."""
    from yasgd import dist
    world = dist.current()
    signame = getattr(e, "signame", "SIGTERM")
    if world is None or world.is_root:
        sys.stderr.write(f"yasgd: {e}\n")   # one write per line
        sys.stderr.flush()
    target = os.environ.get(STOP_FILE_ENV)
    if not target or not isinstance(e, Terminated):
        return EXIT_STATUS[signame]
    if world is None or world.is_root:
        try:
            with open(target, "w") as f:
                f.write(f"{signame} {e.checkpoint or ''}\n")
        except OSError:
            return EXIT_STATUS[signame]
    return 0


def first_nonfinite_step(world, step: int, bad_steps: float) -> Optional[int]:
    """The first step (over all ranks) whose loss was non-finite.

    ``bad_steps``: this rank's count of steps, up to and including ``step``, since
    its running loss sum became non-finite (0: still finite). A collective: every
    rank must call it (the non-finite check is on the reduced loss, which all ranks
    share). Returns None when no rank saw a non-finite loss of its own (the sum
    overflowed).
    """
    local = np.zeros(world.size)
    if bad_steps > 0:
        local[world.rank] = step - int(bad_steps) + 1
    firsts = world.allreduce_sum(local, name=f"yasgd.nonfinite.{step}")
    firsts = firsts[firsts > 0]
    return int(firsts.min()) if firsts.size else None
