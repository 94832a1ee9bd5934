"""The large-batch headline and the ablation's technique rows on fresh seeds
(yasgd.bench.study step 4, ``fresh_check`` of yasgd.bench.largebatch and
yasgd.bench.ablation): seeds that no choice reads, trained after an arm's seeds at the LR its
search chose, and the rules that judge the tables on them, checked against figures worked out
by hand.
"""
import math

import pytest

from yasgd.bench import ablation as ab, common, largebatch as lb, study, study_plan as plan


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


def _arm(name="a", opt="sgd", batch=8192, seeds=3, fresh=3, group="x"):
    return study.Arm(name, name, batch, opt, (1.0, 2.0, 4.0), (), seeds, group, fresh)


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
    summ = s.summary()
    # the arm's own figures are final (its grid and seeds), the search is not done
    assert s.needed == [(2.0, 4)] and not s.done and summ["complete"]
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
    # the five arms read together, seed by seed (yasgd.bench.seed_effects): seed 0's mean
    # over them is (91.8 + 90.6 + 88.0 + 89.0 + 87.0) / 5
    se = f["seed_effects"]
    assert se["arms"] == list(HAND) and se["mean_by_seed"][0] == pytest.approx(89.28)
    assert "| 0 | the table's; its validation run chose each LR | 89.28 |" in text
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
    assert all(s["complete"] for s in sums)     # the table's figures do not wait for it
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
        # the ablation: the recipe and the technique arms, never the baseline or a tuning arm
        abl = plan.ablation_arms(scale)
        assert {a.name for a in abl if a.fresh_seeds} == {
            a.name for a in abl if a.group in ("recipe", "removed", "added")}
        assert {a.fresh_seeds for a in abl if a.fresh_seeds} == {scale.fresh_seeds}
        assert sum(1 for a in abl if a.group in ("removed", "added")) == (
            8 if scale is plan.FULL else 1)
        # the recipe's fresh seeds are the headline's runs: the same arm, name and settings
        head = {a.name: a for a in plan.headline_arms(scale)}
        rec = next(a for a in abl if a.group == "recipe")
        assert (rec.overrides, rec.factors, rec.batch, rec.seeds, rec.fresh_seeds) == (
            head[rec.name].overrides, head[rec.name].factors, head[rec.name].batch,
            head[rec.name].seeds, head[rec.name].fresh_seeds)
    assert plan.FULL.fresh_seeds == plan.FULL.seeds == 3
    # the acceptance names the check only where the arms plan fresh seeds
    sums = _headline(HAND)
    assert lb.acceptance(sums, lb.summary_rows(sums), plan.FULL)[-1]["criterion"].startswith(
        "the headline on fresh seeds")
    for s in sums:
        s.pop("fresh_seeds_planned")
    assert not any("fresh" in a["criterion"]
                   for a in lb.acceptance(sums, lb.summary_rows(sums), plan.FULL))


# the ablation's hand-made arms: (group, seeds 0-2, fresh seeds 3-5), test top-1
ABL = {
    # mean, spread; fresh mean, spread
    "lars-8k": ("recipe", [.905, .907, .909], [.898, .902, .906]),      # 90.7, 0.4; 90.2, 0.8
    # arm - recipe -1.1: buys +1.1, beyond 0.4; fresh 89.5 (shift -0.1 within 0.2), buys +0.7
    "no-ls": ("removed", [.895, .896, .897], [.894, .895, .896]),
    # buys +0.2, within 0.4 (no sign to check); fresh 91.1: shift +0.6 beyond 0.2, buys -0.9
    "no-warmup": ("removed", [.904, .905, .906], [.910, .911, .912]),
    # added: arm - recipe -2.6, beyond 0.4; fresh 90.6: shift +2.5 beyond 0.2, buys +0.4
    "aug": ("added", [.880, .881, .882], [.905, .906, .907]),
    # +0.6, beyond 0.4 but within the recipe's fresh spread (0.8); no fresh seeds
    "tuned": ("tuning", [.912, .913, .914], []),
}


def _ablation(spec):
    return [_search(_arm(n, "lars", 8192, 3, 3 if fresh or g != "tuning" else 0, g),
                    tests + fresh)[0].summary() for n, (g, tests, fresh) in spec.items()]


def test_the_ablation_fresh_check_applies_the_rule_fixed_before_the_runs():
    f = ab.fresh_check(_ablation(ABL))
    assert f["recipe"]["arm"] == "lars-8k" and f["recipe"]["fresh_mean"] == pytest.approx(.902)
    arms = {a["arm"]: a for a in f["arms"]}
    assert list(arms) == ["no-ls", "no-warmup", "aug"]          # the technique arms only
    for name, (shift, holds) in {"no-ls": (-0.1, True), "no-warmup": (0.6, False),
                                 "aug": (2.5, False)}.items():
        assert arms[name]["shift_pts"] == pytest.approx(shift), name
        assert arms[name]["allowed_pts"] == pytest.approx(0.2), name
        assert arms[name]["holds"] is holds, name
    rows = {r["arm"]: r for r in f["rows"]}
    want = {  # buys, beyond, fresh buys, fresh beyond (larger fresh spread 0.8), sign check
        "no-ls": (1.1, True, 0.7, False, True),
        "no-warmup": (0.2, False, -0.9, True, None),
        "aug": (-2.6, True, 0.4, False, False)}
    for name, (buys, beyond, fresh, fresh_beyond, holds) in want.items():
        r = rows[name]
        assert (r["buys_pts"], r["fresh_buys_pts"]) == (pytest.approx(buys),
                                                         pytest.approx(fresh)), name
        assert r["fresh_larger_spread_pts"] == pytest.approx(0.8), name
        assert (r["beyond_spread"], r["fresh_beyond_spread"], r["holds"]) == (
            beyond, fresh_beyond, holds), name
        assert r["checked"] is beyond, name
    # three arms, and the sign of the two rows beyond the spread: no-ls holds, aug flips
    assert (f["passed"], f["checks"], f["pending"]) == (2, 5, False)
    assert "| 2 of 5 checks | **not met** |" in common.acceptance_table([ab.fresh_line(f)])
    text = ab.fresh_tables(f)
    assert text.startswith("The recipe on fresh seeds 3, 4, 5: 90.20 ± 0.40 (on its seeds: "
                           "90.70 ± 0.20).")
    assert "| no-warmup | +0.20 | no | -0.90 | 0.80 | yes | n/a |" in text
    assert "| aug | -2.60 | yes | +0.40 | 0.80 | no | **no** |" in text
    # the recipe and the technique arms read together, seed by seed; never a tuning arm
    assert f["seed_effects"]["arms"] == ["lars-8k", "no-ls", "no-warmup", "aug"]
    assert "mean of the 4 arms (test top-1 %)" in text
    assert "| no-ls | 2.8284 | 0, 1, 2 | 89.60 ± 0.10 | 3, 4, 5 | 89.40, 89.50, 89.60 | " \
           "89.50 ± 0.10 | -0.10 | 0.20 | yes |" in text
    # the page's reading, from the record as the JSON holds it
    from yasgd.bench import report_study
    d = {"fresh": f, "effects": ab.tables(_ablation(ABL))["effects"]}
    assert report_study._ablation_fresh_reading(d) == ["", (
        "On fresh seeds (3, 4, 5: no choice read them), 2 of the 5 checks hold. Beyond its "
        "seeds' spread, the mean of no-warmup (+0.60 against a larger spread of 0.20); aug "
        "(+2.50 against a larger spread of 0.20). Sign changed: aug (-2.60, fresh +0.40). On "
        "the fresh seeds, what each technique buys beside the larger spread of its two arms' "
        "fresh seeds: no-ls +0.70 (0.80); no-warmup -0.90 (0.80); aug +0.40 (0.80). Judged "
        "beyond the spread in the table, on the fresh seeds: no-ls (+1.10, fresh +0.70); aug "
        "(-2.60, fresh +0.40). Beyond the larger spread of its two arms' fresh seeds: 1 of the "
        "3 rows (no-warmup). The fresh mean is below the mean on the table's seeds in 1 of the "
        "3 technique arms, and the recipe's is -0.50 points from its own."), "", (
        "The recipe's spread on its fresh seeds (3, 4, 5; the large-batch table's runs) is "
        "0.80 points, against 0.40 on its seeds. Judged beyond the spread in the table, with "
        "no fresh seeds of their own, but within the recipe's spread on its fresh seeds: "
        "tuned (+0.60).")]


def test_the_ablation_fresh_check_waits_for_every_fresh_run():
    spec = dict(ABL, **{"lars-8k": ("recipe", ABL["lars-8k"][1], ABL["lars-8k"][2][:2])})
    f = ab.fresh_check(_ablation(spec))
    # the recipe's last fresh run missing: no fresh figure of any row, every sign check open
    assert f["pending"] and (f["passed"], f["checks"]) == (1, 5)
    assert all(r["fresh_buys_pts"] is None for r in f["rows"])
    assert ab.fresh_line(f)["met"] is None
    # no arm planning fresh seeds: no check and no line
    none = [dict(s, fresh_seeds_planned=0) for s in _ablation(ABL)]
    assert ab.fresh_check(none)["checks"] == 0
