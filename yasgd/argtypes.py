"""argparse types shared by ``yasgd`` (yasgd/cli.py) and its launcher (yasgd/launch.py):
each refuses a bad value with a message that names the allowed range; argparse adds the
argument's name, and both parsers print it as one ``yasgd: error:`` line (exit 2)."""
from __future__ import annotations

import argparse
import math
from typing import Callable


def integer(lo: int, unit: str = "") -> Callable[[str], int]:
    """An integer >= lo (``unit``, e.g. "seconds", names what it counts)."""
    what = f"an integer number of {unit}" if unit else "an integer"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < lo:
            raise argparse.ArgumentTypeError(f"must be {what} >= {lo}, got {text!r}")
        return value
    return parse


def positive(unit: str = "") -> Callable[[str], float]:
    """A finite number > 0 (not nan, not inf)."""
    what = f"a finite number of {unit}" if unit else "a finite number"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value > 0):
            raise argparse.ArgumentTypeError(f"must be {what} > 0, got {text!r}")
        return value
    return parse
