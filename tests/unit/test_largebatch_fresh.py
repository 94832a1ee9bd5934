"""The large-batch headline on fresh seeds (yasgd.bench.study step 4, yasgd.bench.largebatch
``fresh_check``): seeds that no choice reads, trained after an arm's seeds at the LR its
search chose, and the rule that judges the headline on them, checked against figures worked
out by hand.
"""
import math

import pytest

from yasgd.bench import common, largebatch as lb, study, study_plan as plan


def _search(arm, tests):
    """Drive ``arm``'s search as far as ``tests`` goes: validation peaks at factor 2 (the
    chosen LR), the run of seed k at the chosen LR scores ``tests[k]`` on the test set, and
    a seed past ``tests`` is never trained. Returns the search and the (factor, seed) runs
    in the order it asked for them."""
    have, asked = set(), []

    def lookup(a, f, seed):
        if (f, seed) not in have:
            return None
        return {"val_top1": 0.9 - 0.01 * math.log2(f / 2.0) ** 2,
                "test_top1": tests[seed] if f == 2.0 else 0.5}
    for _ in range(50):
        s = study.search(arm, lookup)
        todo = [k for k in s.needed if k[0] != 2.0 or k[1] < len(tests)]
        if not todo:
            return s, asked
        have.update(todo)
        asked += todo
    raise AssertionError("the search did not finish")


def _arm(name="a", opt="sgd", batch=8192, seeds=3, fresh=3):
    return study.Arm(name, name, batch, opt, (1.0, 2.0, 4.0), (), seeds, "x", fresh)


def test_fresh_seeds_follow_the_seeds_at_the_chosen_lr_and_leave_the_figures_alone():
    tests = [0.90, 0.91, 0.92, 0.80, 0.83, 0.86]
    s, asked = _search(_arm(), tests)
    plain, plain_asked = _search(_arm(fresh=0), tests)
    assert s.best == plain.best == 2.0
    # the grid first, then the seeds, then the fresh seeds: 3, 4, 5 at the chosen LR
    assert asked == plain_asked + [(2.0, 3), (2.0, 4), (2.0, 5)]
    summ, base = s.summary(), plain.summary()
    assert {k: summ[k] for k in base if k != "complete"} == {
        k: v for k, v in base.items() if k != "complete"}
    assert summ["seeds"] == [0, 1, 2] and summ["mean_test_top1"] == pytest.approx(0.91)
    assert summ["fresh_seeds"] == [3, 4, 5] and summ["fresh_seeds_planned"] == 3
    assert summ["fresh_mean_test_top1"] == pytest.approx(0.83)
    assert summ["fresh_spread_pts"] == pytest.approx(6.0)
    assert "fresh_seeds" not in base        # an arm without fresh seeds: no fresh keys


def test_a_search_is_not_done_until_its_fresh_seeds_are_trained():
    arm = _arm(fresh=2)
    assert study.runs_left([study.search(arm, lambda a, f, s: None)]) == 3 + 2 + 2
    have = {(f, 0) for f in (1.0, 2.0, 4.0)} | {(2.0, 1), (2.0, 2), (2.0, 3)}

    def lookup(a, f, seed):
        return {"val_top1": 0.9 - abs(f - 2.0) / 100, "test_top1": 0.9} if (f, seed) in have \
            else None
    s = study.search(arm, lookup)
    assert s.needed == [(2.0, 4)] and not s.summary()["complete"]
    summ = s.summary()
    # one of two fresh seeds trained: listed, but no mean or spread until both are
    assert summ["fresh_seeds"] == [3] and summ["fresh_test_top1_by_seed"] == [0.9]
    assert summ["fresh_mean_test_top1"] is None and summ["fresh_spread_pts"] is None


def _headline(fresh_of):
    """The five compared arms (3 seeds, 3 fresh seeds each) with the test top-1 of seeds 0-2
    and of the fresh seeds trained so far given by hand."""
    spec = {"baseline": ("sgd", 256), "lars-8k": ("lars", 8192), "sgd-8k": ("sgd", 8192),
            "lars-16k": ("lars", 16384), "sgd-16k": ("sgd", 16384)}
    out = []
    for name, (opt, batch) in spec.items():
        tests, fresh = fresh_of[name]
        out.append(_search(_arm(name, opt, batch, 3, 3), tests + fresh)[0].summary())
    return out


HAND = {
    # seeds 0-2                fresh seeds 3-5         mean, spread; fresh mean, spread
    "baseline": ([.918, .919, .920], [.917, .918, .919]),  # 91.9, 0.2; 91.8, 0.2: -0.1 within
    "lars-8k": ([.906, .907, .908], [.910, .912, .914]),   # 90.7, 0.2; 91.2, 0.4: +0.5 beyond
    "sgd-8k": ([.880, .890, .900], [.895, .905, .915]),    # 89.0, 2.0; 90.5, 2.0: +1.5 within
    "lars-16k": ([.890, .890, .890], [.880, .880, .880]),  # 89.0, 0;   88.0, 0:   -1.0 beyond
    "sgd-16k": ([.870, .870, .870], [.885, .885, .885]),   # 87.0, 0;   88.5, 0:   +1.5 beyond
}


def test_fresh_check_applies_the_rule_fixed_before_the_runs():
    f = lb.fresh_check(_headline(HAND), plan.FULL)
    arms = {a["arm"]: a for a in f["arms"]}
    want = {"baseline": (-0.1, 0.2, True), "lars-8k": (0.5, 0.4, False),
            "sgd-8k": (1.5, 2.0, True), "lars-16k": (-1.0, 0.0, False),
            "sgd-16k": (1.5, 0.0, False)}
    for name, (shift, allowed, holds) in want.items():
        a = arms[name]
        assert a["shift_pts"] == pytest.approx(shift, abs=1e-9), name
        assert a["allowed_pts"] == pytest.approx(allowed, abs=1e-9), name
        assert a["holds"] is holds, name
        assert a["seeds"] == [0, 1, 2] and a["fresh_seeds"] == [3, 4, 5]
    comps = {c["comparison"]: c for c in f["comparisons"]}
    # recipe - baseline at 8K: 90.7 - 91.9 = -1.2; fresh 91.2 - 91.8 = -0.6: same sign
    # recipe - SGD at 8K: +1.7; fresh +0.7: same sign; at 16K: +2.0; fresh -0.5: flipped
    for name, (rec, fresh, holds) in {"recipe - baseline at 8K": (-1.2, -0.6, True),
                                      "recipe - SGD at 8K": (1.7, 0.7, True),
                                      "recipe - SGD at 16K": (2.0, -0.5, False)}.items():
        c = comps[name]
        assert (c["pts"], c["fresh_pts"]) == (pytest.approx(rec), pytest.approx(fresh)), name
        assert c["holds"] is holds, name
    assert [(c["batch"], c["against"]) for c in f["comparisons"]] == [
        (8192, "baseline"), (8192, "sgd"), (16384, "sgd")]
    # the larger of the two arms' fresh spreads: 0.4 (recipe 8K), 2.0 (SGD 8K), 0 at 16K
    assert [c["fresh_larger_spread_pts"] for c in f["comparisons"]] == [
        pytest.approx(0.4), pytest.approx(2.0), pytest.approx(0.0, abs=1e-9)]
    assert (f["passed"], f["checks"], f["pending"]) == (4, 8, False)
    line = lb.fresh_line(f)
    assert line["met"] is False
    assert "| 4 of 8 checks | **not met** |" in common.acceptance_table([line])
    text = lb.fresh_tables(f)
    assert "| 91.90 ± 0.10 | 3, 4, 5 | 91.70, 91.80, 91.90 | 91.80 ± 0.10 | -0.10 | 0.20 | yes |" \
        in text
    assert "| recipe - SGD at 16K | +2.00 | -0.50 | **no** |" in text
    from yasgd.bench import report_study
    said = " ".join(report_study._fresh_reading(f))
    assert said == (
        "On fresh seeds (3, 4, 5: no choice read them), 4 of the 8 checks hold. Beyond its "
        "seeds' spread, the mean of lars-8k (+0.50 against a larger spread of 0.40); lars-16k "
        "(-1.00 against a larger spread of 0.00); sgd-16k (+1.50 against a larger spread of "
        "0.00). Sign changed: recipe - SGD at 16K (+2.00, fresh -0.50). On the fresh seeds, "
        "each difference beside the larger spread of its two arms' fresh seeds: recipe - "
        "baseline at 8K -0.60 (0.40); recipe - SGD at 8K +0.70 (2.00); recipe - SGD at 16K "
        "-0.50 (0.00).")


def test_every_check_holding_meets_the_line_and_a_missing_run_leaves_it_open():
    same = {k: (v[0], v[0]) for k, v in HAND.items()}      # the fresh seeds repeat seeds 0-2
    f = lb.fresh_check(_headline(same), plan.FULL)
    assert (f["passed"], f["checks"]) == (8, 8) and lb.fresh_line(f)["met"] is True
    # the last fresh run of one arm not trained yet: that arm has no fresh mean, so
    # neither its check nor the comparison it enters is judged, and the line stays open
    same["sgd-16k"] = (HAND["sgd-16k"][0], HAND["sgd-16k"][0][:2])
    sums = _headline(same)
    assert [s["complete"] for s in sums] == [True] * 4 + [False]
    f = lb.fresh_check(sums, plan.FULL)
    assert f["pending"] and (f["passed"], f["checks"]) == (6, 8)
    assert lb.fresh_line(f)["met"] is None
    assert "| recipe - SGD at 16K | +2.00 | n/a | pending |" in lb.fresh_tables(f)


def test_the_headline_plans_fresh_seeds_for_its_compared_arms_only():
    for scale in (plan.FULL, plan.QUICK):
        fresh = {a.name: a.fresh_seeds for a in plan.headline_arms(scale)}
        compared = {"baseline"} | {f"{o}-{plan._batch_label(b).lower()}"
                                   for o in ("lars", "sgd") for b in (scale.big, scale.huge)}
        assert {n for n, k in fresh.items() if k} == compared
        assert set(fresh[n] for n in compared) == {scale.fresh_seeds} and scale.fresh_seeds
        # the ablation compares on its own seeds: none of its arms trains fresh seeds
        assert all(a.fresh_seeds == 0 for a in plan.ablation_arms(scale))
    assert plan.FULL.fresh_seeds == plan.FULL.seeds == 3
    # the acceptance names the check only where the arms plan fresh seeds
    sums = _headline(HAND)
    assert lb.acceptance(sums, lb.summary_rows(sums), plan.FULL)[-1]["criterion"].startswith(
        "the headline on fresh seeds")
    for s in sums:
        s.pop("fresh_seeds_planned")
    assert not any("fresh" in a["criterion"]
                   for a in lb.acceptance(sums, lb.summary_rows(sums), plan.FULL))


def test_the_ablation_page_gives_the_recipes_spread_on_the_fresh_seeds():
    """The ablation's recipe arm is the headline's recipe at 8K: the page names its spread on
    the fresh seeds and the differences judged beyond the spread that lie within it."""
    from yasgd.bench import report_study
    ab = {"setup": {"arms": [{"arm": "baseline", "group": "baseline"},
                             {"arm": "lars-8k", "group": "recipe", "mean_test_top1": 0.9068,
                              "spread_pts": 0.07}]},
          "effects": [{"technique": "no label smoothing", "arm_minus_recipe_pts": -0.73,
                       "beyond_spread": True},
                      {"technique": "momentum 0.96", "arm_minus_recipe_pts": -2.63,
                       "beyond_spread": True},
                      {"technique": "no warm-up", "arm_minus_recipe_pts": -0.38,
                       "beyond_spread": False}]}
    lbd = {"fresh": {"arms": [{"arm": "lars-8k", "label": "yasgd recipe at 8K",
                               "mean": 0.9068, "fresh_seeds": [3, 4, 5],
                               "fresh_spread_pts": 1.5}]}}
    assert report_study._recipe_fresh(ab, lbd) == ["", (
        "The recipe's arm is the large-batch table's yasgd recipe at 8K (the same runs). On "
        "that table's fresh seeds (3, 4, 5) its spread is 1.50 points, against 0.07 here. "
        "Judged beyond the spread here, but within the recipe's spread on those seeds: no "
        "label smoothing (-0.73).")]
    # other runs (a different mean), no fresh record, or fresh seeds still to run: no line
    other = {"fresh": {"arms": [dict(lbd["fresh"]["arms"][0], mean=0.9)]}}
    pending = {"fresh": {"arms": [dict(lbd["fresh"]["arms"][0], fresh_spread_pts=None)]}}
    for lb_json in (other, {}, pending):
        assert report_study._recipe_fresh(ab, lb_json) == []
