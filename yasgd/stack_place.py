"""Where a thread's Python code is, as a phrase for a message line: the function it runs,
and when that function is the standard library's (a lock's or a pipe's wait), also the
innermost one outside the standard library that called it, the code that waits. Each is
``name (file:line)``, the file relative to the folder it was imported from
(``multiprocessing/pool.py``, ``mxnet/gluon/data/dataloader.py``, ``yasgd/bench/data.py``).
"""
from __future__ import annotations

import os
import sys
import sysconfig
from types import FrameType
from typing import List, Optional


def _folders() -> List[str]:
    """The folders modules are imported from, the deepest first (site-packages lies in the
    standard library's folder in some layouts)."""
    found = {os.path.realpath(p) for p in sys.path if p and os.path.isdir(p)}
    found |= {os.path.realpath(sysconfig.get_paths()[k]) for k in ("stdlib", "purelib", "platlib")}
    return sorted(found, key=len, reverse=True)


def _relative(filename: str) -> str:
    path = os.path.realpath(filename)
    for folder in _folders():
        if path.startswith(folder + os.sep):
            return path[len(folder) + 1:]
    return os.path.basename(filename) or filename


def _in_stdlib(frame: FrameType) -> bool:
    """Whether ``frame`` runs the standard library's code (a frozen module's included)."""
    filename = frame.f_code.co_filename
    if filename.startswith("<frozen "):
        return True
    path = os.path.realpath(filename)
    paths = sysconfig.get_paths()
    return (path.startswith(os.path.realpath(paths["stdlib"]) + os.sep)
            and not path.startswith(os.path.realpath(paths["purelib"]) + os.sep))


def _named(frame: FrameType) -> str:
    return f"{frame.f_code.co_name} ({_relative(frame.f_code.co_filename)}:{frame.f_lineno})"


def thread_place(ident: Optional[int]) -> str:
    """Where thread ``ident`` runs Python code: ``"wait (threading.py:629), called from
    close (yasgd/x.py:12)"``; "" when it runs none (C code of its own, or it has ended)."""
    frame = sys._current_frames().get(ident) if ident is not None else None
    if frame is None:
        return ""
    here = _named(frame)
    if not _in_stdlib(frame):
        return here
    caller = frame.f_back
    while caller is not None and _in_stdlib(caller):
        caller = caller.f_back
    return here if caller is None else f"{here}, called from {_named(caller)}"
