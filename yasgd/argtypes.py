"""argparse types shared by ``yasgd`` (yasgd/cli.py) and its launcher (yasgd/launch.py):
each refuses a bad value with a message that names the allowed range; argparse adds the
argument's name, and both parsers print it as one ``yasgd: error:`` line (exit 2)."""
from __future__ import annotations

import argparse
import math
from typing import Callable, Optional


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
