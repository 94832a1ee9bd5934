"""An ordered map over worker processes that a stop can end at any moment
(``yasgd data im2rec``'s encoders).

``multiprocessing.Pool`` shares one task queue and one result queue among its workers, each
guarded by a lock that a worker holds while it waits for a task or writes a result.
``Pool.terminate`` kills busy workers and then takes those locks (and reads the result pipe)
itself, so a worker killed while it held one, or half-way through a message, leaves
``terminate`` waiting for good. :class:`Workers` shares nothing: each worker has a pipe of
its own each way, so ending them is a kill and a wait on each, and a worker that dies is an
error naming the jobs it held (:class:`WorkerDied`), not a result that never comes.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
from typing import Any, Callable, Iterator, List, Optional, Sequence

from yasgd.supervise import worker_setup


class WorkerDied(RuntimeError):
    """A worker process ended before it returned its jobs' results."""

    def __init__(self, how: str, jobs: Sequence[Any]):
        super().__init__(how)
        self.how, self.jobs = how, list(jobs)


def _serve(fn: Callable, init: Optional[Callable], jobs: Sequence[Any], parent: int,
           tasks, results) -> None:
    """A worker: for each (start, stop) it receives, the list of ``fn(job)`` over
    ``jobs[start:stop]`` (or the exception one raised); None or a closed pipe ends it."""
    worker_setup(parent)
    if init is not None:
        init()
    while True:
        try:
            task = tasks.recv()
        except EOFError:
            return
        if task is None:
            return
        try:
            out = (True, [fn(job) for job in jobs[task[0]:task[1]]])
        except Exception as e:
            out = (False, e)
        results.send(out)


class Workers:
    """``fn`` over ``jobs`` in ``n`` worker processes, results in the order of ``jobs``.

    Chunks of ``chunksize`` jobs go round-robin, at most ``ahead`` to a worker at a time; a
    task is two indices into ``jobs`` (which the workers have from the start), so the task
    pipes never fill. Use as a context manager: leaving it, by the end of the results or by
    an exception (a stop signal's included), kills whatever still runs and waits for it."""

    def __init__(self, fn: Callable, jobs: Sequence[Any], n: int, init: Optional[Callable] = None,
                 chunksize: int = 8, ahead: int = 2):
        ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
        self.jobs, self.chunksize, self.ahead = jobs, chunksize, ahead
        self._procs: List[Any] = []
        self._tasks: List[Any] = []
        self._results: List[Any] = []
        try:
            for _ in range(n):
                task_r, task_w = ctx.Pipe(duplex=False)
                result_r, result_w = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_serve, daemon=True,
                                   args=(fn, init, jobs, os.getpid(), task_r, result_w))
                proc.start()
                # the worker's ends are closed here before the next fork, so that each
                # result pipe has one writer, its worker: its death reads as EOF
                task_r.close()
                result_w.close()
                self._procs.append(proc)
                self._tasks.append(task_w)
                self._results.append(result_r)
        except BaseException:
            self.close()
            raise

    def __iter__(self) -> Iterator[Any]:
        n, size = len(self._procs), self.chunksize
        chunks = [(i, min(i + size, len(self.jobs))) for i in range(0, len(self.jobs), size)]
        sent = min(len(chunks), n * self.ahead)
        for k in range(sent):
            self._send(k % n, chunks[k])
        for k, (start, stop) in enumerate(chunks):
            w = k % n
            try:
                ok, out = self._results[w].recv()
            except (EOFError, OSError):
                self._procs[w].join(5)
                raise WorkerDied(_how(self._procs[w].exitcode),
                                 self.jobs[start:stop]) from None
            if sent < len(chunks):          # chunk `sent` is worker w's again (round-robin)
                self._send(sent % n, chunks[sent])
                sent += 1
            if not ok:
                raise out
            yield from out

    def _send(self, w: int, chunk) -> None:
        try:
            self._tasks[w].send(chunk)
        except OSError:     # worker w has died: reading its next result says how
            pass

    def close(self) -> None:
        """Kill every worker still running and wait for each; close the pipes."""
        for proc in self._procs:
            if proc.exitcode is None:
                proc.kill()
        for proc in self._procs:
            proc.join()
        for conn in self._tasks + self._results:
            conn.close()
        self._procs, self._tasks, self._results = [], [], []

    def __enter__(self) -> "Workers":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _how(exitcode: Optional[int]) -> str:
    """How a worker ended, from its exit code."""
    if exitcode is None:
        return "it closed its pipe and did not exit"
    if exitcode < 0:
        try:
            return f"it was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"it was killed by signal {-exitcode}"
    return f"it exited with status {exitcode}"
