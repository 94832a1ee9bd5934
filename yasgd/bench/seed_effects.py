"""Whether a seed is good or bad for every arm alike: the training benches' arms with fresh
seeds, read together (``bench largebatch``, ``bench ablation``).

Runs of one seed share their initial weights and their sample order in every arm (the run's
seed sets both), so a seed that suits one arm may suit the others: a seed effect shared
across arms. This reads it with the additive model ``y[arm, seed] = m + a[arm] + s[seed] + e``
on the arms' test top-1 at their chosen LR, over their seeds and fresh seeds:

- a seed's effect: the mean of the arms at that seed minus their mean over every seed (pts);
- whether the effects are shared beyond chance: a permutation test of
  ``T = sum of the squared seed effects`` under the null that each arm's seed labels are
  exchangeable (each arm's figures shuffled across its seeds, independently of the others;
  ``p = (1 + #{T* >= T}) / (1 + N)``, Phipson and Smyth 2010 for the +1s);
- the common shift: the mean over arms of (fresh mean - mean on the table's seeds), and the
  share of the arms' mean squared shift that it accounts for;
- the choosing seed's lead: the mean over arms of (the seed whose validation run chose the LR
  - the mean of the table's other seeds); the optimism of that choice would make it positive.

It is a description read after the fresh seeds were seen, not a check fixed before them: it
changes no figure, judgment or rule of the tables.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import numpy as np

from yasgd.bench import common, study_report as sr

#: permutations of the test, and the seed of their generator (the figure is reproducible)
PERMUTATIONS, PERMUTATION_SEED = 10_000, 0
#: the level below which the seed effects read as shared
ALPHA = 0.05


def permutation_p(y: np.ndarray, permutations: int = PERMUTATIONS,
                  seed: int = PERMUTATION_SEED) -> Dict[str, float]:
    """``y`` (arms x seeds, points): the seed effects, T and its permutation p-value."""
    def stat(a: np.ndarray) -> np.ndarray:
        eff = a.mean(axis=-2) - a.mean(axis=(-2, -1))[..., None]
        return (eff ** 2).sum(axis=-1)
    t = float(stat(y))
    rng = np.random.default_rng(seed)
    shuffled = rng.permuted(np.broadcast_to(y, (permutations,) + y.shape), axis=-1)
    # a permuted T equal to the observed one up to rounding counts as reaching it
    reached = int((stat(shuffled) >= t - 1e-9 * max(t, 1.0)).sum())
    return {"statistic": t, "reached": reached, "p": (1 + reached) / (1 + permutations)}


def seed_effects(summaries: Sequence[Dict[str, object]]) -> Optional[Dict[str, object]]:
    """The arms (``Search.summary``) whose seeds and fresh seeds have all run, read together;
    None unless there are two such arms with the same seeds (or any figure is missing)."""
    arms = [s for s in summaries if s.get("fresh_seeds_planned")
            and s.get("mean_test_top1") is not None
            and s.get("fresh_mean_test_top1") is not None]
    if len(arms) < 2:
        return None
    table, fresh = list(arms[0]["seeds"]), list(arms[0]["fresh_seeds"])
    if len(table) < 2 or any(list(a["seeds"]) != table or list(a["fresh_seeds"]) != fresh
                             for a in arms):
        return None
    y = 100 * np.array([list(a["test_top1_by_seed"]) + list(a["fresh_test_top1_by_seed"])
                        for a in arms], dtype=float)
    k = len(table)
    test = permutation_p(y)
    shifts = y[:, k:].mean(axis=1) - y[:, :k].mean(axis=1)
    common_shift = float(shifts.mean())
    square = float((shifts ** 2).mean())
    return {"arms": [a["arm"] for a in arms], "labels": [a["label"] for a in arms],
            "seeds": table, "fresh_seeds": fresh, "choice_seed": table[0],
            "mean_by_seed": [float(x) for x in y.mean(axis=0)],
            "effect_pts": [float(x) for x in y.mean(axis=0) - y.mean()],
            "statistic": test["statistic"], "permutations": PERMUTATIONS,
            "reached": test["reached"], "p": test["p"],
            "alpha": ALPHA, "shared": test["p"] < ALPHA,
            "common_shift_pts": common_shift,
            "shift_share": None if square == 0 else 1 - float(((shifts - common_shift) ** 2)
                                                              .mean()) / square,
            "choice_seed_lead_pts": float((y[:, 0] - y[:, 1:k].mean(axis=1)).mean())}


def table(se: Dict[str, object]) -> str:
    """One row per seed: its role, the arms' mean at it and its effect."""
    def role(seed: int) -> str:
        if seed == se["choice_seed"]:
            return "the table's; its validation run chose each LR"
        return "the table's" if seed in se["seeds"] else "fresh (no choice read it)"
    rows = [[str(seed), role(seed), f"{m:.2f}", sr.pts(e)] for seed, m, e in
            zip(se["seeds"] + se["fresh_seeds"], se["mean_by_seed"], se["effect_pts"])]
    return common.md_table(["seed", "seed of", f"mean of the {len(se['arms'])} arms (test top-1 %)",
                            "seed effect (pts)"], rows, "llrr")


def reading(se: Optional[Dict[str, object]]) -> List[str]:
    """What the seed effects say, in words (empty where there are none to read)."""
    if not se:
        return []
    p = f"{se['p']:.4f}".rstrip("0").rstrip(".")
    share = ("" if se["shift_share"] is None else
             f"; that common shift is {100 * se['shift_share']:.0f} % of the arms' mean squared "
             f"shift")
    others = sr.seeds_text(se["seeds"][1:])
    return [
        f"Read after the fresh seeds were seen, not a check fixed before them: the {len(se['arms'])}"
        f" arms with fresh seeds, seed by seed. Runs of one seed start from the same weights (but "
        f"for what an arm changes in them) and draw the same sample order in every arm. The seed effects (the arms' mean at a seed minus "
        f"their mean over all seeds) are "
        + ("" if se["shared"] else "not ")
        + f"shared across the arms beyond chance: p = {p} by {se['permutations']:,} permutations "
        f"of each arm's seeds ({se['reached']:,} reached the observed statistic; shared below "
        f"{se['alpha']:g}).",
        f"An arm's shift (its fresh mean minus its mean on the table's seeds) is "
        f"{sr.pts(se['common_shift_pts'])} points on average over the arms{share}. Seed {se['choice_seed']}, whose validation run chose each LR, is "
        f"{sr.pts(se['choice_seed_lead_pts'])} points from the mean of seeds {others} on "
        f"average over the arms; the choice's optimism would make this positive."]


def appended(fresh: Dict[str, object]) -> str:
    """A fresh-seed check's seed effects (its ``seed_effects``), as a paragraph to append to
    its tables in a bench's Markdown and its docs page; empty where there are none."""
    se = fresh.get("seed_effects")
    if not se or fresh.get("pending"):
        return ""
    return ("\n\nThe arms with fresh seeds, seed by seed (test top-1 at the chosen LR):\n\n"
            + table(se) + "\n\n" + " ".join(reading(se)))
