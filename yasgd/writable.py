"""Whether an output the user named can be written, found by trying: the one check behind
every output option of the CLI (``bench --out/--cache``, ``provenance RUN_DIR``,
``simulate --json/--plot``, ``jobs render --output``, ``data im2rec DST``).

The permission bits (``os.access``) pass for root whatever they say, and say nothing of a
file system that takes no new entry (procfs, a read-only mount): so each check makes (and
removes) an empty directory or file where the output would go. Nothing the user has is
touched: an existing file is opened for appending and closed unchanged, and one that is
not an earlier output of the same command (its first bytes tell) is never replaced.
"""
from __future__ import annotations

import os
import tempfile
from typing import Callable, Optional

HEAD_BYTES = 1 << 16   # how much of an existing file ``ours`` sees


def nearest_existing(path: str) -> str:
    """The nearest part of ``path`` (itself or an ancestor) that exists."""
    probe = os.path.abspath(path)
    while not os.path.lexists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    return probe


def entry_problem(folder: str) -> Optional[str]:
    """Why no new entry can be made in the existing directory ``folder``, or None."""
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".yasgd-probe-", dir=folder))
    except OSError as e:
        return f"{folder} is not writable ({e.strerror or e})"
    return None


def dir_problem(path: str) -> Optional[str]:
    """Why ``path`` cannot be (or be created as) a writable directory, or None."""
    probe = nearest_existing(path)
    if not os.path.isdir(probe):
        return f"{probe} is not a directory"
    return entry_problem(probe)


def file_problem(path: str, ours: Optional[Callable[[bytes], bool]] = None,
                 kind: str = "") -> Optional[str]:
    """Why the regular file ``path`` cannot be written (created, or replaced where it
    exists) in its existing directory, or None. With ``ours`` (a test of a file's first
    bytes), an existing file is replaced only when it is empty or ``ours`` says it is
    ``kind``, an earlier output of the same command: any other file would be lost."""
    parent = os.path.dirname(os.path.abspath(path))
    if os.path.lexists(path):
        if not os.path.isfile(path):
            return f"{path} exists and is not a regular file"
        try:
            with open(path, "ab"):
                pass
        except OSError as e:
            return f"{path} is not writable ({e.strerror or e})"
        if ours is not None:
            with open(path, "rb") as f:
                head = f.read(HEAD_BYTES)
            if head and not ours(head):
                return (f"{path} exists and is not {kind}; writing would lose it (remove it "
                        "or name another file)")
    if not os.path.isdir(parent):
        return (f"directory {parent} is not a directory" if os.path.lexists(parent)
                else f"directory {parent} does not exist")
    return entry_problem(parent)
