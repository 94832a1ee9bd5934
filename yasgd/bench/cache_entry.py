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
from typing import Dict, Optional, Set, Tuple

from yasgd.bench import common, runcache
from yasgd.bench.record_shape import (BOOL, COUNT, FINITE, FRACTION, SECONDS, STR, MapOf,
                                      Maybe, mismatch)


# what the searches, the tables and the plots read of an entry (``record_shape``'s shapes)
ENTRY = {"code": MapOf(STR), "result": {
    "val_top1": Maybe(FRACTION), "test_top1": Maybe(FRACTION), "diverged": BOOL,
    "wall_s": SECONDS, "threads": COUNT, "curve": [{"epoch": FINITE, "val_top1": FRACTION}],
    "code": MapOf(STR), "env": {}}}


class Cache(runcache.RunCache):
    """A run cache whose ``get`` serves only well-formed entries of this checkout's code."""

    def __init__(self, root: str):
        super().__init__(root)
        self._said: Set[str] = set()

    def read(self, key: str) -> Tuple[Optional[Dict[str, object]], Optional[str]]:
        """(the entry, None) for a well-formed entry of any code, (None, None) where there is
        no file, (None, why) for a file that is not an entry."""
        try:
            entry = common.read_json(self.path(key))
        except FileNotFoundError:
            return None, None
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None, "not JSON"
        except ValueError as e:             # no regular file, too large, nested too deep
            return None, str(e)
        except OSError as e:
            return None, f"unreadable: {e.strerror or type(e).__name__}"
        why = mismatch(entry, ENTRY)
        return (entry, None) if why is None else (None, why)

    def get(self, key: str) -> Optional[Dict[str, object]]:
        entry, why = self.read(key)
        if why is not None and key not in self._said:
            self._said.add(key)
            common.say(f"cache {self.root}: {key}.json is not a run a bench wrote ({why}); "
                       f"its run trains again")
        return entry if entry is not None and self.why_stale(entry) is None else None
