"""The shape of a results record (``examples/results/*.json``) as the tools that read it
(``bench.summary``, ``bench.report``) read it, checked once when it is loaded: a file that
cannot be read, is no JSON, or lacks or mistypes a field is one line naming the file and the
field (:class:`RecordError`), before anything is written.

A shape is a leaf (STR, NUM, INT, BOOL, ANY; FINITE, FRACTION, SECONDS, COUNT), a dict (an
object holding those keys; a key ending in "?" may be absent), ``[shape]`` or
:class:`ListOf` (a list of such items),
:class:`MapOf` (an object whose keys are data, its values of one shape) or :class:`Maybe`
(the shape, or null).
"""
from __future__ import annotations

import json
import math
from typing import Callable, Optional

from yasgd import outputs


#: the most bytes a record or a bench's table may hold (bench.output.MAX_JSON_BYTES)
MAX_BYTES = 64 << 20


class RecordError(ValueError):
    """A results file that is not the record the tools read: the message names the file and
    what is wrong with it, on one line (``yasgd: error: bench.summary: FILE: ...``)."""


class _Leaf:
    def __init__(self, one: str, many: str, test: Callable[[object], bool]):
        self.one, self.many, self.test = one, many, test


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


STR = _Leaf("a string", "strings", lambda v: isinstance(v, str))
NUM = _Leaf("a number", "numbers", _number)
INT = _Leaf("an integer", "integers", lambda v: _number(v) and isinstance(v, int))
BOOL = _Leaf("a boolean", "booleans", lambda v: isinstance(v, bool))
ANY = _Leaf("a value", "values", lambda v: True)
# the bounded numbers of a training bench's cache entries (``cache_entry``)
FINITE = _Leaf("a finite number", "finite numbers", lambda v: _number(v) and math.isfinite(v))
FRACTION = _Leaf("a number in [0, 1]", "numbers in [0, 1]", lambda v: _number(v) and 0 <= v <= 1)
SECONDS = _Leaf("a finite number >= 0", "finite numbers >= 0",
                lambda v: FINITE.test(v) and v >= 0)
COUNT = _Leaf("an integer >= 1", "integers >= 1", lambda v: INT.test(v) and v >= 1)


class Maybe:
    """``shape`` or null."""

    def __init__(self, shape: object):
        self.shape = shape


class ListOf:
    """A list of items of ``shape``, at least ``at_least`` of them (``[shape]``: any number)."""

    def __init__(self, shape: object, at_least: int = 0):
        self.shape, self.at_least = shape, at_least


class MapOf:
    """An object whose keys are data (arm names and the like), every value of ``shape``."""

    def __init__(self, shape: object):
        self.shape = shape


def describe(shape: object, many: bool = False) -> str:
    """``shape`` in words: "a list of objects", "a number or null"."""
    if isinstance(shape, _Leaf):
        return shape.many if many else shape.one
    if isinstance(shape, Maybe):
        return describe(shape.shape, many) + " or null"
    if isinstance(shape, list):
        shape = ListOf(shape[0])
    if isinstance(shape, ListOf):
        least = f"at least {shape.at_least} " if shape.at_least else ""
        return f"{'lists' if many else 'a list'} of {least}{describe(shape.shape, True)}"
    if isinstance(shape, MapOf):
        return f"{'objects' if many else 'an object'} of {describe(shape.shape, True)}"
    return "objects" if many else "an object"


def _got(v: object) -> str:
    if v is None or isinstance(v, bool):
        return json.dumps(v)
    return ("a number" if _number(v) else "a string" if isinstance(v, str) else
            "a list" if isinstance(v, list) else "an object")


def mismatch(value: object, shape: object, path: str = "") -> Optional[str]:
    """What is wrong with ``value`` (read from JSON) as ``shape``, the first thing found:
    ``PATH must be WHAT, got WHAT`` or ``PATH is missing (must be WHAT)``; None if nothing.
    ``path`` names ``value`` in the record (``acceptance[0].met``; "" the whole record)."""
    base = shape.shape if isinstance(shape, Maybe) else shape
    if value is None and base is not shape:
        return None
    base = ListOf(base[0]) if isinstance(base, list) else base
    fits = (base.test(value) if isinstance(base, _Leaf) else
            isinstance(value, list) if isinstance(base, ListOf) else isinstance(value, dict))
    if not fits or isinstance(base, ListOf) and len(value) < base.at_least:
        got = _got(value) + (f" of {len(value)}" if fits else "")
        return f"{path or 'the top level'} must be {describe(shape)}, got {got}"
    if isinstance(base, ListOf):
        items = [(f"{path}[{i}]", v, base.shape) for i, v in enumerate(value)]
    elif isinstance(base, MapOf):
        items = [(f"{path}[{json.dumps(k)}]", v, base.shape) for k, v in value.items()]
    elif isinstance(base, dict):
        items = []
        for key, sub in base.items():
            name = key.rstrip("?")
            where = f"{path}.{name}" if path else name
            if name in value:
                items.append((where, value[name], sub))
            elif not key.endswith("?"):
                return f"{where} is missing (must be {describe(sub)})"
    else:
        items = []
    for where, v, sub in items:
        wrong = mismatch(v, sub, where)
        if wrong:
            return wrong
    return None


def load_record(path: str, shape: object) -> dict:
    """The results JSON at ``path``, checked once against ``shape`` (``{}``: a JSON object);
    RecordError naming the file and what is wrong with it
    where it cannot be read, is no JSON, or lacks or mistypes a field of ``shape``."""
    try:
        data = json.loads(read_text(path))
    except json.JSONDecodeError as e:
        raise RecordError(f"{path}: not valid JSON: {e}") from None
    except RecursionError:
        raise RecordError(f"{path}: JSON nested deeper than the parser goes") from None
    wrong = mismatch(data, shape)
    if wrong:
        raise RecordError(f"{path}: {wrong}")
    return data


def read_text(path: str) -> str:
    """The text of ``path`` (UTF-8); RecordError naming the file where it cannot be read or
    is not one to read whole (a pipe, a device, more than :data:`MAX_BYTES`)."""
    try:
        problem = outputs.not_whole(path, MAX_BYTES)
        if problem:
            raise RecordError(f"{path}: {problem}")
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise RecordError(f"{path}: cannot read it: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise RecordError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
