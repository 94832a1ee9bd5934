"""The training benches' cache as a study reads it: a ``runcache.RunCache`` whose entries are
checked for the shape a bench writes before anything reads them.

A file in the cache that is not such an entry (not JSON, not an object, a result without a
field the tables read or with one of another type: a file from another tool, an edit by
hand) is a miss, like an entry of other code: its run trains again and its entry replaces
the file. The first time a sitting meets one, it says so in one line naming the file. A
record at ``--out`` that holds such a run is not replaced (``study_run.check_record``): its
copy of the run's results would be lost.
"""
from __future__ import annotations

import json
import math
from typing import Callable, Dict, Optional, Set, Tuple

from yasgd.bench import common, runcache


def _is_num(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _top1(v: object) -> bool:
    return v is None or (_is_num(v) and 0.0 <= v <= 1.0)


def _curve(v: object) -> bool:
    return isinstance(v, list) and all(
        isinstance(e, dict) and _is_num(e.get("epoch")) and _top1(e.get("val_top1"))
        and e.get("val_top1") is not None for e in v)


def _str_map(v: object) -> bool:
    return isinstance(v, dict) and all(isinstance(k, str) and isinstance(s, str)
                                       for k, s in v.items())


# the result fields the searches, the tables and the plots read, and what each must hold
RESULT_FIELDS: Dict[str, Callable[[object], bool]] = {
    "val_top1": _top1,
    "test_top1": _top1,
    "diverged": lambda v: isinstance(v, bool),
    "wall_s": lambda v: _is_num(v) and v >= 0,
    "threads": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1,
    "curve": _curve,
    "code": _str_map,
    "env": lambda v: isinstance(v, dict),
}


def _short(v: object) -> str:
    text = json.dumps(v)
    return text if len(text) <= 40 else text[:37] + "..."


def malformed(entry: object) -> Optional[str]:
    """Why ``entry`` is not a cache entry a bench wrote, or None when it is one."""
    if not isinstance(entry, dict):
        return f"a JSON {type(entry).__name__ if entry is not None else 'null'}, not an object"
    if not _str_map(entry.get("code")):
        return "its 'code' is not a map of module names to digests"
    res = entry.get("result")
    if not isinstance(res, dict):
        return "it has no 'result' object"
    for name, ok in RESULT_FIELDS.items():
        if name not in res:
            return f"its result has no '{name}'"
        if not ok(res[name]):
            return f"its result's '{name}' is {_short(res[name])}"
    return None


class Cache(runcache.RunCache):
    """A run cache whose ``get`` serves only well-formed entries of this checkout's code."""

    def __init__(self, root: str):
        super().__init__(root)
        self._said: Set[str] = set()

    def read(self, key: str) -> Tuple[Optional[Dict[str, object]], Optional[str]]:
        """(the entry, None) for a well-formed entry of any code, (None, None) where there is
        no file, (None, why) for a file that is not an entry."""
        try:
            with open(self.path(key)) as f:
                entry = json.load(f)
        except FileNotFoundError:
            return None, None
        except ValueError:
            return None, "not JSON"
        except OSError as e:
            return None, f"unreadable: {e.strerror or type(e).__name__}"
        why = malformed(entry)
        return (entry, None) if why is None else (None, why)

    def get(self, key: str) -> Optional[Dict[str, object]]:
        entry, why = self.read(key)
        if why is not None and key not in self._said:
            self._said.add(key)
            common.say(f"cache {self.root}: {key}.json is not a run a bench wrote ({why}); "
                       f"its run trains again")
        return entry if entry is not None and self.why_stale(entry) is None else None
