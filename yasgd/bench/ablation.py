"""``yasgd bench ablation`` (``make bench-ablation``): what each of the paper's techniques buys
at 8K, in the large-batch bench's miniature (same scale, data and epoch budget).

Arms, all at batch 8K but the baseline: the batch-256 SGD baseline; yasgd's recipe as
shipped (LARS with eta 0.005, warm-up, polynomial decay, label smoothing 0.1, WD following
the LR, BN momentum from the BN updates per epoch, last BN gammas at 1); then one arm per
technique of the paper, removed where the recipe uses it (LARS -> SGD momentum with its own
LR search; no warm-up; no label smoothing; constant WD; fixed BN momentum) and added where
the recipe leaves it out (zero-init last BN gamma; augmentation with final polishing;
polynomial power 2); then tuning arms on the recipe with the paper's settings (LARS eta
0.001, zero-init last gamma): those settings themselves, the paper's own code's values one
at a time (warm-up length, LARS eta, momentum) and the settings that raised the validation
mean together, tried to bring the recipe closer to the baseline (the best of them on
validation is the recipe). Every arm's LR is chosen the same way
(yasgd.bench.study: a grid on the validation split, extended until its best is inside), then
it trains 3 seeds there; the validation means over those seeds say which setting the recipe
should take.

Runs are cached (yasgd.bench.runcache, ``--out``/runs_cache, shared with ``bench
largebatch``): the bench continues where an interrupted one stopped and may take more than
one sitting; ``--max-runs N`` / ``--stop-after MIN`` bound one sitting, ``--arms`` picks
arms. Outputs in ``--out``: ``bench_ablation.json`` (every run, every arm's search and
seeds, ``seeds``, ``recipe_minus_baseline_8k``), ``bench_ablation.md`` (the table) and
``bench_ablation.png`` (the bar plot).
"""
from __future__ import annotations

import sys
from typing import Dict, List, Optional, Sequence

from yasgd import outputs
from yasgd.bench import common, seed_effects, study_report as sr
from yasgd.bench.study_plan import FULL, QUICK, ablation_arms, select
from yasgd.bench.study_run import Study, compute, run_bench, table_hardware

NAME = "ablation"
PLOT = f"bench_{NAME}.png"


def tables(summaries: Sequence[Dict[str, object]]) -> Dict[str, object]:
    """The ablation table: per technique, the arm's mean and spread and the points the
    technique buys (recipe - arm where the arm removes it, arm - recipe where it adds it)."""
    by = {s["arm"]: s for s in summaries}
    recipe = next((s for s in summaries if s["group"] == "recipe"), None)
    base = by.get("baseline")
    rows, effects = [], []
    for s in summaries:
        compared = s["group"] in ("removed", "added", "tuning")
        d = sr.diff_pts(s, recipe) if compared else None
        # tuning arms are settings tried, not a technique removed or added: no "buys"
        buys = (None if d is None or s["group"] == "tuning"
                else -d if s["group"] == "removed" else d)
        spread = sr.larger_spread(s, recipe) if compared else None
        both_done = bool(recipe and s["complete"] and recipe["complete"])
        # a difference is shown only when it exceeds the larger of the two arms' spreads,
        # judged once every seed of both arms has trained
        beyond = None if d is None or spread is None or not both_done else abs(d) > spread
        if compared:
            effects.append({"arm": s["arm"], "technique": s["label"], "kind": s["group"],
                            "arm_minus_recipe_pts": d,
                            "technique_buys_pts": buys,
                            "spread_pts": spread, "beyond_spread": beyond,
                            "complete": both_done})
        rows.append([s["label"], s["group"], "n/a" if s["best_lr"] is None else f"{s['best_lr']:g}",
                     sr.pct(s["mean_test_top1"]), sr.pct(s.get("mean_val_top1")),
                     sr.spread(s["spread_pts"]),
                     f"{len(s['seeds'])}/{s['seeds_planned']}", sr.pts(d),
                     sr.pts(buys),
                     sr.spread(spread),
                     _yes(beyond)])
    table = common.md_table(["arm", "kind", "chosen LR", "mean test top-1 %",
                             "mean validation top-1 %", "spread (pts)",
                             "seeds", "arm - recipe (pts)", "the technique buys (pts)",
                             "larger spread of the two (pts)", "beyond it"],
                            rows, "llrrrrrrrrl")
    return {"table": table, "effects": effects,
            "recipe_minus_baseline_8k": sr.diff_pts(recipe, base) if recipe else None,
            "best_on_validation": best_on_validation(summaries)}


FRESH_INTRO = ("The recipe and the technique arms on fresh seeds, at the LR each chose (test "
               "top-1): no choice read these runs, while seed 0's run also chose the LR, so "
               "they check the technique rows out of sample (the recipe's are the large-batch "
               "table's runs):")


def fresh_check(summaries: Sequence[Dict[str, object]],
                effects: Optional[List[Dict[str, object]]] = None) -> Dict[str, object]:
    """The technique rows on fresh seeds (seeds no choice read), by the rule fixed before
    their runs: each technique arm's fresh mean lies within the larger of its two spreads of
    its mean (as in the large-batch table), and a row the table judges beyond the spread
    keeps the sign of what the technique buys. Every row's fresh figure is shown beside the
    larger fresh spread of its two arms; a row within the spread makes no claim to check.
    ``pending`` while any fresh run is still to train. ``effects``: :func:`tables`' of
    ``summaries`` where the caller has them already."""
    recipe = next((s for s in summaries if s["group"] == "recipe"), None)
    planned = [s for s in summaries if s["group"] in ("removed", "added")
               and s.get("fresh_seeds_planned")]
    if recipe is None or not recipe.get("fresh_seeds_planned") or not planned:
        return {"recipe": None, "arms": [], "rows": []} | sr.tally([])
    effects = {e["arm"]: e for e in (tables(summaries)["effects"] if effects is None
                                     else effects)}
    rows = []
    for s in planned:
        sign = -1 if s["group"] == "removed" else 1
        fresh = sr.diff_pts(s, recipe, "fresh_mean_test_top1")
        buys, fresh_buys = effects[s["arm"]]["technique_buys_pts"], _scaled(fresh, sign)
        wide = sr.larger_spread(s, recipe, key="fresh_spread_pts")
        beyond = effects[s["arm"]]["beyond_spread"]
        # a row within the spread claims no sign (not checked); one beyond it keeps its sign
        # (pending while either figure is unknown)
        known = beyond is not None and buys is not None and fresh_buys is not None
        rows.append({"arm": s["arm"], "technique": s["label"], "kind": s["group"],
                     "buys_pts": buys, "beyond_spread": beyond, "fresh_buys_pts": fresh_buys,
                     "fresh_larger_spread_pts": wide,
                     "fresh_beyond_spread": None if fresh is None or wide is None
                     else abs(fresh) > wide,
                     "checked": beyond is not False,
                     "holds": buys * fresh_buys > 0 if known and beyond else None})
    arms = [sr.fresh_arm(s) for s in planned]
    checks = [a["holds"] for a in arms] + [r["holds"] for r in rows if r["checked"]]
    return ({"recipe": sr.fresh_arm(recipe), "arms": arms, "rows": rows,
             "seed_effects": seed_effects.seed_effects([recipe] + planned)} | sr.tally(checks))


def _scaled(x: Optional[float], sign: int) -> Optional[float]:
    return None if x is None else sign * x


def fresh_line(fresh: Dict[str, object]) -> Dict[str, object]:
    return sr.fresh_line("the technique rows on fresh seeds (no choice read them; the rule "
                         "fixed before their runs): each technique arm's fresh mean within the "
                         "larger of its two seed spreads of its mean, and each row beyond the "
                         "spread keeps its sign", fresh)


def fresh_tables(fresh: Dict[str, object]) -> str:
    r = fresh["recipe"]
    head = (f"The recipe on fresh seeds {sr.seeds_text(r['fresh_seeds'])}: "
            f"{sr.cell(r['fresh_mean'], r['fresh_spread_pts'])} (on its seeds: "
            f"{sr.cell(r['mean'], r['spread_pts'])}).")
    t2 = common.md_table(
        ["technique", "buys on the table's seeds (pts)", "beyond it", "buys on fresh seeds (pts)",
         "larger fresh spread (pts)", "beyond it (fresh)", "same sign (rows beyond it)"],
        [[x["technique"], sr.pts(x["buys_pts"]), _yes(x["beyond_spread"]),
          sr.pts(x["fresh_buys_pts"]), sr.spread(x["fresh_larger_spread_pts"]),
          _yes(x["fresh_beyond_spread"]), sr.holds(x["holds"]) if x["checked"] else "n/a"]
         for x in fresh["rows"]], "lrlrrll")
    return (head + "\n\n" + sr.fresh_arm_table(fresh["arms"]) + "\n\n" + t2
            + seed_effects.appended(fresh))


def _yes(x: Optional[bool]) -> str:
    return {True: "yes", False: "no", None: "n/a"}[x]


def best_on_validation(summaries: Sequence[Dict[str, object]]) -> Optional[Dict[str, object]]:
    """Which recipe setting the validation split prefers: the recipe, or any arm at its batch
    (each technique arm and each tuning arm is a candidate setting of the recipe), by the
    mean validation top-1 over seeds at each arm's chosen LR (complete arms only; None until
    the recipe and one other arm are complete). Ties keep the recipe.

    The arm with the highest mean is named; a setting is to be adopted only when its mean is
    above the recipe's by more than the larger of the two arms' validation spreads (the same
    rule as "beyond it" in the table: a difference inside the seeds' spread is not a result),
    and of those the one with the highest mean."""
    cands = [s for s in summaries if s["group"] in ("recipe", "removed", "added", "tuning")
             and s["complete"] and s.get("mean_val_top1") is not None]
    recipe = next((s for s in cands if s["group"] == "recipe"), None)
    if recipe is None or len(cands) < 2:
        return None

    def rank(s: Dict[str, object]) -> tuple:
        return (s["mean_val_top1"], s["group"] == "recipe")

    def spread(s: Dict[str, object]) -> Optional[float]:
        return sr.larger_spread(s, recipe, key="val_spread_pts")

    best = max(cands, key=rank)
    beyond = [s for s in cands if s is not recipe and spread(s) is not None
              and sr.diff_pts(s, recipe, "mean_val_top1") > spread(s)]
    adopt = max(beyond, key=rank) if beyond else None
    return {"arm": best["arm"], "label": best["label"],
            "mean_val_top1": best["mean_val_top1"],
            "recipe_mean_val_top1": recipe["mean_val_top1"],
            "arm_minus_recipe_val_pts": sr.diff_pts(best, recipe, "mean_val_top1"),
            "larger_val_spread_pts": None if best is recipe else spread(best),
            "adopt": None if adopt is None else adopt["arm"],
            "adopt_label": None if adopt is None else adopt["label"],
            "adopt_minus_recipe_val_pts": None if adopt is None
            else sr.diff_pts(adopt, recipe, "mean_val_top1"),
            "adopt_larger_val_spread_pts": None if adopt is None else spread(adopt),
            "arms_compared": len(cands) - 1}


def _validation_note(b: Optional[Dict[str, object]]) -> str:
    head = ("Recipe settings are compared on the validation split (mean validation top-1 over "
            "seeds at each arm's chosen LR; the test set only reports), the recipe against "
            "every complete technique and tuning arm; a setting is adopted when its mean is "
            "above the recipe's by more than the larger of the two arms' validation spreads: ")
    if b is None:
        return head + "n/a until the recipe and another arm have every seed."
    if b["arm_minus_recipe_val_pts"] <= 0:
        return head + (f"none of the {b['arms_compared']} arm(s) beats the recipe as shipped "
                       f"({sr.pct(b['recipe_mean_val_top1'])} %).")
    best = (f"of the {b['arms_compared']} arm(s), {b['label']} has the highest mean, "
            f"{sr.pct(b['mean_val_top1'])} % against the recipe's "
            f"{sr.pct(b['recipe_mean_val_top1'])} % "
            f"({sr.pts(b['arm_minus_recipe_val_pts'])} pts, ")
    spread = ("the larger validation spread of the two, "
              f"{sr.spread(b['larger_val_spread_pts'])} pts")
    if b["adopt"] is None:
        return head + best + (f"inside {spread}); no arm is above the recipe by more than "
                              "its spread: the recipe stays.")
    if b["adopt"] == b["arm"]:
        return head + best + f"beyond {spread}): the next setting to adopt."
    return head + best + (f"inside {spread}); {b['adopt_label']} is above the recipe by "
                          f"{sr.pts(b['adopt_minus_recipe_val_pts'])} pts, beyond its spread "
                          f"of {sr.spread(b['adopt_larger_val_spread_pts'])} pts: "
                          "the next setting to adopt.")


def plotted(effects: List[Dict[str, object]]) -> List[Dict[str, object]]:
    """The techniques the bar plot shows: a "buys" figure over every seed of both arms."""
    return [e for e in effects if e["technique_buys_pts"] is not None and e["complete"]]


def _plot(effects: List[Dict[str, object]], out_dir: str, quick: bool,
          fresh: Optional[Dict[str, object]] = None) -> Optional[str]:
    """Bars: the points each technique buys at 8K (mean over seeds), with the larger of the
    two arms' spreads as the error bar; only arms whose every seed (and the recipe's) has
    trained (the table shows the others' seeds so far). A hollow diamond: the figure on the
    fresh seeds (:func:`fresh_check`), where both arms have every fresh seed."""
    shown = plotted(effects)
    if not shown:
        return None
    import os
    p = sr.plt()
    fig, ax = p.subplots(figsize=(7.5, 0.5 * len(shown) + 1.6))
    ys = list(range(len(shown)))[::-1]
    vals = [e["technique_buys_pts"] for e in shown]
    err = [e["spread_pts"] or 0.0 for e in shown]
    colors = ["#4C72B0" if v >= 0 else "#C44E52" for v in vals]
    ax.barh(ys, vals, xerr=err, color=colors, alpha=0.85, capsize=3)
    ax.set_yticks(ys)
    ax.set_yticklabels([("- " if e["kind"] == "removed" else "") + e["technique"]
                        for e in shown], fontsize=7)
    ax.axvline(0, color="#333333", linewidth=0.8)
    on_fresh = {r["arm"]: r["fresh_buys_pts"] for r in (fresh or {}).get("rows", [])}
    marks = [(on_fresh.get(e["arm"]), y) for e, y in zip(shown, ys)]
    marks = [(x, y) for x, y in marks if x is not None]
    if marks:
        ax.plot([x for x, _ in marks], [y for _, y in marks], marker="D", markerfacecolor="none",
                color="#333333", linestyle="none", label="on fresh seeds (no choice read them)")
    ax.set_xlabel("test top-1 points the technique buys at 8K (mean over seeds; bar: spread)",
                  fontsize=8)
    return sr.finish(p, fig, ax, "What each technique buys (recipe with it - without it)",
                     quick, "lower right", os.path.join(out_dir, PLOT))


@outputs.together()
def report(study: Study, searches, out_dir: str, quick: bool, jobs: int, wall: float,
           partial: bool, progress: bool = False) -> dict:
    """The JSON, the table and (unless ``progress``: the rewrite after each run) the plots."""
    summaries = [s.summary() for s in searches]
    t = tables(summaries)
    records = [sr.relative_paths(r, out_dir) for r in study.records(searches)]
    comp = compute(records, searches)
    code = study.code(searches)
    rb = t["recipe_minus_baseline_8k"]
    acc = [sr.grids_line(summaries),
           common.acceptance("yasgd recipe at 8K within 1.0 point of the batch-256 baseline "
                             "(means over seeds, recipe - baseline)", rb, -1.0, unit=" pts")]
    fresh = fresh_check(summaries, t["effects"])
    if fresh["checks"]:
        acc.append(fresh_line(fresh))
    notes = [sr.method_note(study.scale),
             f"Scale: {study.scale.model} of width {study.scale.width} (strided stem) on "
             f"{study.scale.limit:,} training images, {study.scale.epochs} epochs every run, "
             f"linear warm-up over {study.scale.warmup_epochs:g} epochs then polynomial decay "
             f"(power {study.scale.power:g}) to 0, no augmentation but in the augmentation arm "
             f"(random crop from a 2-pixel zero padding and flip, the last "
             f"{study.scale.polish_epochs} epoch(s) without: the final polishing); batches "
             f"above 512 accumulated from micro-batches of 512.",
             "The technique buys: recipe - arm for a technique the recipe uses (points lost "
             "without it), arm - recipe for one it leaves out (points it would add); a "
             "difference counts as shown (\"beyond it\") only when it is larger than the "
             "larger of the two arms' spreads, once both have every seed.",
             _validation_note(t["best_on_validation"]),
             sr.compute_note(comp, jobs),
             sr.code_note(code)]
    if partial:
        done = sum(1 for s in summaries if s["complete"])
        notes.insert(0, f"PARTIAL: {done} of {len(summaries)} arms complete; at least "
                        f"{comp['runs_left_at_least']} run(s) to go.")
    plot = None if progress else _plot(t["effects"], out_dir, quick, fresh)
    table = t["table"] + ("\n\n" + FRESH_INTRO + "\n\n" + fresh_tables(fresh)
                          if fresh["checks"] else "")
    paths = common.write_results(
        out_dir, NAME, records, table + "\n\nEvery arm's LR search and seeds:\n\n"
        + sr.search_table(summaries), notes=notes,
        title="What each technique buys at 8K (yasgd bench ablation)",
        setup={"scale": dict(study.scale.__dict__), "arms": summaries, "compute": comp,
               "code": code, "wall_s": round(wall, 1), "jobs": jobs},
        quick=quick, hw=table_hardware(records, jobs), acceptance_lines=acc,
        plots=[plot] if plot else [],
        extra={"seeds": sr.seeds_of(summaries), "recipe_minus_baseline_8k": rb,
               "effects": t["effects"], "best_on_validation": t["best_on_validation"],
               "fresh": fresh,
               "partial": partial})
    if not progress:
        common.say(t["table"])
        common.say(common.acceptance_table(acc))
        common.say(sr.compute_note(comp, jobs))
        common.say(f"wrote {paths['json']}, {paths['md']}" + (f", {plot}" if plot else ""))
    return {"summaries": summaries, "acceptance": acc, "paths": paths, "compute": comp}


def plots(quick: bool) -> List[str]:
    """The plots a run writes under its ``--out`` (checked by ``output.check_paths``)."""
    return [PLOT]


def run(out_dir: str = "results", quick: bool = False, jobs: Optional[int] = None,
        arms: Sequence[str] = (), max_runs: Optional[int] = None,
        stop_after: Optional[float] = None, cache: Optional[str] = None) -> dict:
    scale = QUICK if quick else FULL
    chosen = select(ablation_arms(scale), arms)
    return run_bench(NAME,
                     f"bench ablation{' (--quick)' if quick else ''}: {len(chosen)} arms at "
                     f"batch {scale.big:,} (and the batch-256 baseline), {scale.epochs} epochs a "
                     f"run", chosen, scale, out_dir, quick, jobs, max_runs, stop_after, cache,
                     report)


def main(argv: Optional[List[str]] = None) -> int:
    return common.bench_main("python -m yasgd.bench.ablation", argv)


if __name__ == "__main__":
    sys.exit(main())
