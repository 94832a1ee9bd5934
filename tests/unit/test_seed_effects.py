"""The seed effects shared across arms (yasgd.bench.seed_effects), against closed forms and
an exact enumeration of the permutations written here in plain Python.
"""
import itertools

import numpy as np
import pytest

from yasgd.bench import seed_effects as se


def _summaries(table, k=3, names=None):
    """Arm summaries (the keys ``seed_effects`` reads) from rows of test top-1 in points,
    the first ``k`` of each row the table's seeds, the rest its fresh seeds."""
    out = []
    for i, row in enumerate(table):
        out.append({"arm": (names or [f"a{j}" for j in range(len(table))])[i],
                    "label": f"arm {i}", "seeds": list(range(k)),
                    "fresh_seeds": list(range(k, len(row))),
                    "fresh_seeds_planned": len(row) - k,
                    "test_top1_by_seed": [x / 100 for x in row[:k]],
                    "fresh_test_top1_by_seed": [x / 100 for x in row[k:]],
                    "mean_test_top1": sum(row[:k]) / k / 100,
                    "fresh_mean_test_top1": sum(row[k:]) / (len(row) - k) / 100})
    return out


def _stat(rows):
    """sum over seeds of (mean over arms at the seed - grand mean)^2, by loops."""
    n, m = len(rows), len(rows[0])
    grand = sum(sum(r) for r in rows) / (n * m)
    return sum((sum(r[j] for r in rows) / n - grand) ** 2 for j in range(m))


def test_an_additive_table_gives_back_its_seed_effects_in_closed_form():
    arm = [90.0, 88.0, 91.5, 89.0]
    seed = [0.6, 0.2, 0.4, -0.3, -0.5, -0.4]            # the table's 0-2, fresh 3-5
    r = se.seed_effects(_summaries([[a + s for s in seed] for a in arm]))
    mean = sum(seed) / 6
    assert r["effect_pts"] == pytest.approx([s - mean for s in seed], abs=1e-9)
    assert r["mean_by_seed"] == pytest.approx([sum(arm) / 4 + s for s in seed], abs=1e-9)
    assert r["statistic"] == pytest.approx(sum((s - mean) ** 2 for s in seed), abs=1e-9)
    # every arm moves by the same shift: all of the mean squared shift is common
    assert r["common_shift_pts"] == pytest.approx((-0.3 - 0.5 - 0.4) / 3 - 0.4, abs=1e-9)
    assert r["shift_share"] == pytest.approx(1.0, abs=1e-9)
    assert r["choice_seed_lead_pts"] == pytest.approx(0.6 - 0.3, abs=1e-9)
    # four arms aligned on the same pattern: a permutation reaches it with odds
    # (1/6!)^3 at most per draw; none of 10,000 does
    assert r["reached"] == 0 and r["p"] == pytest.approx(1 / 10_001) and r["shared"]
    assert (r["seeds"], r["fresh_seeds"], r["choice_seed"]) == ([0, 1, 2], [3, 4, 5], 0)


def test_a_latin_square_has_no_seed_effect_and_p_one():
    base = [89.0, 90.0, 91.0, 88.5, 90.5, 89.5]
    rows = [base[i:] + base[:i] for i in range(6)]       # every seed sees every value once
    r = se.seed_effects(_summaries(rows))
    assert r["effect_pts"] == pytest.approx([0.0] * 6, abs=1e-9)
    assert r["statistic"] == pytest.approx(0.0, abs=1e-9)
    assert r["p"] == 1.0 and r["reached"] == 10_000 and not r["shared"]


def test_the_permutation_p_value_matches_an_exact_enumeration():
    rng = np.random.default_rng(7)
    for _ in range(3):
        rows = [list(x) for x in np.round(rng.normal(90, 1, size=(2, 3)), 2)]
        t = _stat(rows)
        # every pair of orderings of the two arms' three seeds: 36, equally likely
        hits = [_stat([list(p), list(q)]) >= t - 1e-9
                for p in itertools.permutations(rows[0])
                for q in itertools.permutations(rows[1])]
        exact = sum(hits) / len(hits)
        got = se.permutation_p(np.array(rows))
        assert got["statistic"] == pytest.approx(t, abs=1e-9)
        # 10,000 draws: the estimate's standard error is at most 0.005; allow 4 of them,
        # and the +1s of the estimator (1e-4)
        assert got["p"] == pytest.approx(exact, abs=0.02 + 1e-4)


def test_the_same_table_gives_the_same_p_every_time():
    rows = [[90.1, 89.7, 90.4, 89.9], [88.2, 88.9, 88.1, 88.8], [91.0, 90.2, 90.9, 90.5]]
    a, b = se.seed_effects(_summaries(rows, k=2)), se.seed_effects(_summaries(rows, k=2))
    assert a == b and 0 < a["p"] <= 1


def test_no_reading_without_two_complete_arms_on_the_same_seeds():
    rows = [[90.0, 90.5, 90.2, 89.8], [88.0, 88.4, 88.1, 87.9]]
    assert se.seed_effects(_summaries(rows[:1], k=2)) is None          # one arm
    s = _summaries(rows, k=2)
    s[1]["fresh_mean_test_top1"] = None                                # a fresh run pending
    assert se.seed_effects(s) is None
    s = _summaries(rows, k=2)
    s[1]["fresh_seeds"] = [5, 6]                                       # other fresh seeds
    assert se.seed_effects(s) is None
    s = _summaries(rows, k=2)
    s[0]["fresh_seeds_planned"] = 0                                    # no fresh seeds planned
    assert se.seed_effects(s) is None
    assert se.seed_effects(_summaries([[90, 91, 92], [89, 90, 93]], k=1)) is None   # one seed


def test_the_paragraph_says_what_the_record_holds():
    arm, seed = [90.0, 88.0, 91.5], [0.6, 0.2, 0.4, -0.3, -0.5, -0.4]
    r = se.seed_effects(_summaries([[a + s for s in seed] for a in arm]))
    text = se.appended({"seed_effects": r, "pending": False})
    assert "| 0 | the table's; its validation run chose each LR | 90.43 | +0.60 |" in text
    assert "| 4 | fresh (no choice read it) | 89.33 | -0.50 |" in text
    assert "are shared across the arms beyond chance: p = 0.0001 by 10,000 permutations" in text
    assert "is -0.80 points on average over the arms; that common shift is 100 % of the " \
           "arms' mean squared shift" in text
    assert "Seed 0, whose validation run chose each LR, is +0.30 points from the mean of " \
           "seeds 1, 2" in text
    flat = se.seed_effects(_summaries([[89.0, 90.0, 91.0, 90.0], [90.0, 91.0, 89.0, 90.0]],
                                      k=2))
    assert "are not shared across the arms" in se.appended({"seed_effects": flat})
    assert se.appended({"seed_effects": r, "pending": True}) == ""
    assert se.appended({"seed_effects": None}) == "" and se.appended({}) == ""
