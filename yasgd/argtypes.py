"""argparse types shared by ``yasgd`` (yasgd/cli.py) and its launcher (yasgd/launch.py):
each refuses a bad value with a message that names the allowed range; argparse adds the
argument's name, and both parsers print it as one ``yasgd: error:`` line (exit 2). Also
``--version``, and the checks of the input files the CLI names (a config, a hostfile),
made before they are read (UsageError)."""
from __future__ import annotations

import argparse
import math
import os
import stat
from typing import Callable, List, Optional

from yasgd import UsageError


#: the longest duration an argument takes: a year (threads, timers and the job
#: schedulers all stop well short of the floats' range)
YEAR_S = 365 * 24 * 3600


def integer(lo: int, unit: str = "", hi: Optional[int] = None) -> Callable[[str], int]:
    """An integer >= lo (and <= hi where given; ``unit``, e.g. "seconds", names what it
    counts)."""
    what = f"an integer number of {unit}" if unit else "an integer"
    bound = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < lo or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"must be {what} {bound}, got {text!r}")
        return value
    return parse


#: the most processes or threads one option may start per CPU core of this host
MAX_PER_CORE = 8


def per_core(unit: str, per_core: int = MAX_PER_CORE) -> Callable[[str], int]:
    """An integer in [1, per_core x this host's CPU cores]: a count of ``unit`` (processes,
    threads, runs) that one command starts here, bounded so that a typo cannot fork without
    end."""
    cores = os.cpu_count() or 1
    hi = per_core * cores
    check = integer(1, unit, hi)

    def parse(text: str) -> int:
        try:
            return check(text)
        except argparse.ArgumentTypeError as e:
            raise argparse.ArgumentTypeError(
                f"{e} (at most {per_core} per CPU core; this host has {cores})") from None
    return parse


def positive(unit: str = "", hi: Optional[float] = None) -> Callable[[str], float]:
    """A finite number > 0 (not nan, not inf; <= hi where given)."""
    what = f"a finite number of {unit}" if unit else "a finite number"
    bound = "> 0" if hi is None else \
        f"in (0, {int(hi) if float(hi).is_integer() else hi}]"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value > 0) or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"must be {what} {bound}, got {text!r}")
        return value
    return parse


def seconds() -> Callable[[str], float]:
    """A duration in seconds: > 0, at most a year."""
    return positive("seconds", hi=YEAR_S)


class VersionAction(argparse.Action):
    """``--version``: the versions are looked up only when asked for."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="print yasgd's version and its stack's, and exit")

    def __call__(self, parser, namespace, values, option_string=None):
        print(version())
        parser.exit(0)


def version() -> str:
    """yasgd's version and the stack's, from the installed packages' metadata (no import)."""
    from importlib import metadata
    from yasgd import __version__
    parts = []
    for name in ("mxnet", "horovod", "numpy"):
        try:
            parts.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{name} not installed")
    return f"yasgd {__version__} ({', '.join(parts)})"


CONFIG_MAX_BYTES = 1 << 20   # a config is a few kB; more is not one (and is read whole)


def check_config_file(path: str) -> None:
    """Refuse, before reading it, a config that is not a regular file (a FIFO would wait for a
    writer, /dev/zero never ends) or is too large to be one. A missing path or a directory is
    left to yasgd.config, which names both."""
    try:
        st = os.stat(path)
    except OSError:
        return
    if stat.S_ISDIR(st.st_mode):
        return
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"config file {path} is not a regular file (a FIFO, device or "
                         "socket): give a YAML file")
    if st.st_size > CONFIG_MAX_BYTES:
        raise UsageError(f"config file {path} is {st.st_size:,} bytes, more than any config "
                         f"({CONFIG_MAX_BYTES:,} at most): not a YAML config")


def check_hostfile(path: str, what: str) -> List[str]:
    """The host names of a hostfile as MPI reads it (a text file whose non-blank lines
    start with a host name), or UsageError naming ``what`` and ``path``."""
    if not os.path.exists(path):
        raise UsageError(f"{what} {path} does not exist")
    if not os.path.isfile(path):
        raise UsageError(f"{what} {path} is not a file")
    try:
        with open(path, encoding="utf-8") as f:
            hosts = [line.split()[0] for line in f if line.strip()]
    except UnicodeDecodeError:
        raise UsageError(f"{what} {path} is not a text file of host names") from None
    except OSError as e:
        raise UsageError(f"{what} {path} cannot be read: {e.strerror}") from None
    if not hosts:
        raise UsageError(f"{what} {path} lists no host")
    return hosts
