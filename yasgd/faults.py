"""Surviving faults: SIGTERM (a scheduler's walltime), non-finite losses.

SIGTERM. :func:`install_sigterm_handler` makes SIGTERM set a flag instead of
killing the process. The flag travels with the training metrics in the
allreduce that ``yasgd.train._log_train`` does anyway at every log interval and
at the last step of every epoch (no extra sync point): when any rank has it,
every rank learns it at the same step, raises :class:`StopRequested`, and
``fit`` writes a checkpoint of that step and raises :class:`Terminated`; the
CLI prints one line and exits with status 143 (128 + SIGTERM: "terminated,
resumable with run.resume=auto"). The checkpoint therefore comes at most
``train.log_interval`` steps after the signal (plus the checkpoint's write):
keep ``log_interval x step time + write time`` below the scheduler's grace
period (Slurm KillWait 30 s, PBS kill_delay 10 s by default) and below
mpirun's SIGTERM -> SIGKILL delay (``yasgd.launch --grace``, 10 s; job scripts:
``OMPI_MCA_odls_base_sigkill_timeout``). Repeated SIGTERMs (the scheduler
signals every process and mpirun forwards its own) only set the flag again.
A rank blocked in a collective (its peer died) does not reach a log interval;
mpirun's SIGKILL ends it after that delay.

Non-finite loss. The loop keeps, on the device and without a host sync, the
number of steps since the epoch's running loss sum became non-finite
(``bad += 1 - isfinite(loss_sum)``, two tiny operators per step). At the log
interval the loss is checked after the metric allreduce; if it is not finite,
:func:`first_nonfinite_step` turns each rank's count into the first step at
which its loss was NaN/inf and takes the minimum over ranks (one more small
allreduce, on the error path only), so the error names the exact step.
"""
from __future__ import annotations

import signal
import sys
from typing import Optional

import numpy as np

TERM_EXIT_STATUS = 128 + signal.SIGTERM   # 143


class StopRequested(Exception):
    """Some rank received SIGTERM; every rank raises this at the same step."""

    def __init__(self, step: int, epoch: int):
        super().__init__(f"stop requested at step {step}")
        self.step, self.epoch = step, epoch


class Terminated(Exception):
    """The run stopped on SIGTERM after writing a checkpoint (exit status 143)."""

    def __init__(self, message: str, checkpoint: Optional[str] = None):
        super().__init__(message)
        self.checkpoint = checkpoint


_flag = {"term": 0}


def _on_sigterm(signum, frame) -> None:
    if not _flag["term"]:
        sys.stderr.write("yasgd: SIGTERM received; stopping at the next log interval with a "
                         "checkpoint\n")
        sys.stderr.flush()
    _flag["term"] = 1


def install_sigterm_handler() -> None:
    """SIGTERM sets the stop flag (main thread only; a no-op elsewhere)."""
    try:
        signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:   # not the main thread
        pass


def stop_flag() -> float:
    """1.0 when this process received SIGTERM since the handler was installed."""
    return float(_flag["term"])


def reset() -> None:
    """Forget a received SIGTERM (tests)."""
    _flag["term"] = 0


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
