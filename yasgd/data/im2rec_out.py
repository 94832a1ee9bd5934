"""The folders of ``yasgd data im2rec``: the checks of the source and output folders before
any work, and the output's names.

The record files are streamed into their name plus ``.part``; the whole set of outputs
(both splits' records, indexes and digests, and ``classes.txt``) replaces the old files only
once every one is complete (:func:`yasgd.outputs.together`): a conversion that stops or fails
at any point - in the validation split, or while ``classes.txt`` is written - leaves the
outputs of an earlier run as they were, never a new ``train.rec`` beside an old ``val.rec``.
"""
from __future__ import annotations

import os
import stat
import tempfile
from typing import List

from yasgd import UsageError, outputs
from yasgd.writable import entry_problem, nearest_existing

SPLITS, RECORD_FILES = ("train", "val"), (".rec", ".idx", ".digests")
OUTPUTS = tuple(f"{s}{e}" for s in SPLITS for e in RECORD_FILES) + ("classes.txt",)
#: the record files are streamed into NAME.part, and the set renamed once it is complete
PART = ".part"
PARTS = tuple(f"{s}{e}{PART}" for s in SPLITS for e in RECORD_FILES)


def unfollowable(path: str) -> str:
    """What ``path`` is where it is a symbolic link that cannot be followed (dangling, or a
    loop): "a link to TARGET, which cannot be followed (why)"; else ""."""
    if not os.path.islink(path):
        return ""
    try:
        os.stat(path)
    except OSError as e:
        return f"a link to {os.readlink(path)}, which cannot be followed ({e.strerror})"
    return ""


def folder_problem(path: str) -> str:
    """Why ``path`` is no folder ("does not exist", "is ..."), or ""."""
    if not os.path.lexists(path):
        return "does not exist"
    why = unfollowable(path)
    if why:
        return "is " + why
    if not os.path.isdir(path):
        return "is a file, not a folder"
    return ""


def entries(folder: str) -> List[os.DirEntry]:
    """The entries of ``folder``; UsageError naming it where it cannot be read."""
    try:
        with os.scandir(folder) as it:
            return list(it)
    except OSError as e:
        raise UsageError(f"im2rec: cannot read folder {folder} ({e.strerror or e})") from None


def check_apart(src: str, dst: str) -> None:
    """UsageError if ``dst`` is ``src`` or lies inside it: the outputs would land in the
    input (a new class folder ``out`` of ``train/``, files the next conversion reads). The
    real path of ``dst`` and its ancestors are compared with ``src`` by device and inode, so
    no symlink, ``..`` or second mount of the folder gets round it. ``src`` inside ``dst``
    is fine: every output (``OUTPUTS``, ``PARTS``) is a file directly in ``dst``, so
    none can be a file of ``src``, and ``src`` by one of those names is check_dst's error."""
    try:
        src_stat = os.stat(src)
    except OSError:
        return                          # list_images says what is wrong with src
    if not stat.S_ISDIR(src_stat.st_mode):
        return
    probe = real = os.path.realpath(dst)
    while True:
        try:
            same = os.path.samestat(os.stat(probe), src_stat)
        except OSError:
            same = False                # not there (yet): not src
        if same:
            where = "is the" if probe == real else "lies inside"
            raise UsageError(f"im2rec: output folder {dst} {where} source folder {src}: the "
                             "output would become part of the input")
        if os.path.dirname(probe) == probe:
            return
        probe = os.path.dirname(probe)


def check_dst(dst: str) -> None:
    """UsageError unless ``dst`` is a folder, or could be made as one, and is writable."""
    why = unfollowable(dst)
    if why:
        raise UsageError(f"im2rec: output folder {dst} is {why}")
    if os.path.exists(dst) and not os.path.isdir(dst):
        raise UsageError(f"im2rec: output folder {dst} is an existing file, not a folder")
    probe = nearest_existing(dst)     # the nearest existing ancestor: a writable folder
    if not os.path.isdir(probe):
        why = unfollowable(probe) or "a file"
        raise UsageError(f"im2rec: cannot create output folder {dst}: {probe} is {why}")
    problem = outputs.name_problem(dst) or outputs.checked(entry_problem, probe)
    if problem:
        raise UsageError(f"im2rec: cannot write output folder {dst}: {problem}")
    for name in OUTPUTS + PARTS:      # every name written there (a link is replaced, not this)
        path = os.path.join(dst, name)
        if os.path.isdir(path) and not os.path.islink(path):
            raise UsageError(f"im2rec: {path} is a folder; it would be overwritten by an "
                             "output file")


def make_dst(dst: str) -> None:
    """Make ``dst`` and clear the ``.part`` names: what a conversion killed outright left,
    or a link there, which the writers would otherwise write through."""
    try:
        os.makedirs(dst, exist_ok=True)
        with tempfile.TemporaryFile(dir=dst):
            pass
        for name in PARTS:
            path = os.path.join(dst, name)
            if os.path.lexists(path):
                os.remove(path)
    except OSError as e:
        raise UsageError(f"im2rec: cannot write output folder {dst}: {e.strerror}") from None
