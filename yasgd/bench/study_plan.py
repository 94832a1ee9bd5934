"""The scales and arms of ``yasgd bench largebatch`` and ``yasgd bench ablation``, and the
config overrides of every run (``yasgd.config.load(None, overrides)``).

Both benches share one scale and one result cache: the arms they have in common (the
batch-256 baseline, the recipe at 8K) are trained once.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

from yasgd.bench.study import BASELINE_BATCH, MICRO, Arm, Run, geometry

R2 = math.sqrt(2)
PRECISE_BN_IMAGES = 8192    # precise BN's sample count in mmpretrain's configs (PreciseBNHook)


@dataclass(frozen=True)
class Scale:
    """Everything that sets the size of a run."""
    name: str
    big: int                  # the batch of the ablation ("8K")
    huge: int                 # the second large batch of the headline ("16K")
    others: Tuple[int, ...]   # the headline's other batches (grid only, one seed)
    epochs: int
    limit: int                # training images: the first N of the 60,000; the rest validate
    width: int
    warmup_epochs: float
    power: float
    polish_epochs: int        # the augmentation arm's final polishing
    eval_every: int           # validation every N epochs (and after the last)
    seeds: int                # seeds of the arms the acceptance compares
    run_timeout_s: float
    eval_limit: int = 0       # evaluate on the first N images of each set only (0 = all)
    fresh_seeds: int = 0      # seeds no choice reads (a check): the compared and technique arms
    model: str = "resnet8"
    stem_stride: int = 2


# The full scale: a subset of 49,152 images (a multiple of 16K: every batch sees every image
# every epoch), leaving 10,848 for validation; width 8 with the strided stem, no augmentation
# but in the augmentation arm, 40 epochs, a 4-epoch warm-up and poly power 1 for every arm.
FULL = Scale("full", big=8192, huge=16384, others=(1024, 4096), epochs=40, limit=49152,
             width=8, warmup_epochs=4.0, power=1.0, polish_epochs=2, eval_every=4, seeds=3,
             run_timeout_s=3600.0, fresh_seeds=3)
# --quick: the same arms and method in seconds (2 epochs of 2,048 images, width 4, evaluated
# on 2,000 images; "8K" is batch 1,024 there and the ablation has one technique arm).
QUICK = Scale("quick", big=1024, huge=2048, others=(), epochs=2, limit=2048, width=4,
              warmup_epochs=0.5, power=1.0, polish_epochs=1, eval_every=2, seeds=2,
              run_timeout_s=300.0, eval_limit=2000, fresh_seeds=1)


def _batch_label(b: int) -> str:
    return f"{b // 1024}K" if b >= 1024 else str(b)


def common_overrides(scale: Scale) -> List[str]:
    return [
        f"model.name={scale.model}", f"model.width={scale.width}", "model.classes=10",
        f"model.stem_stride={scale.stem_stride}",
        "data.kind=fashion_mnist", f"data.limit={scale.limit}", "data.eval_set=holdout",
        f"data.eval_limit={scale.eval_limit}",
        "data.pad_crop=0", "data.flip=false", "data.polish_epochs=0",
        f"train.epochs={scale.epochs}", f"train.eval_every={scale.eval_every}",
        "train.eval_offset=0", "train.progress=false", "train.keep_checkpoints=0",
        "mlperf.enabled=false", "train.log_interval=1000000", "train.hybridize=false",
        f"schedule.warmup_epochs={scale.warmup_epochs}", "schedule.warmup_begin_lr=0.0",
        f"schedule.power={scale.power}", "schedule.end_lr=0.0", "optim.momentum=0.9",
    ]


# The yasgd recipe: LARS, label smoothing, WD following the LR, BN momentum from the BN
# updates per epoch. Two settings differ from the papers' and were chosen on the validation
# split at 8K (the tuning arms of ``bench ablation``): LARS eta 0.005 (the LARS paper: 0.001,
# the paper's code: 0.0025) and the last BN gamma of each residual block initialised to 1
# (the paper: zero-init).
RECIPE = ("optim.name=lars", "optim.eta=0.005", "optim.epsilon=1e-9", "optim.wd=5e-4",
          "optim.fused=true", "optim.momentum_correction=false", "optim.wd_in_denominator=true",
          "schedule.wd_schedule=follow_lr", "train.label_smoothing=0.1",
          "model.bn_momentum_rule=iterations", "model.zero_init_last_gamma=false")
# the recipe before tuning: the LARS paper's eta, the paper's zero-init last gamma
PAPER_SETTINGS = ("optim.eta=0.001", "model.zero_init_last_gamma=true")
# plain SGD with momentum: constant WD, no label smoothing, fixed BN momentum, gammas at 1
PLAIN_SGD = ("optim.name=sgd", "optim.wd=5e-4", "schedule.wd_schedule=constant",
             "train.label_smoothing=0.0", "model.bn_momentum_rule=fixed", "model.bn_momentum=0.9",
             "model.zero_init_last_gamma=false")

SGD_BASES = (0.0125, 0.025, 0.05)               # x B/256
# LARS grids, x sqrt(B/4096). With eta 5x the LARS paper's the LARS layers' step at a given
# LR is 5x larger, so the recipe's grid is centred one point lower (lr 4, 8, 16 at 8K) than
# the grid of the paper's settings (lr 8, 16, 32 at 8K); the search extends either.
LARS_CS = (2 * R2, 4 * R2, 8 * R2)
PAPER_LARS_CS = (4 * R2, 8 * R2, 16 * R2)
BASELINE_LRS = (0.2, 0.4, 0.8)
# The recipe's grid moved half a step (x sqrt 2): the LRs between its own points.
LARS_CS_BETWEEN = tuple(c * R2 for c in LARS_CS)


def recipe_text() -> str:
    """The recipe's settings in words, read from the overrides every run shares and
    :data:`RECIPE` on top (a later override wins, as in ``yasgd.config.load``)."""
    v = dict(o.split("=", 1) for o in common_overrides(FULL) + list(RECIPE))
    gamma = ("the last BN gamma of each residual block initialised to 0"
             if v["model.zero_init_last_gamma"] == "true" else "BN gammas initialised to 1")
    return (f"LARS (eta {v['optim.eta']}, eps {v['optim.epsilon']}, momentum "
            f"{v['optim.momentum']}, WD {v['optim.wd']} following the LR), label smoothing "
            f"{v['train.label_smoothing']}, BN momentum 1 - 1/(micro-batches per epoch), {gamma}")


def headline_arms(scale: Scale) -> List[Arm]:
    """``bench largebatch``: the baseline, then SGD and the recipe at 8K and 16K (3 seeds
    each at the chosen LR, then the scale's fresh seeds), then the other batch sizes (the LR
    grid, one seed)."""
    fresh = scale.fresh_seeds
    arms = [Arm("baseline", "SGD + momentum, batch 256 (baseline)", BASELINE_BATCH, "sgd",
                BASELINE_LRS, PLAIN_SGD, scale.seeds, "baseline", fresh)]
    for b in (scale.big, scale.huge) + tuple(scale.others):
        compared = b in (scale.big, scale.huge)
        seeds = scale.seeds if compared else 1
        lab = _batch_label(b)
        arms.append(Arm(f"lars-{lab.lower()}", f"yasgd recipe at {lab}", b, "lars", LARS_CS,
                        RECIPE, seeds, lab, fresh if compared else 0))
        arms.append(Arm(f"sgd-{lab.lower()}", f"SGD + linear scaling + warm-up at {lab}", b,
                        "sgd", SGD_BASES, PLAIN_SGD, seeds, lab, fresh if compared else 0))
    return arms


# One arm per technique at 8K: removed where the recipe uses it, added where it leaves it out.
# (name, label, optimizer, overrides on top of the recipe, "removed" | "added")
TECHNIQUES: Tuple[Tuple[str, str, str, Tuple[str, ...], str], ...] = (
    ("no-lars", "SGD momentum instead of LARS (and its WD constant: SGD takes no WD "
                "schedule)", "sgd", ("optim.name=sgd",), "removed"),
    ("no-warmup", "no warm-up", "lars", ("schedule.warmup_epochs=0",), "removed"),
    ("no-label-smoothing", "no label smoothing", "lars", ("train.label_smoothing=0.0",),
     "removed"),
    ("constant-wd", "constant WD (no WD schedule)", "lars", ("schedule.wd_schedule=constant",),
     "removed"),
    ("fixed-bn-momentum", "fixed BN momentum 0.9 (no iteration rule)", "lars",
     ("model.bn_momentum_rule=fixed", "model.bn_momentum=0.9"), "removed"),
    ("zero-gamma", "+ the paper's zero-init last BN gamma", "lars",
     ("model.zero_init_last_gamma=true",), "added"),
    ("augment-polish", "+ augmentation (crop, flip) with final polishing", "lars",
     ("data.pad_crop=2", "data.flip=true", "data.polish_epochs={polish}"), "added"),
    ("power-2", "+ the paper's polynomial power 2", "lars", ("schedule.power=2.0",), "added"),
)
QUICK_TECHNIQUES = ("no-warmup",)
# The settings tried to bring the recipe at 8K closer to the baseline, each on top of the
# recipe with the paper's settings (PAPER_SETTINGS) and searched on the paper settings' grid:
# the paper's settings themselves, the values of the paper's own code (Fujitsu's MLPerf v0.6
# parameters) one at a time, then the settings that raised the validation mean together and
# further. The tuning setting with the best validation mean (eta 0.005 with the last gamma at
# 1) is the recipe, so its runs are the recipe's row, not a tuning arm.
TUNING: Tuple[Tuple[str, str, str, Tuple[str, ...], str], ...] = (
    ("paper-settings", "the recipe with the paper's settings: LARS eta 0.001, zero-init last "
     "BN gamma", "lars", (), "tuning"),
    ("warmup-16", "paper's settings, warm-up 16 of 40 epochs (the paper's code: 36 of 90)",
     "lars", ("schedule.warmup_epochs=16",), "tuning"),
    ("eta-0.0025", "paper's settings, LARS eta 0.0025 (the paper's code)", "lars",
     ("optim.eta=0.0025",), "tuning"),
    ("momentum-0.96", "paper's settings, momentum 0.96 (the paper's code)", "lars",
     ("optim.momentum=0.96",), "tuning"),
    ("eta-0.0025-gamma-1",
     "LARS eta 0.0025 and last BN gamma at 1 (the two that raised the validation mean)", "lars",
     ("optim.eta=0.0025", "model.zero_init_last_gamma=false"), "tuning"),
    ("eta-0.01-gamma-1", "LARS eta 0.01 and last BN gamma at 1 (eta further still)",
     "lars", ("optim.eta=0.01", "model.zero_init_last_gamma=false"), "tuning"),
    ("eta-0.0025-gamma-1-warmup-2", "LARS eta 0.0025, last BN gamma at 1 and warm-up 2 epochs",
     "lars", ("optim.eta=0.0025", "model.zero_init_last_gamma=false",
              "schedule.warmup_epochs=2"), "tuning"),
)


def _bn_batch_arm(micro: int, why: str) -> Tuple[str, str, str, Tuple[str, ...], str]:
    """A tuning arm: the recipe's step accumulated from micro-batches of ``micro`` images, so
    that BN's statistics are over ``micro`` (``{accumulate[micro]}``: filled in per batch)."""
    return (f"bn-batch-{micro}", f"the recipe with BN statistics over micro-batches of "
            f"{micro:,} (the recipe: {MICRO}; {why})", "lars",
            (f"train.batch_per_rank={micro}", f"train.accumulate={{accumulate[{micro}]}}"),
            "tuning")


class _Accumulate:
    """``{accumulate[m]}`` in an arm's overrides: micro-batches of ``m`` in a step of ``batch``."""

    def __init__(self, batch: int):
        self.batch = batch

    def __getitem__(self, micro: int) -> int:
        return self.batch // min(self.batch, micro)


# Settings tried on top of the recipe as shipped (on its grid): each of the recipe's
# techniques taken further (a stronger label smoothing, a longer warm-up), then together the
# settings whose arms raised the validation mean over the recipe's, then a longer final
# polishing after augmentation and the paper's code's schedule tail, and that tail with the
# stronger label smoothing (both raised the validation mean), then the weight decay of the
# paper's code, then the LARS exclusions: BN gamma/beta and biases in LARS, without and with
# weight decay, then LARS on them with the stronger label smoothing, then BN statistics over
# smaller micro-batches (closer to the paper's 40 images a GPU), BN statistics re-estimated
# before evaluation, and BN statistics over larger micro-batches, then the stronger label
# smoothing with the longer warm-up.
RECIPE_TUNING: Tuple[Tuple[str, str, str, Tuple[str, ...], str], ...] = (
    ("label-smoothing-0.2", "the recipe with label smoothing 0.2 (the recipe: 0.1)", "lars",
     ("train.label_smoothing=0.2",), "tuning"),
    ("label-smoothing-0.3", "the recipe with label smoothing 0.3 (the recipe: 0.1)", "lars",
     ("train.label_smoothing=0.3",), "tuning"),
    ("warmup-8", "the recipe with warm-up 8 of 40 epochs (the recipe: 4)", "lars",
     ("schedule.warmup_epochs=8",), "tuning"),
    ("label-smoothing-0.2-power-2", "the recipe with label smoothing 0.2 and polynomial "
     "power 2 (the two techniques with the highest validation means)", "lars",
     ("train.label_smoothing=0.2", "schedule.power=2.0"), "tuning"),
    ("label-smoothing-0.2-power-2-zero-gamma", "the recipe with label smoothing 0.2, power 2 "
     "and zero-init last BN gamma (each raised the validation mean)", "lars",
     ("train.label_smoothing=0.2", "schedule.power=2.0", "model.zero_init_last_gamma=true"),
     "tuning"),
    ("augment-polish-8", "the recipe with augmentation (crop, flip) and 8 epochs of final "
     "polishing (the technique arm: 2)", "lars",
     ("data.pad_crop=2", "data.flip=true", "data.polish_epochs=8"), "tuning"),
    ("paper-tail", "the recipe with the paper's code's polynomial tail: power 2.2 to end LR "
     "0.02 (its code: 0.0325 from LR 13, the same 1/400 of the recipe's LR 8)", "lars",
     ("schedule.power=2.2", "schedule.end_lr=0.02"), "tuning"),
    ("label-smoothing-0.2-paper-tail", "the recipe with label smoothing 0.2 and the paper's "
     "code's tail (power 2.2 to end LR 0.02; each raised the validation mean)", "lars",
     ("train.label_smoothing=0.2", "schedule.power=2.2", "schedule.end_lr=0.02"), "tuning"),
    ("wd-5e-5", "the recipe with the paper's code's weight decay 5e-5 (the recipe: 5e-4)",
     "lars", ("optim.wd=5e-5",), "tuning"),
    ("lars-on-1d", "the recipe with LARS on BN gamma/beta and biases, still without weight "
     "decay (the recipe: neither)", "lars", ("optim.exclude_1d=wd",), "tuning"),
    ("lars-and-wd-on-1d", "the recipe with LARS and weight decay on BN gamma/beta and biases "
     "(the recipe: neither)", "lars", ("optim.exclude_1d=none",), "tuning"),
    ("lars-on-1d-label-smoothing-0.2", "the recipe with LARS on BN gamma/beta and biases and "
     "label smoothing 0.2 (each raised the validation mean)", "lars",
     ("optim.exclude_1d=wd", "train.label_smoothing=0.2"), "tuning"),
    _bn_batch_arm(128, "the paper: 40 images a GPU"),
    ("precise-bn", "the recipe with BN statistics re-estimated on 8,192 training images before "
     "every evaluation (precise BN; the recipe: the moving averages)", "lars",
     ("train.bn_recalibrate_batches={precise}",), "tuning"),
    _bn_batch_arm(2048, "128 lowered the validation mean"),
    ("label-smoothing-0.2-warmup-8", "the recipe with label smoothing 0.2 and warm-up 8 of 40 "
     "epochs (each raised the validation mean)", "lars",
     ("train.label_smoothing=0.2", "schedule.warmup_epochs=8"), "tuning"),
)
# Settings tried on the LR grid between the recipe's own points (LARS_CS_BETWEEN).
RECIPE_GRID_BETWEEN: Tuple[Tuple[str, str, str, Tuple[str, ...], str], ...] = (
    ("grid-between", "the recipe on the LR grid between its own points", "lars", (), "tuning"),
    ("label-smoothing-0.2-grid-between", "the recipe with label smoothing 0.2 on the LR grid "
     "between the recipe's points", "lars", ("train.label_smoothing=0.2",), "tuning"),
)


def ablation_arms(scale: Scale) -> List[Arm]:
    """``bench ablation``: the baseline, the recipe at 8K, one arm per technique, then the
    tuning arms (on the paper's settings, then on the recipe)."""
    b = scale.big
    # fresh seeds for the recipe and the technique rows (the recipe's are the headline's runs);
    # the baseline's row has no difference to check, and the tuning arms are a search
    fresh = scale.fresh_seeds
    arms = [dataclasses.replace(headline_arms(scale)[0], fresh_seeds=0),
            Arm(f"lars-{_batch_label(b).lower()}", f"yasgd recipe at {_batch_label(b)} (as shipped)",
                b, "lars", LARS_CS, RECIPE, scale.seeds, "recipe", fresh)]
    # each family of arms with the setting it starts from and the LARS grid it searches
    for family, base, cs in ((TECHNIQUES, RECIPE, LARS_CS),
                             (TUNING, RECIPE + PAPER_SETTINGS, PAPER_LARS_CS),
                             (RECIPE_TUNING, RECIPE, LARS_CS),
                             (RECIPE_GRID_BETWEEN, RECIPE, LARS_CS_BETWEEN)):
        for name, label, opt, extra, kind in family:
            if scale.name == "quick" and name not in QUICK_TECHNIQUES:
                continue
            extra = tuple(x.format(polish=scale.polish_epochs,
                                   accumulate=_Accumulate(b),
                                   precise=max(1, PRECISE_BN_IMAGES // min(b, MICRO)))
                          for x in extra)
            arms.append(Arm(name, label, b, opt, SGD_BASES if opt == "sgd" else cs,
                            _read_by(opt, base) + extra, scale.seeds, kind,
                            fresh if family is TECHNIQUES else 0))
    return arms


def _read_by(opt: str, base: Tuple[str, ...]) -> Tuple[str, ...]:
    """``base`` without the keys optimizer ``opt`` does not read (for SGD: LARS's eta,
    epsilon, ... and the WD schedule, which MXNet's SGD does not take), so that an arm's
    config holds only what it runs (``yasgd.config_text.READ_ONLY_WITH``)."""
    from yasgd.config_text import READ_ONLY_WITH
    lars_only = {k for k, (decider, _, _) in READ_ONLY_WITH.items() if decider == "optim.name"}
    return base if opt == "lars" else tuple(o for o in base
                                            if o.split("=", 1)[0] not in lars_only)


def overrides(scale: Scale, run: Run, run_dir: str) -> List[str]:
    micro, k, steps = geometry(run.arm.batch, scale.limit)
    if steps == 0:
        raise ValueError(f"data.limit={scale.limit} gives batch {run.arm.batch} no full step")
    name = f"{run.arm.name}-lr{run.lr:g}-s{run.seed}"
    return ([f"run.name={name}", f"run.dir={run_dir}", f"run.seed={run.seed}"]
            + common_overrides(scale)
            + [f"train.global_batch={run.arm.batch}", f"train.batch_per_rank={micro}",
               f"train.accumulate={k}", f"optim.lr={run.lr!r}"]
            + list(run.arm.overrides))


def arm_names(text: str) -> List[str]:
    """The names of ``--arms`` (comma-separated); UsageError for an empty one, so that a
    stray comma never widens the selection to every arm, and for one named twice, which
    would put the same arm in the table twice."""
    from yasgd import UsageError
    names = [n.strip() for n in text.split(",")]
    if not all(names):
        raise UsageError(f"--arms: an empty arm name in {text!r} (comma-separated arm names; "
                         f"leave --arms out for every arm)")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UsageError(f"--arms: {', '.join(twice)} named more than once in {text!r} "
                         f"(name each arm once)")
    return names


def select(arms: Sequence[Arm], names: Sequence[str]) -> List[Arm]:
    """The arms named in ``names`` (all when empty); UsageError for an unknown name."""
    if not names:
        return list(arms)
    known: Dict[str, Arm] = {a.name: a for a in arms}
    bad = [n for n in names if n not in known]
    if bad:
        from yasgd import UsageError
        raise UsageError(f"--arms: unknown arm(s) {', '.join(bad)} (known: {', '.join(known)})")
    return [known[n] for n in names]
