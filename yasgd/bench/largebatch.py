"""``yasgd bench largebatch`` (``make bench-largebatch``): the LARS paper's table in
miniature (You, Gitman, Ginsburg 2017, Table 3/4), on Fashion-MNIST with a CIFAR-style
ResNet-8, every run with the same epoch budget and the same LR schedule shape (linear
warm-up, then polynomial decay to 0):

    batch 256      SGD with momentum (the baseline)
    batch 1K..16K  (a) SGD + linear scaling rule + warm-up (Goyal et al. 2017):
                       lr = base x batch / 256
                   (b) yasgd's full recipe (yasgd.bench.study_plan.RECIPE): LARS (eta 0.005,
                       eps 1e-9), warm-up, poly decay, label smoothing 0.1, WD following the
                       LR, BN momentum from the BN updates (micro-batches) per epoch;
                       lr = c x sqrt(batch / 4096)

Every arm, the baseline included, searches its LR the same way on a validation split
(yasgd.bench.study: a grid of at least 3 points, extended until its best is strictly
inside); the baseline and both optimizers at 8K and 16K then train 3 seeds at the chosen
LR, and the acceptance lines are judged on the means over seeds, with the spread shown.
Those five arms then train 3 fresh seeds at the same LR, which no choice reads: a check of
the table out of sample (:func:`fresh_check`), a line of its own.
Every run is a real training run of the real code (``yasgd.config.load(None, overrides)``
-> ``yasgd.train.build`` -> ``yasgd.train.fit``, yasgd.bench.study_worker), one process
per run, ``--jobs`` side by side; batches above 512 are accumulated from micro-batches of
512 (``train.accumulate``): one process reaches 16K exactly as 32 workers x 512 would.

Runs are cached (yasgd.bench.runcache, shared with ``bench ablation``), so an interrupted
bench continues where it stopped; ``--max-runs`` / ``--stop-after`` / ``--arms`` as in
yasgd.bench.ablation. Outputs in ``--out``: ``bench_largebatch.json``,
``bench_largebatch.md``, ``bench_largebatch_accuracy.png`` (mean test accuracy against
batch size) and ``bench_largebatch_epochs_8k.png`` (validation accuracy per epoch at 8K).
"""
from __future__ import annotations

import sys
from typing import Dict, List, Optional, Sequence

from yasgd import outputs
from yasgd.bench import common, seed_effects, study_report as sr
from yasgd.bench.largebatch_plots import accuracy_plot, epochs_plot, plot_accuracy, plot_epochs
from yasgd.bench.study import BASELINE_BATCH
from yasgd.bench.study_plan import FULL, QUICK, _batch_label, headline_arms, recipe_text, select
from yasgd.bench.study_run import Study, compute, run_bench, table_hardware

NAME = "largebatch"


def summary_rows(summaries: Sequence[Dict[str, object]]) -> List[Dict[str, object]]:
    """Per batch: the recipe's and SGD's chosen arm, means and spreads, and the differences
    (points) to the baseline and between them."""
    by = {(s["optimizer"], s["batch"]): s for s in summaries if s["arm"] != "baseline"}
    base = next((s for s in summaries if s["arm"] == "baseline"), None)
    bm = base and base["mean_test_top1"]
    out = []
    for b in sorted({s["batch"] for s in summaries if s["arm"] != "baseline"}):
        lars, sgd = by.get(("lars", b)), by.get(("sgd", b))
        lm, sm = (lars or {}).get("mean_test_top1"), (sgd or {}).get("mean_test_top1")
        out.append({"batch": b, "recipe_mean": lm, "recipe_spread_pts": (lars or {}).get("spread_pts"),
                    "recipe_lr": (lars or {}).get("best_lr"), "sgd_mean": sm,
                    "sgd_spread_pts": (sgd or {}).get("spread_pts"), "sgd_lr": (sgd or {}).get("best_lr"),
                    "seeds": min(len((x or {}).get("seeds") or []) for x in (lars, sgd)),
                    "recipe_minus_baseline_pts": None if lm is None or not bm else 100 * (lm - bm),
                    "recipe_minus_sgd_pts": None if lm is None or sm is None else 100 * (lm - sm),
                    "larger_spread_pts": sr.larger_spread(lars, sgd)})
    return out


def headline_table(summaries, rows, scale) -> str:
    base = next((s for s in summaries if s["arm"] == "baseline"), None)
    from yasgd.bench.study import geometry
    lines = [[str(BASELINE_BATCH), geometry(BASELINE_BATCH, scale.limit)[2] * scale.epochs,
              sr.cell(base and base["mean_test_top1"], base and base["spread_pts"],
                    base and base["best_lr"]), "", f"{len((base or {}).get('seeds') or [])}",
              "", ""]]
    for r in rows:
        lines.append([f"{r['batch']:,}", geometry(r["batch"], scale.limit)[2] * scale.epochs,
                      sr.cell(r["sgd_mean"], r["sgd_spread_pts"], r["sgd_lr"]),
                      sr.cell(r["recipe_mean"], r["recipe_spread_pts"], r["recipe_lr"]),
                      str(r["seeds"]), sr.pts(r["recipe_minus_baseline_pts"]),
                      sr.pts(r["recipe_minus_sgd_pts"])])
    return common.md_table(["batch", "steps", "SGD: test top-1 % (mean ± spread/2, LR)",
                            "yasgd recipe: test top-1 % (mean ± spread/2, LR)", "seeds",
                            "recipe - baseline (pts)", "recipe - SGD (pts)"], lines, "rrrrrrr")


FRESH_INTRO = ("The compared arms on fresh seeds, at the LR each chose (test top-1): no choice "
               "read these runs, while seed 0's run also chose the LR, so they check the "
               "table's figures out of sample:")


def fresh_check(summaries: Sequence[Dict[str, object]], scale) -> Dict[str, object]:
    """The headline on the compared arms' fresh seeds (seeds no choice read), by the rule
    fixed before their runs: each arm's fresh mean lies within the larger of its two
    spreads (its seeds', its fresh seeds') of its mean, and each comparison keeps its sign.
    Pending (None) while any fresh run is still to train."""
    by = {s["arm"]: s for s in summaries if s.get("fresh_seeds_planned")}
    arms = [sr.fresh_arm(s) for s in by.values()]
    at = {(s["optimizer"], s["batch"]): s for s in by.values() if s["arm"] != "baseline"}
    pairs = [(scale.big, "baseline", at.get(("lars", scale.big)), by.get("baseline"))]
    pairs += [(b, "SGD", at.get(("lars", b)), at.get(("sgd", b))) for b in (scale.big, scale.huge)]
    comps = []
    for batch, against, a, b in pairs:
        if a is None or b is None:
            continue
        rec, fresh = sr.diff_pts(a, b), sr.diff_pts(a, b, "fresh_mean_test_top1")
        comps.append({"comparison": f"recipe - {against} at {_batch_label(batch)}",
                      "batch": batch, "against": against.lower(), "pts": rec, "fresh_pts": fresh,
                      "fresh_larger_spread_pts": sr.larger_spread(a, b, key="fresh_spread_pts"),
                      "holds": None if rec is None or fresh is None else rec * fresh > 0})
    checks = [x["holds"] for x in arms + comps]
    return ({"arms": arms, "comparisons": comps,
             "seed_effects": seed_effects.seed_effects(list(by.values()))} | sr.tally(checks))


def fresh_line(fresh: Dict[str, object]) -> Dict[str, object]:
    return sr.fresh_line("the headline on fresh seeds (no choice read them; the rule fixed "
                         "before their runs): each compared arm's fresh mean within the larger "
                         "of its two seed spreads of its mean, and each comparison's sign "
                         "unchanged", fresh)


def fresh_tables(fresh: Dict[str, object]) -> str:
    t2 = common.md_table(["comparison", "seeds of the table (pts)", "fresh seeds (pts)",
                          "same sign"],
                         [[c["comparison"], sr.pts(c["pts"]), sr.pts(c["fresh_pts"]),
                           sr.holds(c["holds"])] for c in fresh["comparisons"]], "lrrl")
    return sr.fresh_arm_table(fresh["arms"]) + "\n\n" + t2 + seed_effects.appended(fresh)


def acceptance(summaries, rows, scale, fresh: Optional[Dict[str, object]] = None
               ) -> List[Dict[str, object]]:
    """The bench's acceptance lines; ``fresh``: :func:`fresh_check` of ``summaries`` where
    the caller has it already."""
    at = {r["batch"]: r for r in rows}
    big = at.get(scale.big, {})
    acc = [sr.grids_line(summaries),
           common.acceptance(f"yasgd recipe at {_batch_label(scale.big)} within 1.0 point of "
                             f"the batch-256 baseline (means over seeds, recipe - baseline)",
                             big.get("recipe_minus_baseline_pts"), -1.0, unit=" pts")]
    for b in (scale.big, scale.huge):
        r = at.get(b, {})
        acc.append(common.acceptance(f"yasgd recipe above the best SGD arm at {_batch_label(b)} "
                                     f"by more than the larger of their seeds' spreads (recipe - "
                                     f"SGD means)", r.get("recipe_minus_sgd_pts"),
                                     r.get("larger_spread_pts"), unit=" pts", strict=True))
    base = next((s for s in summaries if s["arm"] == "baseline"), None)
    bm = base and base["mean_test_top1"]
    sgd_huge = at.get(scale.huge, {}).get("sgd_mean")
    acc.append(common.acceptance("scale check: baseline mean top-1 at least 91.0 %",
                                 None if not bm else 100 * bm, 91.0, unit=" %"))
    acc.append(common.acceptance(f"scale check: best SGD arm at {_batch_label(scale.huge)} at "
                                 f"least 3 points below the baseline (baseline - SGD)",
                                 None if not bm or sgd_huge is None else 100 * (bm - sgd_huge),
                                 3.0, unit=" pts"))
    fresh = fresh_check(summaries, scale) if fresh is None else fresh
    if fresh["checks"]:                     # one check an arm that plans fresh seeds, at least
        acc.append(fresh_line(fresh))
    return acc


@outputs.together()
def report(study: Study, searches, out_dir: str, quick: bool, jobs: int, wall: float,
           partial: bool, progress: bool = False) -> dict:
    """The JSON, the table and (unless ``progress``: the rewrite after each run) the plots."""
    scale = study.scale
    summaries = [s.summary() for s in searches]
    rows = summary_rows(summaries)
    records = [sr.relative_paths(r, out_dir) for r in study.records(searches)]
    comp = compute(records, searches)
    code = study.code(searches)
    fresh = fresh_check(summaries, scale)
    acc = acceptance(summaries, rows, scale, fresh)
    t1 = headline_table(summaries, rows, scale)
    table = (t1 + "\n\nEvery arm's LR search (validation top-1, seed 0) and seeds (test "
             "top-1):\n\n" + sr.search_table(summaries))
    if fresh["checks"]:
        table += "\n\n" + FRESH_INTRO + "\n\n" + fresh_tables(fresh)
    notes = [sr.method_note(scale),
             f"Scale: {scale.model} of width {scale.width} (strided stem) on {scale.limit:,} "
             f"training images (every batch size sees every one each epoch), no data "
             f"augmentation (the same pixels for every arm), {scale.epochs} epochs every run, "
             f"linear warm-up from 0 over {scale.warmup_epochs:g} epochs then polynomial decay "
             f"(power {scale.power:g}) to 0; batches above 512 accumulated from micro-batches "
             f"of 512 (BN statistics per 512 images).",
             "Baseline and SGD arms: SGD with momentum 0.9, WD 5e-4 (constant, not on BN/bias), "
             "no label smoothing, BN momentum 0.9, BN gammas initialised to 1; lr = base x "
             f"batch/256. yasgd recipe: {recipe_text()}; lr = c x sqrt(batch/4096). Cells: "
             "mean over seeds ± half the spread (max - min).",
             sr.compute_note(comp, jobs),
             sr.code_note(code)]
    if partial:
        done = sum(1 for s in summaries if s["complete"])
        notes.insert(0, f"PARTIAL: {done} of {len(summaries)} arms complete; at least "
                        f"{comp['runs_left_at_least']} run(s) to go.")
    plots: List[str] = []
    if not progress:
        plots = [p for p in (plot_accuracy(summaries, rows, out_dir, quick, NAME),
                             plot_epochs(study, searches, scale.big, out_dir, quick, NAME)) if p]
    paths = common.write_results(
        out_dir, NAME, records, table, notes=notes,
        title="Large-batch training in miniature: SGD vs yasgd's recipe (yasgd bench largebatch)",
        setup={"scale": dict(scale.__dict__), "arms": summaries, "summary": rows,
               "compute": comp, "code": code, "wall_s": round(wall, 1),
               "jobs": jobs},
        quick=quick, hw=table_hardware(records, jobs), acceptance_lines=acc, plots=plots,
        extra={"seeds": sr.seeds_of(summaries), "fresh": fresh, "partial": partial})
    if not progress:
        common.say(t1)
        common.say(common.acceptance_table(acc))
        common.say(sr.compute_note(comp, jobs))
        common.say(f"wrote {paths['json']}, {paths['md']}" + "".join(f", {p}" for p in plots))
    return {"summaries": summaries, "summary": rows, "acceptance": acc, "paths": paths,
            "compute": comp}


def plots(quick: bool) -> List[str]:
    """The plots a run writes under its ``--out`` (checked by ``output.check_paths``)."""
    return [accuracy_plot(NAME), epochs_plot(NAME, (QUICK if quick else FULL).big)]


def run(out_dir: str = "results", quick: bool = False, jobs: Optional[int] = None,
        arms: Sequence[str] = (), max_runs: Optional[int] = None,
        stop_after: Optional[float] = None, cache: Optional[str] = None) -> dict:
    scale = QUICK if quick else FULL
    chosen = select(headline_arms(scale), arms)
    return run_bench(NAME,
                     f"bench largebatch{' (--quick)' if quick else ''}: {len(chosen)} arms, "
                     f"{scale.epochs} epochs a run", chosen, scale, out_dir, quick, jobs,
                     max_runs, stop_after, cache, report)


def main(argv: Optional[List[str]] = None) -> int:
    return common.bench_main("python -m yasgd.bench.largebatch", argv)


if __name__ == "__main__":
    sys.exit(main())
