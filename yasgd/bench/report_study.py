"""The generated blocks of docs/largebatch.md and docs/ablation.md, from
``bench_largebatch.json`` and ``bench_ablation.json``: the tables are rendered by the benches'
own functions from the arms' summaries the JSON holds, so the documents and the benches'
Markdown cannot differ.
"""
from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Dict, List, Optional

from yasgd.bench import common, runcache, study_plan, study_report as sr
from yasgd.bench.report_util import Records, _hardware, _notes, _rel


def _scale(d: dict) -> SimpleNamespace:
    return SimpleNamespace(**d["setup"]["scale"])


def _status(d: dict) -> List[str]:
    comp = d["setup"]["compute"]
    if not d.get("partial"):
        return []
    done = sum(1 for a in d["setup"]["arms"] if a["complete"])
    return [f"**Not complete yet:** {done} of {len(d['setup']['arms'])} arms have finished "
            f"their LR search and seeds ({comp['runs']} runs so far; at least "
            f"{comp['runs_left_at_least']} to go). Every figure below is from the runs done; "
            f"`pending` marks what is not.", ""]


def _code_line(d: dict, rec: Records) -> List[str]:
    """Whether the runs of the tables ran this checkout's training code: the cache's own
    test (``RunCache.why_stale``) on the code they ran (``setup.code``: each module's source
    digest and the environment, as the runs recorded them)."""
    code = d["setup"]["code"]
    if not code.get("version"):
        return []
    cache = runcache.RunCache(os.path.join(rec.dir, "runs_cache"))
    why = cache.why_stale({"code": code["modules"], "env": code["env"]})
    if why is None:
        return ["Every run in these tables ran one code version: this checkout's training code."]
    return [f"Every run in these tables ran one code version, and this checkout's training "
            f"code is not that code ({why}): run again, the bench trains every run anew "
            f"instead of reading the cache."]


def _plan_line(d: dict, plan) -> List[str]:
    """The arms this checkout's plan (``plan(scale)``, e.g. ``study_plan.ablation_arms``) has
    and the tables do not: added since the tables' runs, so none of them ran yet."""
    scale = study_plan.QUICK if d["setup"]["scale"].get("name") == "quick" else study_plan.FULL
    have = {a["arm"] for a in d["setup"]["arms"]}
    missing = [a.label for a in plan(scale) if a.name not in have]
    if not missing:
        return []
    n, it = ("one arm", "it") if len(missing) == 1 else (f"{len(missing)} arms", "them")
    return ["", f"This checkout's plan has {n} these tables do not have: "
            + "; ".join(missing) + f". The bench trains {it} when it next runs."]


def largebatch_results(rec: Records) -> str:
    from yasgd.bench import largebatch as lb
    d = rec.bench("largebatch")
    arms, rows = d["setup"]["arms"], d["setup"]["summary"]
    t1 = lb.headline_table(arms, rows, _scale(d))
    plots = [f"![{p}]({_rel(p)})" for p in d.get("plots") or []]
    return "\n".join(_status(d) + [
        "Each optimizer at its chosen LR (test top-1, mean over seeds ± half the spread; "
        f"{d['setup']['scale']['epochs']} epochs every run):", "", t1, "",
        "Every arm's LR search (validation top-1 of seed 0 at each grid point; the chosen "
        "point in bold) and its seeds (test top-1):", "", sr.search_table(arms), ""]
        + ([lb.FRESH_INTRO, "", lb.fresh_tables(d["fresh"]), ""]
           if (d.get("fresh") or {}).get("checks") else [])
        + [common.acceptance_table(d["acceptance"]), ""]
        + _notes(d["notes"], skip=("Code version",))
        + [""] + _code_line(d, rec) + _plan_line(d, study_plan.headline_arms)
        + ["", _hardware(d["hardware"]), ""] + plots)


def _pt(x: Optional[float]) -> str:
    return "pending" if x is None else sr.pts(x)


def largebatch_reading(rec: Records) -> str:
    d = rec.bench("largebatch")
    s: Dict[int, dict] = {x["batch"]: x for x in d["setup"]["summary"]}
    out = []
    for b in (d["setup"]["scale"]["big"], d["setup"]["scale"]["huge"]):
        r = s.get(b, {})
        lab = f"{b // 1024}K"
        if r.get("recipe_minus_sgd_pts") is None:
            out.append(f"At {lab} the arms have not finished their searches and seeds yet.")
            continue
        margin, spread = r["recipe_minus_sgd_pts"], r["larger_spread_pts"]
        verdict = ("more than" if spread is not None and margin > spread else "not more than")
        out.append(f"At {lab} the recipe's mean is {_pt(r['recipe_minus_baseline_pts'])} points "
                   f"from the batch-256 baseline's and {_pt(margin)} from SGD's, {verdict} the "
                   f"larger spread of the two arms' seeds ({_pt(spread).lstrip('+')} points).")
    out.append("A difference smaller than the spread between seeds is not read as a result.")
    return " ".join(out + _fresh_reading(d.get("fresh") or {}))


def _fresh_reading(f: dict, comparisons: Optional[List[dict]] = None,
                   what: str = "each difference") -> List[str]:
    """What the fresh seeds say of the table, in the terms of the rule they were judged by:
    ``f`` a fresh check (``largebatch.fresh_check``, ``ablation.fresh_check``),
    ``comparisons`` its differences (``f["comparisons"]`` unless given), each with its
    figure on the table's seeds and on the fresh ones and its sign check (None: not checked)."""
    if not f.get("checks"):
        return []
    if f.get("pending"):
        return ["The check on fresh seeds is not complete yet."]
    comps = f["comparisons"] if comparisons is None else comparisons
    seeds = sorted({x for a in f["arms"] for x in a["fresh_seeds"]})
    out = [f"On fresh seeds ({sr.seeds_text(seeds)}: no choice read them), "
           f"{f['passed']} of the {f['checks']} checks hold."]
    moved = [f"{a['label']} ({_pt(a['shift_pts'])} against a larger spread of "
             f"{sr.spread(a['allowed_pts'])})" for a in f["arms"] if not a["holds"]]
    if moved:
        out.append("Beyond its seeds' spread, the mean of " + "; ".join(moved) + ".")
    flipped = [f"{c['comparison']} ({_pt(c['pts'])}, fresh {_pt(c['fresh_pts'])})"
               for c in comps if c["holds"] is False]
    if flipped:
        out.append("Sign changed: " + "; ".join(flipped) + ".")
    out.append(f"On the fresh seeds, {what} beside the larger spread of its two arms' "
               "fresh seeds: " + "; ".join(
                   f"{c['comparison']} {_pt(c['fresh_pts'])} "
                   f"({sr.spread(c.get('fresh_larger_spread_pts'))})"
                   for c in comps) + ".")
    return out


def ablation_results(rec: Records) -> str:
    from yasgd.bench import ablation as ab
    d = rec.bench("ablation")
    arms = d["setup"]["arms"]
    plots = [f"![{p}]({_rel(p)})" for p in d.get("plots") or []]
    return "\n".join(_status(d) + [
        "What each technique buys at 8K (test top-1, means over seeds):", "",
        ab.tables(arms)["table"], "",
        "Every arm's LR search (validation top-1 of seed 0; the chosen point in bold) and its "
        "seeds (test top-1):", "", sr.search_table(arms), "",
        ] + ([ab.FRESH_INTRO, "", ab.fresh_tables(d["fresh"]), ""]
             if (d.get("fresh") or {}).get("checks") else [])
        + [common.acceptance_table(d["acceptance"]), ""] + _notes(d["notes"], skip=("Code version",))
        + _ablation_fresh_reading(d)
        + [""] + _code_line(d, rec) + _plan_line(d, study_plan.ablation_arms)
        + ["", _hardware(d["hardware"]), ""] + plots)


def _rows_on_fresh(f: dict) -> List[str]:
    """What a user reads off the technique rows on the fresh seeds: the rows the table judged
    beyond the spread, their figure there; the rows beyond the fresh spread; and which way the
    arms' means moved (the recipe's among them)."""
    out = []
    claimed = [f"{x['technique']} ({_pt(x['buys_pts'])}, fresh {_pt(x['fresh_buys_pts'])})"
               for x in f["rows"] if x["beyond_spread"]]
    if claimed:
        out.append("Judged beyond the spread in the table, on the fresh seeds: "
                   + "; ".join(claimed) + ".")
    n = len(f["rows"])
    shown = [x["technique"] for x in f["rows"] if x["fresh_beyond_spread"]]
    out.append(f"Beyond the larger spread of its two arms' fresh seeds: {len(shown)} of the {n} "
               "rows" + (f" ({'; '.join(shown)})." if shown else "."))
    lower = sum(1 for a in f["arms"] if a["shift_pts"] < 0)
    recipe = f["recipe"]["shift_pts"]
    out.append(f"The fresh mean is below the mean on the table's seeds in {lower} of the {n} "
               f"technique arms, and the recipe's is {_pt(recipe)} points from its own.")
    return out


def _ablation_fresh_reading(d: dict) -> List[str]:
    """The technique rows on fresh seeds, in the terms of the rule they were judged by, then
    the recipe's spread on its fresh seeds and the differences judged beyond the spread here
    that lie within it (each rests on the recipe's own seeds being as close as they were)."""
    f = d.get("fresh") or {}
    if not f.get("checks"):
        return []
    rows = [{"comparison": r["technique"], "pts": r["buys_pts"], "fresh_pts": r["fresh_buys_pts"],
             "fresh_larger_spread_pts": r["fresh_larger_spread_pts"], "holds": r["holds"]}
            for r in f["rows"]]
    out = _fresh_reading(f, rows, "what each technique buys")
    if not f.get("pending"):
        out += _rows_on_fresh(f)
    r = f["recipe"]
    if r.get("fresh_spread_pts") is None:
        return ["", " ".join(out)]
    wide = r["fresh_spread_pts"]
    line = (f"The recipe's spread on its fresh seeds ({sr.seeds_text(r['fresh_seeds'])}; "
            f"the large-batch table's runs) is {sr.spread(wide)} points, against "
            f"{sr.spread(r['spread_pts'])} on its seeds.")
    checked = {x["arm"] for x in f["rows"]}
    inside = [f"{e['technique']} ({sr.pts(e['arm_minus_recipe_pts'])})" for e in d["effects"]
              if e.get("beyond_spread") and abs(e["arm_minus_recipe_pts"]) <= wide
              and e["arm"] not in checked]
    if inside:
        line += (" Judged beyond the spread in the table, with no fresh seeds of their own, but "
                 "within the recipe's spread on its fresh seeds: " + "; ".join(inside) + ".")
    return ["", " ".join(out), "", line]
