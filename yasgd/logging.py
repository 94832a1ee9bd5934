"""Run output: JSON lines (``metrics.jsonl``), a progress bar and console lines on
rank 0 only. The MLPerf-format log lives in yasgd.mlperf."""
from __future__ import annotations

import json
import sys
import time
from typing import Any, Optional


class RunLog:
    """Rank 0 writes; every other rank's calls are no-ops."""

    def __init__(self, path: Optional[str], is_root: bool, progress: bool):
        self.is_root = is_root
        self.progress = progress and is_root
        self._f = open(path, "a", buffering=1) if (path and is_root) else None
        self._bar = None
        self.t0 = time.time()

    def event(self, kind: str, **fields: Any) -> None:
        if self._f is None:
            return
        rec = {"event": kind, "time": round(time.time() - self.t0, 3)}
        rec.update(fields)
        self._f.write(json.dumps(rec) + "\n")

    def say(self, text: str) -> None:
        if not self.is_root:
            return
        if self._bar is not None:
            self._bar.write(text, file=sys.stdout)
        else:
            print(text, flush=True)

    def bar_start(self, total: int, desc: str) -> None:
        if not self.progress:
            return
        from tqdm import tqdm
        self._bar = tqdm(total=total, desc=desc, file=sys.stderr, mininterval=1.0,
                         dynamic_ncols=True, leave=False)

    def bar_update(self, n: int, **postfix: Any) -> None:
        if self._bar is not None:
            self._bar.update(n)
            if postfix:
                self._bar.set_postfix(postfix, refresh=False)

    def bar_close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def close(self) -> None:
        self.bar_close()
        if self._f is not None:
            self._f.close()
            self._f = None
