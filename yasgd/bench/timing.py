"""Timing of asynchronous MXNet work: warm-up calls untimed, then medians.

MXNet's engine is asynchronous (a call only queues work), so every timed call is ended by
``mx.nd.waitall()``. :func:`interleaved_times` times several arms in rounds (a, b, c, a,
b, c, ...) so that a change of machine load hits every arm alike; :func:`slowest_rank_ms`
takes, round by round, the slower rank's time of a multi-rank step.
"""
from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

@dataclass
class Timing:
    """Seconds per call: the median and every timed sample (warm-up excluded)."""
    median: float
    samples: List[float] = field(default_factory=list)
    warmup: int = 0

    @property
    def ms(self) -> float:
        return self.median * 1e3

    def to_dict(self, unit: str = "ms") -> Dict[str, object]:
        f = 1e3 if unit == "ms" else 1.0
        return {f"median_{unit}": round(self.median * f, 4),
                f"samples_{unit}": [round(s * f, 4) for s in self.samples],
                "repeats": len(self.samples), "warmup": self.warmup}


def _waitall() -> None:
    if "mxnet" in sys.modules:
        sys.modules["mxnet"].nd.waitall()


def median_time(fn: Callable[[], object], repeats: int = 5, warmup: int = 1,
                sync: Optional[Callable[[], None]] = _waitall,
                before: Optional[Callable[[], None]] = None) -> Timing:
    """Call ``fn`` ``warmup`` times untimed, then ``repeats`` times timed.

    ``sync`` ends every call (default ``mx.nd.waitall()``: the timing must include the
    work the call queued). ``before`` runs untimed ahead of every call (a barrier, a
    reset). Returns a :class:`Timing` (median of the timed calls, in seconds).
    """
    return interleaved_times({"fn": fn}, repeats, warmup, sync=sync, before=before)["fn"]


def interleaved_times(fns: Dict[str, Callable[[], object]], repeats: int, warmup: int = 1,
                      sync: Optional[Callable[[], None]] = _waitall,
                      before: Optional[Callable[[], None]] = None) -> Dict[str, Timing]:
    """Like :func:`median_time` for several arms at once, in rounds (a, b, c, a, b, c,
    ...) so that a change of machine load hits every arm alike."""
    samples: Dict[str, List[float]] = {k: [] for k in fns}
    for r in range(warmup + max(1, repeats)):
        for name, fn in fns.items():
            if before:
                before()
            t0 = time.perf_counter()
            fn()
            if sync:
                sync()
            if r >= warmup:
                samples[name].append(time.perf_counter() - t0)
    return {k: Timing(statistics.median(v), v, warmup) for k, v in samples.items()}


def slowest_rank_ms(comm, times: Dict[str, "Timing"], digits: int = 2) -> Optional[Dict[str, dict]]:
    """Per arm, each round's time on the slower rank, and their median, in ms (on rank 0;
    None elsewhere). ``comm``: an mpi4py communicator; ``times``: interleaved_times()."""
    mine = {k: t.samples for k, t in times.items()}
    everyone = comm.gather(mine, root=0)
    if comm.Get_rank() != 0:
        return None
    out = {}
    for k, samples in mine.items():
        worst = [max(r[k][i] for r in everyone) for i in range(len(samples))]
        out[k] = {"median_ms": round(statistics.median(worst) * 1e3, digits),
                  "samples_ms": [round(s * 1e3, digits) for s in worst]}
    return out


# -- data loaders: one pass = one epoch, every batch waited for ---------------------------
def epoch_passes(loader) -> Callable[[], object]:
    """A pass factory for a yasgd loader: each call starts its next epoch and iterates it."""
    epoch = [0]

    def one_pass():
        loader.set_epoch(epoch[0])
        epoch[0] += 1
        return iter(loader)
    return one_pass


def time_pass(make_iter) -> tuple:
    """(images, seconds) of one pass over ``make_iter()``: every batch's data waited for."""
    t0 = time.perf_counter()
    n = 0
    for batch in make_iter():
        data = batch[0]
        data.wait_to_read()
        n += data.shape[0]
    return n, time.perf_counter() - t0
