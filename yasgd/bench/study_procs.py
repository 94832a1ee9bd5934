"""The worker processes of a study sitting (yasgd.bench.study_run), one training run each,
and the bench's wait for them, so that a stop signal reaches every run and the bench at
once: :class:`Workers` starts and stops them under one lock, :func:`first_done` waits in
steps short enough for the main thread to run a stop that another thread received.
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Dict, List, Set

from yasgd.supervise import POLL_S


def first_done(futures: List[Future], poll: float = POLL_S) -> Set[Future]:
    """The futures of ``futures`` that are done, once one is, waited for in steps of
    ``poll`` seconds. A stop signal that the kernel gave another thread (a worker's) is run
    by Python in the main thread only when that thread next runs Python code: a wait with no
    timeout would keep the stop from the bench until a run ends."""
    while True:
        done, _ = wait(futures, timeout=poll, return_when=FIRST_COMPLETED)
        if done:
            return done


class Workers:
    """The worker processes of one sitting, each in a session of its own, started and
    stopped under one lock. Once :meth:`stop` has run no worker starts, and every one that
    started has been sent SIGTERM: a start that was under way when the stop came (the
    thread between its ``Popen`` and the record of its process) is waited for, so it is
    not missed, and ``Popen`` returns after the child's ``exec``, so the signal never lands
    in the child while it still runs this process's handlers (between fork and exec)."""

    class Cancelled(Exception):
        """A start asked for after the stop."""

    def __init__(self):
        self._lock = threading.Lock()
        self._procs: Dict[str, subprocess.Popen] = {}
        self._stopped = False

    def start(self, key: str, args: List[str], **kw) -> subprocess.Popen:
        with self._lock:
            if self._stopped:
                raise Workers.Cancelled(f"run {key} not started: the bench is stopping")
            p = subprocess.Popen(args, start_new_session=True, **kw)
            self._procs[key] = p
            return p

    def ended(self, key: str) -> None:
        with self._lock:
            self._procs.pop(key, None)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            for p in self._procs.values():
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
