"""The allowed values of a config key: each key of :mod:`yasgd.config` declares one of
these checks where it is defined (``key(default, check)``), and ``describe()`` gives the
phrase after "must be" in the one-line error. Pure Python: checking a config needs neither
MXNet nor the file system.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Tuple

__all__ = ["Check", "Int", "Float", "Bool", "OneOf", "Line", "Name", "ModelName", "Seconds",
           "INT64_MAX", "BOTTLENECK_DEPTHS", "BASIC_DEPTHS", "model_depth"]


# -- the allowed values of a key ------------------------------------------------------------
class Check:
    """What a key accepts: ``typ`` (the Python type after coercion), ``ok(value)`` and
    ``describe()``, the phrase after "must be" in the error message."""
    typ: type = object

    def ok(self, value: Any) -> bool:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError


INT64_MAX = 2 ** 63 - 1


@dataclass(frozen=True)
class Int(Check):
    """An integer in ``[lo, hi]`` (None: unbounded, but always within 64 bits)."""
    lo: Optional[int] = None
    hi: Optional[int] = None
    typ = int

    def ok(self, value: Any) -> bool:
        return (isinstance(value, int) and not isinstance(value, bool) and abs(value) <= INT64_MAX
                and (self.lo is None or value >= self.lo) and (self.hi is None or value <= self.hi))

    def describe(self) -> str:
        if self.lo is not None and self.hi is not None:
            return f"an integer in [{self.lo}, {self.hi}]"
        if self.lo is not None:
            return f"an integer >= {self.lo}"
        return "an integer" if self.hi is None else f"an integer <= {self.hi}"


@dataclass(frozen=True)
class Float(Check):
    """A finite number with optional bounds: ``ge``/``gt`` below, ``le``/``lt`` above."""
    ge: Optional[float] = None
    gt: Optional[float] = None
    le: Optional[float] = None
    lt: Optional[float] = None
    typ = float

    def ok(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return False
        return ((self.ge is None or value >= self.ge) and (self.gt is None or value > self.gt)
                and (self.le is None or value <= self.le) and (self.lt is None or value < self.lt))

    def describe(self) -> str:
        lo = (f"[{self.ge:g}" if self.ge is not None else f"({self.gt:g}" if self.gt is not None
              else None)
        hi = (f"{self.le:g}]" if self.le is not None else f"{self.lt:g})" if self.lt is not None
              else None)
        if lo and hi:
            return f"a finite number in {lo}, {hi}"
        if lo:
            return f"a finite number {'>=' if lo[0] == '[' else '>'} {lo[1:]}"
        if hi:
            return f"a finite number {'<=' if hi[-1] == ']' else '<'} {hi[:-1]}"
        return "a finite number"


@dataclass(frozen=True)
class Bool(Check):
    typ = bool

    def ok(self, value: Any) -> bool:
        return isinstance(value, bool)

    def describe(self) -> str:
        return "a boolean (true or false)"


@dataclass(frozen=True)
class OneOf(Check):
    choices: Sequence[str] = ()
    typ = str

    def ok(self, value: Any) -> bool:
        return value in self.choices

    def describe(self) -> str:
        return f"one of {', '.join(self.choices)}"


_CONTROL = re.compile(r"[\x00\n\r]")


@dataclass(frozen=True)
class Line(Check):
    """Free text on one line (no NUL, newline or carriage return); a path or a label."""
    what: str = "a string"
    nonempty: bool = False
    typ = str

    def ok(self, value: Any) -> bool:
        return isinstance(value, str) and not _CONTROL.search(value) and (bool(value) or not self.nonempty)

    def describe(self) -> str:
        return f"{self.what} without NUL or line breaks" + (", not empty" if self.nonempty else "")


@dataclass(frozen=True)
class Name(Check):
    """A file name component: the run directory is ``<run.dir>/<run.name>-<stamp>``."""
    max_len: int = 100
    typ = str
    _RE = re.compile(r"[A-Za-z0-9._+-]+( [A-Za-z0-9._+-]+)*")   # single spaces inside only

    def ok(self, value: Any) -> bool:
        return (isinstance(value, str) and len(value) <= self.max_len and value not in (".", "..")
                and self._RE.fullmatch(value) is not None)

    def describe(self) -> str:
        return (f"a name of 1-{self.max_len} letters, digits, '.', '_', '+', '-' and single inner "
                f"spaces (no path separators, not '.' or '..')")


# The networks yasgd.model.build accepts (kept here so that checking a config needs no MXNet;
# tests/unit/test_bad_input.py pins the two tables to yasgd.model's).
BOTTLENECK_DEPTHS = (50, 101, 152)
BASIC_DEPTHS = (18, 34)


def model_depth(name: str) -> Optional[int]:
    """The depth of a model name yasgd.model.build accepts, or None: resnet18/34/50/101/152
    (optionally ``_v1.5`` / ``_v1b``, any case) and the CIFAR-style resnet<6n+2>."""
    key = name.lower().replace("_v1.5", "").replace("_v1b", "")
    if not (key.startswith("resnet") and key[6:].isdigit() and key[6:].isascii()):
        return None
    depth = int(key[6:])
    if depth in BOTTLENECK_DEPTHS or depth in BASIC_DEPTHS or (depth >= 8 and (depth - 2) % 6 == 0):
        return depth
    return None


@dataclass(frozen=True)
class ModelName(Check):
    typ = str

    def ok(self, value: Any) -> bool:
        return isinstance(value, str) and model_depth(value) is not None

    def describe(self) -> str:
        return ("a known model: resnet18/34/50/101/152 (optionally _v1.5) or resnet<6n+2> "
                "such as resnet8, resnet20, resnet56")


@dataclass(frozen=True)
class WordsOrNumber(Check):
    """One of ``words``, or a finite number >= ``ge``, kept as text."""
    words: Tuple[str, ...] = ()
    ge: float = 0.0
    typ = str

    def ok(self, value: Any) -> bool:
        if not isinstance(value, str):
            return False
        if value in self.words:
            return True
        try:
            x = float(value)
        except ValueError:
            return False
        return math.isfinite(x) and x >= self.ge


@dataclass(frozen=True)
class Seconds(WordsOrNumber):
    """``auto`` or a finite number of seconds >= 0 (``0`` = off)."""
    words: Tuple[str, ...] = ("auto",)
    ge: float = 0.0

    def describe(self) -> str:
        return "auto or a finite number of seconds >= 0 (0 = off)"


@dataclass(frozen=True)
class LossScale(WordsOrNumber):
    """``none``, ``dynamic`` or a finite static loss scale >= 1."""
    words: Tuple[str, ...] = ("none", "dynamic")
    ge: float = 1.0

    def describe(self) -> str:
        return "none, dynamic or a finite static loss scale >= 1"
