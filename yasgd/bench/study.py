"""The method of the training benches (``bench largebatch``, ``bench ablation``): arms, each
with its own LR search on the validation split, then seeds at the chosen LR.

An :class:`Arm` is one configuration at one batch size whose LR is searched: lr = factor x
batch/256 (SGD: the linear scaling rule) or factor x sqrt(batch/4096) (LARS), the factor
from a geometric grid. The search, the same for every arm:

1. train seed 0 at every point of the arm's initial grid (at least 3 points, ratio 2);
2. pick the point with the best *validation* top-1 (the held-out training images; a
   diverged run counts as 0); if it is the grid's lowest or highest point, add the next
   point beyond it (factor / 2 or x 2) and go back to 2, at most :data:`MAX_GRID` points;
3. train seeds 1 .. seeds-1 at the chosen point;
4. where the arm asks for them, train ``fresh_seeds`` more seeds at the chosen point
   (seeds ``seeds`` .. ``seeds + fresh_seeds - 1``): no choice reads them, so they check
   the arm's figure out of sample (seed 0's run also chose the LR).

The test set is read once per run, after training, and only the final tables use it: the
arm's figure is the mean over its seeds of the test top-1 at the chosen LR, its spread
max - min over those seeds. Which runs are still needed is always computed from the cache
(yasgd.bench.runcache), so a bench that is interrupted continues where it stopped.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

BASELINE_BATCH = 256
LARS_REF_BATCH = 4096
MICRO = 512                   # micro-batch above which batches are accumulated
MAX_GRID = 10                 # points an LR search may grow to (a guard: divergence ends a search)
SEED_BASE = 0


@dataclass(frozen=True)
class Arm:
    name: str                         # unique within a bench, e.g. "lars-8k", "no-warmup"
    label: str
    batch: int
    optimizer: str                    # "sgd" | "lars"
    factors: Tuple[float, ...]        # the initial LR grid (factors), ascending, ratio 2
    overrides: Tuple[str, ...] = ()   # on top of the scale's and the optimizer's settings
    seeds: int = 3
    group: str = ""                   # the table row group it belongs to
    fresh_seeds: int = 0              # seeds after ``seeds`` at the chosen LR (step 4)

    def lr(self, factor: float) -> float:
        if self.optimizer == "lars":
            return round(factor * math.sqrt(self.batch / LARS_REF_BATCH), 4)
        return round(factor * self.batch / BASELINE_BATCH, 4)

    def lr_rule(self) -> str:
        return ("c x sqrt(B/4096)" if self.optimizer == "lars" else
                "lr" if self.batch == BASELINE_BATCH else "base x B/256")


@dataclass
class Run:
    arm: Arm
    factor: float
    seed: int
    overrides: List[str] = field(default_factory=list)
    key: str = ""

    @property
    def lr(self) -> float:
        return self.arm.lr(self.factor)


def geometry(batch: int, limit: int) -> Tuple[int, int, int]:
    """(micro, accumulate, steps_per_epoch) as yasgd.train computes them for one rank."""
    micro = min(batch, MICRO)
    if batch % micro:
        raise ValueError(f"batch {batch} is not a multiple of the micro-batch {micro}")
    k = batch // micro
    return micro, k, (limit // micro) // k


def _score(res: Optional[Dict[str, object]]) -> float:
    if res is None:
        return float("nan")
    v = res.get("val_top1")
    return 0.0 if v is None else float(v)


@dataclass
class Search:
    """Where an arm's LR search stands, given the results found so far."""
    arm: Arm
    grid: List[float]                 # factors, ascending
    best: Optional[float]             # the chosen factor once the grid is complete
    interior: bool                    # the chosen point is strictly inside the grid
    capped: bool                      # the grid hit MAX_GRID with the best at an edge
    needed: List[Tuple[float, int]]   # (factor, seed) still to train
    results: Dict[Tuple[float, int], Dict[str, object]]

    @property
    def done(self) -> bool:
        return not self.needed

    def _at_best(self, seeds: range) -> List[Dict[str, object]]:
        """The results of ``seeds`` at the chosen point that have run, in seed order."""
        if self.best is None:
            return []
        return [self.results[(self.best, s)] for s in seeds if (self.best, s) in self.results]

    def _fresh_range(self) -> range:
        first = SEED_BASE + self.arm.seeds
        return range(first, first + self.arm.fresh_seeds)

    def seed_results(self) -> List[Dict[str, object]]:
        return self._at_best(range(SEED_BASE, SEED_BASE + self.arm.seeds))

    def fresh_results(self) -> List[Dict[str, object]]:
        return self._at_best(self._fresh_range())

    def summary(self) -> Dict[str, object]:
        runs = self.seed_results()
        tests = [r.get("test_top1") for r in runs]
        vals = [r.get("val_top1") for r in runs]
        seeds_done = len(runs)
        return {
            "arm": self.arm.name, "label": self.arm.label, "batch": self.arm.batch,
            "optimizer": self.arm.optimizer, "group": self.arm.group,
            "grid_lrs": [self.arm.lr(f) for f in self.grid], "grid_factors": self.grid,
            "grid_val_top1": [self.results.get((f, SEED_BASE), {}).get("val_top1")
                              for f in self.grid],
            "grid_state": ["pending" if (f, SEED_BASE) not in self.results else
                           "diverged" if self.results[(f, SEED_BASE)].get("diverged") else "done"
                           for f in self.grid],
            "best_lr": None if self.best is None else self.arm.lr(self.best),
            "best_factor": self.best, "best_inside_grid": self.interior, "grid_capped": self.capped,
            "seeds": list(range(SEED_BASE, SEED_BASE + seeds_done)),
            "seeds_planned": self.arm.seeds,
            "test_top1_by_seed": tests, "val_top1_by_seed": vals,
            # the validation mean at the chosen LR: what picks a recipe setting
            "mean_val_top1": _mean_of_every(vals),
            "mean_test_top1": _mean_of_every(tests),
            "spread_pts": _spread_pts(tests),
            "val_spread_pts": _spread_pts(vals),
            # the arm's own figures are final (its grid and seeds; fresh seeds only check them)
            "complete": self.best is not None and seeds_done == self.arm.seeds,
        } | (self._fresh_summary() if self.arm.fresh_seeds else {})

    def _fresh_summary(self) -> Dict[str, object]:
        """The fresh seeds' runs so far; their mean and spread once all of them ran (a check
        is judged on the seeds it planned, never on the first of them)."""
        runs = self.fresh_results()
        tests = [r.get("test_top1") for r in runs]
        every = len(runs) == self.arm.fresh_seeds
        return {"fresh_seeds": list(self._fresh_range()[:len(runs)]),
                "fresh_seeds_planned": self.arm.fresh_seeds,
                "fresh_test_top1_by_seed": tests,
                "fresh_mean_test_top1": _mean_of_every(tests) if every else None,
                "fresh_spread_pts": _spread_pts(tests) if every else None}


def _spread_pts(xs: List[Optional[float]]) -> Optional[float]:
    """max - min over seeds, in points, once there are two seeds and every one has a value."""
    return 100 * (max(xs) - min(xs)) if len(xs) > 1 and _mean_of_every(xs) is not None else None


def _mean_of_every(xs: List[Optional[float]]) -> Optional[float]:
    """The mean once every seed has a value; None while any has none (or there is none)."""
    return sum(xs) / len(xs) if xs and None not in xs else None


def _key(f: float) -> float:
    return float(f"{f:.6g}")


def search(arm: Arm, lookup: Callable[[Arm, float, int], Optional[Dict[str, object]]]) -> Search:
    """The state of ``arm``'s search: ``lookup(arm, factor, seed)`` is a cached result or
    None. Deterministic: the grid only ever grows by the rule above."""
    grid = sorted(_key(f) for f in arm.factors)
    results: Dict[Tuple[float, int], Dict[str, object]] = {}
    while True:
        missing = []
        for f in grid:
            r = lookup(arm, f, SEED_BASE)
            if r is None:
                missing.append((f, SEED_BASE))
            else:
                results[(f, SEED_BASE)] = r
        if missing:
            return Search(arm, grid, None, False, False, missing, results)
        scores = [_score(results[(f, SEED_BASE)]) for f in grid]
        i = max(range(len(grid)), key=lambda j: (scores[j], -j))   # ties: the lower LR
        edge = i == 0 or i == len(grid) - 1
        if edge and len(grid) < MAX_GRID:
            ratio = grid[1] / grid[0] if len(grid) > 1 else 2.0
            grid = sorted(grid + [_key(grid[0] / ratio if i == 0 else grid[-1] * ratio)])
            continue
        best = grid[i]
        need = []
        for s in range(SEED_BASE + 1, SEED_BASE + arm.seeds + arm.fresh_seeds):
            r = lookup(arm, best, s)
            if r is None:
                need.append((best, s))
            else:
                results[(best, s)] = r
        return Search(arm, grid, best, not edge, edge, need, results)


def runs_left(searches: Sequence[Search]) -> int:
    """A lower bound of the runs still to train: what each search needs now, plus the
    seeds of the searches whose grid is not complete yet."""
    n = 0
    for s in searches:
        n += len(s.needed)
        if s.best is None:
            n += s.arm.seeds - 1 + s.arm.fresh_seeds
    return n
