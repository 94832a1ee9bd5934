"""What a training bench's sitting may replace at ``--out``: never a record that holds runs
its report would lack (:func:`check_record`, made before any work)."""
from __future__ import annotations

from typing import Optional

from yasgd import UsageError
from yasgd.bench import common


def check_record(name: str, path: str, study, quick: bool,
                 max_runs: Optional[int] = None) -> None:
    """Refuse (UsageError, before any work) a sitting whose report would replace the record
    at ``path`` with one that lacks some of its runs: an arm of it that ``--arms`` leaves
    out, or a run whose entry this sitting's cache does not have at all (another cache, or a
    mistyped ``--cache``), or a file there that is not an entry (``cache_entry``). An entry of
    other code counts as there where its run trains again, as a change of code asks; not
    under ``--max-runs 0``, which trains none. A record of the other scale (``--quick`` or
    not) is another table, whose runs stay in the cache: only they must be there. ``study``:
    the sitting's :class:`yasgd.bench.study_run.Study`."""
    try:
        old = common.read_json(path)
    except (OSError, ValueError):
        return                                  # none (or none of a bench's) to lose
    records = old.get("records") if isinstance(old, dict) else None
    if not isinstance(records, list):
        return                                  # not a record of a training bench
    runs = [r for r in records if isinstance(r, dict)
            and all(isinstance(r.get(k, ""), str) for k in ("arm", "key"))]
    same_scale = bool(old.get("quick")) == quick
    left_out = sorted({r.get("arm") for r in runs} - {a.name for a in study.arms} - {None}
                      if same_scale else ())
    if left_out:
        named = ", ".join(map(str, left_out[:4])) + (f" and {len(left_out) - 4} more"
                                                     if len(left_out) > 4 else "")
        raise UsageError(f"bench {name}: --out: {path} holds the runs of {len(left_out)} arm(s) "
                         f"that --arms leaves out ({named}); this sitting's report would drop "
                         f"them: pass another --out (the runs stay in the cache, from which "
                         f"the command without --arms writes the whole table)")
    missing, bad, stale = 0, [], 0
    for r in runs:
        entry, why = study.cache.read(str(r.get("key")))
        missing += entry is None
        if why is not None:
            bad.append(f"{r.get('key')}.json there is not a run a bench wrote: {why}")
        stale += entry is not None and study.cache.why_stale(entry) is not None
    if stale and max_runs == 0 and same_scale:
        raise UsageError(f"bench {name}: --out: {path} holds {len(runs)} run(s), {stale} of "
                         f"them of other code than this checkout's; --max-runs 0 trains none "
                         f"of them again, so this sitting's report would drop them: train them "
                         f"(a sitting without --max-runs 0), or pass another --out")
    if missing:
        more = f", and {len(bad) - 1} more like it" if len(bad) > 1 else ""
        raise UsageError(f"bench {name}: --out: {path} holds {len(runs)} run(s), "
                         f"{missing} of them not in the cache {study.cache.root}"
                         f"{f' ({bad[0]}{more})' if bad else ''}; this "
                         f"sitting's report would drop them: pass --cache with the cache they "
                         f"are in, or another --out")
