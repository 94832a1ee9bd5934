"""Writing a command's output files so that a stop or an error never leaves a truncated
file, or a set of files of which some are new and some old.

Every file a command writes for the user (a bench's JSON, table and plots, a simulation's
JSON and plot, a job script, the documents' generated blocks) goes through :func:`file`:
the writer writes a hidden temporary file beside the target (the same folder, so that the
rename is atomic on POSIX; the same suffix, so that a writer that reads the format from
the name, as matplotlib does, still can). The temporary is flushed to disk and renamed over
the target only once it is whole. An exception, or a stop signal unwinding the command
(:mod:`yasgd.supervise`), removes it and leaves the old file as it was.

Files that belong together are written inside :func:`together`: their temporaries are
renamed only when the whole block has ended without an exception, one after the other
while the stop signals are held, so that a signal arriving then takes effect once the set
is complete. A stop or an error anywhere in the block leaves every old file of the set.
The checks that an output can be written (:mod:`yasgd.writable`) go through
:func:`checked`, which holds the stop signals the same way; :func:`file_problem` and
:func:`dir_problem` add the lengths of the names the write will make (:func:`name_problem`).

A temporary outlives its command only if the process is killed outright (SIGKILL, the
out-of-memory killer); it is a hidden file named after the target, the host and the
process, and the next write of the same target on that host removes it.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import stat
import threading
from typing import Callable, Iterator, List, Optional, Tuple

from yasgd import UsageError, writable
from yasgd.checkpoint_format import fsync as _sync
from yasgd.supervise import stop_signals

# each thread's open ``together()`` set: a file another thread writes meanwhile (a bench's
# worker thread writing a run's spec while the main thread writes a report) is its own
_local = threading.local()


def _staged() -> Optional[List[Tuple[str, str]]]:
    return getattr(_local, "staged", None)


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname()) or "host"


def _parts(target: str) -> Tuple[str, str, str]:
    """(folder, what comes before the process id, what comes after it) of the temporary."""
    folder, base = os.path.split(target)
    stem, suffix = os.path.splitext(base)
    return folder, f".{stem}.{_host()}-", f".tmp{suffix}"


def temporary(target: str) -> str:
    """The hidden temporary beside ``target``, with its suffix: ``.NAME.HOST-PID.tmp.SUFFIX``
    (the host, for a folder that several nodes share)."""
    folder, head, tail = _parts(target)
    return os.path.join(folder, f"{head}{os.getpid()}{tail}")


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:     # another user's
        pass
    return True


def _remove_stale(target: str) -> None:
    """Remove the temporaries of ``target`` that processes of this host killed outright
    left behind: those whose process no longer runs."""
    folder, head, tail = _parts(target)
    pattern = re.compile(re.escape(head) + r"(\d+)" + re.escape(tail))
    with contextlib.suppress(OSError):
        for name in os.listdir(folder or "."):
            m = pattern.fullmatch(name)
            if m and not _running(int(m.group(1))):
                _remove(os.path.join(folder, name))


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)


def _sync_folders(targets: List[str]) -> None:
    for folder in sorted({os.path.dirname(t) or "." for t in targets}):
        with contextlib.suppress(OSError):
            _sync(folder)


@contextlib.contextmanager
def file(target: str, mode: Optional[int] = None) -> Iterator[str]:
    """Yield the temporary path to write ``target`` through.

    A target that is a symbolic link is written through the link; one that is not a
    regular file (a pipe, a device) is written as it is, since a rename would replace it.
    The file gets ``mode``, else the mode of the file it replaces, else the umask's.
    """
    if os.path.islink(target):
        target = os.path.realpath(target)
    if os.path.exists(target) and not os.path.isfile(target):
        yield target
        return
    tmp = temporary(target)
    try:
        yield tmp
        if mode is None and os.path.exists(target):
            mode = os.stat(target).st_mode & 0o7777
        if mode is not None:
            os.chmod(tmp, mode)
    except BaseException:
        _remove(tmp)
        raise
    stage(tmp, target)


def write_text(target: str, text: str, mode: Optional[int] = None) -> None:
    with file(target, mode) as tmp, open(tmp, "w") as f:
        f.write(text)


def write_bytes(target: str, data: bytes, mode: Optional[int] = None) -> None:
    with file(target, mode) as tmp, open(tmp, "wb") as f:
        f.write(data)


def write_json(target: str, obj: object, indent: int = 1, **kw) -> None:
    """``obj`` as JSON; it is serialised before anything is written."""
    write_text(target, json.dumps(obj, indent=indent, **kw) + "\n")


def save_figure(fig, target: str, **kw) -> str:
    """A matplotlib figure into ``target`` (its format from the suffix); returns ``target``."""
    with file(target) as tmp:
        fig.savefig(tmp, **kw)
    return target


@contextlib.contextmanager
def together() -> Iterator[None]:
    """Files written in the block (by this thread) replace their old files only when the
    block ends normally, all of them. Nested blocks belong to the outermost one."""
    if _staged() is not None:
        yield
        return
    staged: List[Tuple[str, str]] = []
    _local.staged = staged
    try:
        yield
    except BaseException:
        for tmp, _ in staged:
            _remove(tmp)
        raise
    finally:
        _local.staged = None
    _commit(staged)


def stage(tmp: str, target: str) -> None:
    """``tmp``, a whole temporary of ``target`` (written through :func:`file`, or streamed
    by a writer of its own: im2rec's records, through MXNet's writer): flushed to disk and
    renamed with the open :func:`together` set (removed if the set fails), or at once
    outside one."""
    try:
        _sync(tmp)
    except BaseException:
        _remove(tmp)
        raise
    staged = _staged()
    if staged is None:
        _commit([(tmp, target)])
    elif (tmp, target) not in staged:   # written twice in one set: the last one counts
        staged.append((tmp, target))


def kind(mode: int) -> str:
    """What a file system entry of ``mode`` (``st_mode``) that is no regular file is: "a
    directory", "a pipe", "a socket" or "a device"."""
    return ("a directory" if stat.S_ISDIR(mode) else "a pipe" if stat.S_ISFIFO(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "a device")


def not_whole(path: str, limit: int) -> Optional[str]:
    """Why the file ``path`` (a link followed) is not one to read whole: it is no regular
    file (a pipe would block the read for good, a device never end it) or is larger than
    ``limit`` bytes; None where it is one. OSError where it cannot be looked at."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        return f"{kind(st.st_mode)}, not a regular file"
    if st.st_size > limit:
        return f"{st.st_size:,} bytes, more than the {limit:,} a bench writes"
    return None


def checked(problem: Callable[..., Optional[str]], *args, **kw) -> Optional[str]:
    """One of :mod:`yasgd.writable`'s checks (or a check that calls one, as
    ``config.check_run_dir``), run whole. Each makes (and removes) an entry where the output
    would go; a stop signal that lands while it exists takes effect once it is removed, so a
    stop never leaves a ``.yasgd-probe-*`` in the user's folder."""
    with _holding_stops():
        return problem(*args, **kw)


def name_problem(path: str, through_temporary: bool = False) -> Optional[str]:
    """Why ``path`` cannot be made for the length of its names, or None: a name in it longer
    than the file system of its nearest existing folder takes (NAME_MAX), or the path longer
    than the kernel takes (PATH_MAX). With ``through_temporary`` (a file this process will
    write through :func:`file`) its temporary's name counts too, which is longer.

    :mod:`yasgd.writable` tries a short name in the nearest existing folder, so it cannot
    see this: a path that passes it would still fail when the output is made, after the
    work (ENAMETOOLONG). Lengths are in bytes, as the file system counts them."""
    folder = writable.nearest_existing(path)
    if not os.path.isdir(folder):
        folder = os.path.dirname(folder)
    try:
        name_max = os.pathconf(folder, "PC_NAME_MAX")
        path_max = os.pathconf(folder, "PC_PATH_MAX")
    except (OSError, ValueError):
        return None     # the file system does not say: the write itself will
    longest = path
    names = [(n, "") for n in path.split(os.sep) if n not in ("", ".", "..")]
    if through_temporary and (os.path.isfile(path) or not os.path.exists(path)):
        longest = temporary(path)
        names.append((os.path.basename(longest), " (the temporary the file is written through)"))
    for name, what in names:
        size = len(os.fsencode(name))
        if size > name_max:
            shown = name if len(name) <= 80 else name[:60] + "..."
            return (f"the name {shown!r}{what} is {size} bytes, more than the {name_max} "
                    f"that a name may have on the file system of {folder}")
    size = len(os.fsencode(os.path.abspath(longest)))   # as train makes its folder
    if size >= path_max:
        return (f"the path is {size} bytes, more than the {path_max - 1} "
                f"that the system takes")
    return None


def file_problem(path: str, ours: Optional[Callable[[bytes], bool]] = None,
                 kind: str = "") -> Optional[str]:
    """Why the output file ``path`` cannot be written (:func:`writable.file_problem`, run
    whole), or the names its write makes are too long (:func:`name_problem`), or None."""
    return (name_problem(path, through_temporary=True)
            or checked(writable.file_problem, path, ours, kind))


def dir_problem(path: str) -> Optional[str]:
    """Why the output folder ``path`` cannot be (or be made as) a writable directory
    (:func:`writable.dir_problem`, run whole), or its names are too long, or None."""
    return name_problem(path) or checked(writable.dir_problem, path)


def check_dir(path: str, what: str) -> None:
    """UsageError naming the output folder ``what`` (``bench --out``) where ``path`` cannot
    be (or be made as) a writable directory (:func:`dir_problem`)."""
    problem = dir_problem(path)
    if problem:
        raise UsageError(f"{what} {path} must be a writable directory (or one that can be "
                         f"created): {problem}")


@contextlib.contextmanager
def _holding_stops() -> Iterator[None]:
    """Record the stop signals that arrive in the block and deliver them after it. Only
    the main thread can change a handler; elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: List[int] = []
    old = {}
    try:
        for sig in stop_signals():     # an ignored SIGHUP (nohup) stays ignored
            if signal.getsignal(sig) is not None:  # None: a handler not set from Python
                old[sig] = signal.signal(sig, lambda n, _frame: arrived.append(n))
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        for sig in dict.fromkeys(arrived):
            signal.raise_signal(sig)


def _commit(staged: List[Tuple[str, str]]) -> None:
    done = 0
    try:
        with _holding_stops():
            for tmp, target in staged:
                os.replace(tmp, target)
                done += 1
    finally:
        for tmp, _ in staged[done:]:
            _remove(tmp)
    _sync_folders([t for _, t in staged])
    for _, target in staged:
        _remove_stale(target)

