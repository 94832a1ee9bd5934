"""Stops that the code they landed in dropped.

A stop signal's Python handler raises its exception (:class:`yasgd.supervise.Stopped`,
:class:`yasgd.faults.Interrupted` before training starts) wherever the main thread runs
Python code next. Two kinds of place cannot pass it on:

- a finaliser (MXNet frees arrays in ``NDArray.__del__``): Python hands the exception to
  ``sys.unraisablehook``, which prints it, and goes on;
- C code that catches an error and prints it with ``PyErr_Print`` (``sys.excepthook``),
  then goes on or raises another error in its place. numpy's ``import_array``, which every
  C extension built on numpy runs as it is imported, does this with any exception raised
  while it imports numpy's core: opencv's module turns a stop there into an ImportError,
  which MXNet, importing it, takes for "no opencv" and ignores. A Ctrl-C at that moment of
  a training's start-up printed a traceback, and the training ran to its end.

:func:`keep` makes both hooks keep such a stop instead of printing it, and call ``again``
with its signal, which sends the signal again a moment later (from within the hook, the
handler would run inside the same code again); :func:`cause` names the stop as what ended
the command when another error, raised in its place, reached the top first. A stop that
has unwound the whole stack (its traceback reaches a frame with no caller) is one that
nothing caught, not one that was dropped: the hooks pass it on, as every other exception.
"""
from __future__ import annotations

import os
import signal
import sys
from typing import Callable, List, Tuple

#: the stop exceptions :func:`keep` watches for, and its callback
_kinds: List[type] = []
_again: List[Callable[[int], None]] = []
_owner: List[int] = []          # the process that called keep (a forked child is not it)
_dropped: List[BaseException] = []


def keep(kinds: Tuple[type, ...], again: Callable[[int], None]) -> None:
    """From here on a stop of one of ``kinds`` (an exception with ``signum``, or with
    ``signame``) dropped by a finaliser or by C code is not printed: it is kept for
    :func:`cause`, and ``again(signum)`` asked to send its signal again. In a process forked
    from this one it is only not printed (the parent ends the child)."""
    _kinds.extend(k for k in kinds if k not in _kinds)
    _again[:] = [again]
    if not _owner:
        sys.unraisablehook = _on_unraisable(sys.unraisablehook)
        sys.excepthook = _on_printed(sys.excepthook)
    _owner[:] = [os.getpid()]


def signum_of(exc: BaseException) -> int:
    """The signal a stop exception stands for."""
    number = getattr(exc, "signum", None)
    return int(number) if number is not None else int(signal.Signals[exc.signame])


def cause(caught: BaseException) -> BaseException:
    """What ended the command that ``caught`` reached the top of: a stop that was dropped
    on its way when ``caught`` is not itself a stop (the error raised in its place), else
    ``caught``. The stop signals are then blocked in this thread, so that the signal sent
    again (:func:`keep`) stays pending instead of landing in the report of the stop."""
    if not _dropped or isinstance(caught, tuple(_kinds)):
        return caught
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
    return _dropped[0]


def _kept(exc: BaseException, tb) -> bool:
    """Whether ``exc`` is a dropped stop, which this module keeps (and has sent again)."""
    if not _kinds or not isinstance(exc, tuple(_kinds)):
        return False
    if tb is not None and tb.tb_frame.f_back is None:
        return False      # its outermost frame (a traceback's first) has no caller: uncaught
    if os.getpid() == _owner[0] and not sys.is_finalizing():
        _dropped.append(exc)
        _again[0](signum_of(exc))
    return True


def _on_unraisable(hook: Callable) -> Callable:
    def on_unraisable(unraisable) -> None:
        if not _kept(unraisable.exc_value, None):
            hook(unraisable)
    return on_unraisable


def _on_printed(hook: Callable) -> Callable:
    def excepthook(kind, value, tb) -> None:
        if not _kept(value, tb):
            hook(kind, value, tb)
    return excepthook
