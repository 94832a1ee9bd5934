"""The training benches' method (yasgd.bench.study), plan (study_plan) and cache (runcache).

The LR search is checked against closed forms: a validation accuracy that peaks at a known
factor must lead the search there, from below, from above and from inside the grid, with the
exact grid and seed runs the rule in the module's docstring gives; every run's overrides are
loaded by the real ``yasgd.config.load``; the cache's staleness is checked against real
source files of this package.
"""
import hashlib
import math
import os

import pytest

from yasgd import UsageError, config as config_mod, config_text
from yasgd.bench import runcache, study, study_plan as plan


def _arm(factors=(1.0, 2.0, 4.0), seeds=3, opt="sgd", batch=8192):
    return study.Arm("a", "a", batch, opt, tuple(factors), (), seeds, "x")


def _peak_lookup(peak, have=None, diverge_above=None):
    """val top-1 = 0.9 - 0.01 * log2(f / peak)^2, every (factor, seed) trained once asked."""
    have = {} if have is None else have

    def lookup(arm, f, seed):
        if (f, seed) not in have:
            return None
        if diverge_above is not None and f > diverge_above:
            return {"val_top1": None, "test_top1": None, "diverged": True}
        return {"val_top1": 0.9 - 0.01 * math.log2(f / peak) ** 2,
                "test_top1": 0.9 - 0.001 * seed}
    return have, lookup


def _drive(arm, lookup, have):
    """Train whatever the search asks for until it is done; the order of the asks."""
    asked = []
    for _ in range(50):
        s = study.search(arm, lookup)
        if s.done:
            return s, asked
        for k in s.needed:
            have[k] = True
            asked.append(k)
    raise AssertionError("search did not finish")


@pytest.mark.parametrize("peak,grid,best", [
    (2.0, [1.0, 2.0, 4.0], 2.0),                     # inside at once
    (16.0, [1.0, 2.0, 4.0, 8.0, 16.0, 32.0], 16.0),  # extended upwards 3 times
    (0.25, [0.125, 0.25, 0.5, 1.0, 2.0, 4.0], 0.25),  # extended downwards 3 times
])
def test_search_extends_until_the_best_is_inside(peak, grid, best):
    have, lookup = _peak_lookup(peak)
    s, asked = _drive(_arm(), lookup, have)
    assert s.grid == grid and s.best == best and s.interior and not s.capped
    assert asked[:3] == [(1.0, 0), (2.0, 0), (4.0, 0)]
    assert asked[-2:] == [(best, 1), (best, 2)]       # the seeds at the chosen point, last
    assert len(asked) == len(grid) + 2
    summ = s.summary()
    assert summ["seeds"] == [0, 1, 2] and summ["best_inside_grid"]
    assert summ["mean_test_top1"] == pytest.approx(0.9 - 0.001, abs=1e-12)
    assert summ["spread_pts"] == pytest.approx(0.2, abs=1e-9)


def test_search_counts_a_diverged_run_as_zero_and_stops_at_the_cap():
    have, lookup = _peak_lookup(64.0, diverge_above=3.0)
    s, _ = _drive(_arm(), lookup, have)
    assert s.best == 2.0 and s.interior and s.grid == [1.0, 2.0, 4.0]
    have, lookup = _peak_lookup(1e6)
    s, _ = _drive(_arm(), lookup, have)
    assert len(s.grid) == study.MAX_GRID and s.capped and not s.interior and s.best == s.grid[-1]


def test_grids_line_counts_arms_inside_and_needs_every_arm_complete():
    from yasgd.bench import common, study_report
    done_have, done = _peak_lookup(2.0)
    s_in, _ = _drive(_arm(), done, done_have)                    # inside, 3 seeds
    edge_have, edge = _peak_lookup(1e6)
    s_edge, _ = _drive(_arm(), edge, edge_have)                  # capped at the edge
    line = study_report.grids_line([s_in.summary(), s_edge.summary()])
    assert (line["value"], line["threshold"], line["met"]) == (1, 2, False)
    row = common.acceptance_table([line]).splitlines()[-1]
    assert "| 1 of 2 arms |" in row and "**not met**" in row
    line = study_report.grids_line([s_in.summary(), s_in.summary()])
    assert line["met"] and "| 2 of 2 arms | met |" in common.acceptance_table([line])


def _finished(name, group, tests, vals=None):
    """A finished search whose seeds scored ``tests`` on the test set (and ``vals`` on the
    validation split at the chosen LR 2.0; 0.9 where not given)."""
    have = {}

    def lookup(arm, f, seed):
        if (f, seed) not in have:
            return None
        val = vals[seed] if vals and f == 2.0 else 0.9 - 0.01 * math.log2(f / 2.0) ** 2
        return {"val_top1": val, "test_top1": tests[seed]}
    arm = study.Arm(name, name, 8192, "lars", (1.0, 2.0, 4.0), (), len(tests), group)
    return _drive(arm, lookup, have)[0].summary()


def test_ablation_table_signs_and_the_spread_rule():
    from yasgd.bench import ablation
    recipe = _finished("lars-8k", "recipe", [0.890, 0.895, 0.900])        # mean 89.5, spread 1.0
    rows = [_finished("baseline", "baseline", [0.92, 0.92, 0.92]), recipe,
            _finished("no-x", "removed", [0.870, 0.870, 0.875]),          # buys +2.33 > 1.0
            _finished("plus-y", "added", [0.893, 0.896, 0.899]),          # buys +0.1, inside
            _finished("tune-z", "tuning", [0.880, 0.880, 0.880])]         # arm - recipe -1.5
    t = ablation.tables(rows)
    assert t["recipe_minus_baseline_8k"] == pytest.approx(-2.5, abs=1e-9)
    eff = {e["arm"]: e for e in t["effects"]}
    assert eff["no-x"]["technique_buys_pts"] == pytest.approx(89.5 - 87.1667, abs=1e-3)
    assert eff["no-x"]["spread_pts"] == pytest.approx(1.0, abs=1e-9) and eff["no-x"]["beyond_spread"]
    assert eff["plus-y"]["technique_buys_pts"] == pytest.approx(0.1, abs=1e-9)
    assert eff["plus-y"]["beyond_spread"] is False
    assert eff["tune-z"]["technique_buys_pts"] is None
    assert eff["tune-z"]["arm_minus_recipe_pts"] == pytest.approx(-1.5, abs=1e-9)
    assert eff["tune-z"]["beyond_spread"] is True
    lines = {ln.split("|")[1].strip(): ln for ln in t["table"].splitlines()[2:]}
    assert lines["no-x"].rstrip().endswith("| +2.33 | 1.00 | yes |")
    assert lines["plus-y"].rstrip().endswith("| +0.10 | 1.00 | no |")
    # an arm still training is never judged
    partial = _finished("no-w", "removed", [0.85, 0.86, 0.87])
    partial["complete"], partial["seeds"] = False, [0, 1]
    assert ablation.tables([recipe, partial])["effects"][0]["beyond_spread"] is None
    # ... nor plotted, while a complete arm is
    done = _finished("no-v", "removed", [0.85, 0.86, 0.87])
    effects = ablation.tables([recipe, partial, done])["effects"]
    assert [e["arm"] for e in ablation.plotted(effects)] == ["no-v"]


def test_recipe_setting_is_picked_on_the_validation_mean_not_the_test_mean():
    from yasgd.bench import ablation
    recipe = _finished("lars-8k", "recipe", [0.89] * 3, vals=[0.90, 0.90, 0.90])
    on_val = _finished("tune-a", "tuning", [0.88] * 3, vals=[0.915, 0.92, 0.925])
    on_test = _finished("tune-b", "tuning", [0.95] * 3, vals=[0.905, 0.905, 0.905])
    assert on_val["mean_val_top1"] == pytest.approx(0.92, abs=1e-12)
    assert on_val["val_top1_by_seed"] == [0.915, 0.92, 0.925]
    assert on_val["val_spread_pts"] == pytest.approx(1.0, abs=1e-9)
    t = ablation.tables([recipe, on_val, on_test])
    b = t["best_on_validation"]
    assert b["arm"] == "tune-a" and b["arms_compared"] == 2 and b["adopt"] == "tune-a"
    assert b["arm_minus_recipe_val_pts"] == pytest.approx(2.0, abs=1e-9)
    assert b["larger_val_spread_pts"] == pytest.approx(1.0, abs=1e-9)
    row = next(ln for ln in t["table"].splitlines() if ln.startswith("| tune-a |"))
    assert "| 88.00 | 92.00 |" in row
    assert ("tune-a has the highest mean, 92.00 % against the recipe's 90.00 % (+2.00 pts, "
            "beyond the larger validation spread of the two, 1.00 pts): the next setting to "
            "adopt.") in ablation._validation_note(b)
    # a technique arm is a candidate setting too (adding or removing the technique)
    added = _finished("add-x", "added", [0.80] * 3, vals=[0.93] * 3)
    b = ablation.tables([recipe, on_val, on_test, added])["best_on_validation"]
    assert b["arm"] == "add-x" and b["adopt"] == "add-x" and b["arms_compared"] == 3
    # a higher mean inside the seeds' spread is named but not adopted; an arm above the
    # recipe by more than its spread is, though its mean is lower
    noisy = _finished("tune-n", "tuning", [0.89] * 3, vals=[0.95, 0.92, 0.89])  # 92.0, 6.0
    b = ablation.tables([recipe, noisy])["best_on_validation"]
    assert b["arm"] == "tune-n" and b["adopt"] is None
    note = ablation._validation_note(b)
    assert "(+2.00 pts, inside the larger validation spread of the two, 6.00 pts)" in note
    assert note.endswith("the recipe stays.")
    b = ablation.tables([recipe, noisy, on_test])["best_on_validation"]
    assert b["arm"] == "tune-n" and b["adopt"] == "tune-b"
    assert ("tune-b is above the recipe by +0.50 pts, beyond its spread of 0.00 pts: the next "
            "setting to adopt.") in ablation._validation_note(b)
    # the recipe's own spread counts: the same arm is inside it against a noisy recipe
    loose = _finished("lars-8k", "recipe", [0.89] * 3, vals=[0.91, 0.90, 0.89])  # spread 2.0
    assert ablation.tables([loose, on_val])["best_on_validation"]["adopt"] is None
    # no tuning arm above the recipe (a tie keeps the recipe); an arm still training is
    # not compared; nothing to say before one tuning arm is complete
    tie = _finished("tune-c", "tuning", [0.99] * 3, vals=[0.90] * 3)
    b = ablation.tables([recipe, tie])["best_on_validation"]
    assert b["arm"] == "lars-8k" and b["adopt"] is None
    assert "none of the 1 arm(s) beats" in ablation._validation_note(b)
    on_val["complete"] = False
    assert ablation.tables([recipe, on_val])["best_on_validation"] is None
    assert "n/a until" in ablation._validation_note(None)


def test_search_ignores_runs_it_did_not_ask_for():
    have, lookup = _peak_lookup(2.0, have={(8.0, 0): True, (0.5, 0): True})
    s, asked = _drive(_arm(), lookup, have)
    assert s.grid == [1.0, 2.0, 4.0] and (8.0, 0) not in asked


def test_lr_rules():
    assert _arm(opt="sgd", batch=8192).lr(0.025) == pytest.approx(0.8)
    assert _arm(opt="lars", batch=8192).lr(8 * math.sqrt(2)) == pytest.approx(16.0)
    assert _arm(opt="lars", batch=16384).lr(4.0) == pytest.approx(8.0)


def _runs(arms, scale):
    for a in arms:
        for f in a.factors:
            r = study.Run(a, f, 0)
            r.overrides = plan.overrides(scale, r, "runs")
            yield a, r


@pytest.mark.parametrize("scale", [plan.FULL, plan.QUICK], ids=["full", "quick"])
def test_every_run_config_loads_and_holds_its_arm(scale):
    arms = plan.headline_arms(scale) + plan.ablation_arms(scale)
    for a, r in _runs(arms, scale):
        cfg = config_mod.load(None, r.overrides)
        config_text.check_read(cfg, r.overrides)     # every key it sets is one it reads
        assert cfg.train.global_batch == a.batch
        assert cfg.train.batch_per_rank * cfg.train.accumulate == a.batch
        assert cfg.optim.lr == pytest.approx(a.lr(r.factor))
        assert cfg.data.eval_set == "holdout" and cfg.data.limit == scale.limit
        assert cfg.train.epochs == scale.epochs
        if a.group in ("baseline",) or a.name.startswith("sgd-"):
            assert cfg.optim.name == "sgd" and cfg.train.label_smoothing == 0


def _config(arm, scale):
    r = study.Run(arm, arm.factors[1], 0)
    return runcache.config_dict(plan.overrides(scale, r, "runs"))


def test_each_ablation_arm_changes_exactly_its_technique():
    """Each technique arm differs from the recipe at 8K in the keys of its technique and
    nothing else; each tuning arm differs from the recipe with the paper's settings (or, for
    those tried on it, from the recipe) in the keys it tries (the LR aside: each arm searches
    its own)."""
    arms = {a.name: a for a in plan.ablation_arms(plan.FULL)}
    recipe = _config(arms["lars-8k"], plan.FULL)
    paper = _config(arms["paper-settings"], plan.FULL)

    def diff(cfg, ref):     # in the keys the arm reads (SGD: none of LARS's own)
        unread = {k for k, (d, reads, _) in config_text.READ_ONLY_WITH.items()
                  if not reads(cfg[d.split(".")[0]][d.split(".")[1]])}
        return {f"{s}.{k}" for s in cfg for k in cfg[s]
                if cfg[s][k] != ref[s][k]} - {"optim.lr"} - unread

    techniques = {"no-lars": {"optim.name"}, "no-warmup": {"schedule.warmup_epochs"},
                  "no-label-smoothing": {"train.label_smoothing"},
                  "constant-wd": {"schedule.wd_schedule"},
                  "fixed-bn-momentum": {"model.bn_momentum_rule"},
                  "zero-gamma": {"model.zero_init_last_gamma"},
                  "augment-polish": {"data.pad_crop", "data.flip", "data.polish_epochs"},
                  "power-2": {"schedule.power"}}
    tuning = {"warmup-16": {"schedule.warmup_epochs"},
              "eta-0.0025": {"optim.eta"}, "momentum-0.96": {"optim.momentum"},
              "eta-0.0025-gamma-1": {"optim.eta", "model.zero_init_last_gamma"},
              "eta-0.01-gamma-1": {"optim.eta", "model.zero_init_last_gamma"},
              "eta-0.0025-gamma-1-warmup-2": {"optim.eta", "model.zero_init_last_gamma",
                                              "schedule.warmup_epochs"}}
    on_recipe = {"label-smoothing-0.2": {"train.label_smoothing"},
                 "label-smoothing-0.3": {"train.label_smoothing"},
                 "warmup-8": {"schedule.warmup_epochs"},
                 "label-smoothing-0.2-power-2": {"train.label_smoothing", "schedule.power"},
                 "label-smoothing-0.2-power-2-zero-gamma": {
                     "train.label_smoothing", "schedule.power", "model.zero_init_last_gamma"},
                 "augment-polish-8": {"data.pad_crop", "data.flip", "data.polish_epochs"},
                 "paper-tail": {"schedule.power", "schedule.end_lr"},
                 "label-smoothing-0.2-paper-tail": {
                     "train.label_smoothing", "schedule.power", "schedule.end_lr"},
                 "wd-5e-5": {"optim.wd"}, "lars-on-1d": {"optim.exclude_1d"},
                 "lars-and-wd-on-1d": {"optim.exclude_1d"},
                 "lars-on-1d-label-smoothing-0.2": {"optim.exclude_1d", "train.label_smoothing"},
                 "bn-batch-128": {"train.batch_per_rank", "train.accumulate"},
                 "precise-bn": {"train.bn_recalibrate_batches"},
                 "bn-batch-2048": {"train.batch_per_rank", "train.accumulate"},
                 "label-smoothing-0.2-warmup-8": {"train.label_smoothing",
                                                  "schedule.warmup_epochs"}}
    between = {"grid-between": set(),
               "label-smoothing-0.2-grid-between": {"train.label_smoothing"}}
    assert (set(techniques) | set(tuning) | set(on_recipe) | set(between) | {"paper-settings"}
            == {n for n in arms if n not in ("baseline", "lars-8k")})
    for name, keys in {**on_recipe, **between}.items():
        assert diff(_config(arms[name], plan.FULL), recipe) == keys, name
        assert arms[name].group == "tuning", name
    for name in on_recipe:
        assert arms[name].factors == plan.LARS_CS, name
    for name in between:
        # half a grid step off the recipe's: each point sqrt(2) times one of the recipe's
        assert all(math.isclose(b / a, math.sqrt(2))
                   for a, b in zip(plan.LARS_CS, arms[name].factors, strict=True)), name
    assert _config(arms["label-smoothing-0.2"], plan.FULL)["train"]["label_smoothing"] == 0.2
    assert _config(arms["label-smoothing-0.3"], plan.FULL)["train"]["label_smoothing"] == 0.3
    assert _config(arms["warmup-8"], plan.FULL)["schedule"]["warmup_epochs"] == 8
    for name, keys in techniques.items():
        assert diff(_config(arms[name], plan.FULL), recipe) == keys, name
        assert arms[name].factors == (plan.SGD_BASES if name == "no-lars" else plan.LARS_CS)
    for name, keys in tuning.items():
        assert diff(_config(arms[name], plan.FULL), paper) == keys, name
        assert arms[name].factors == plan.PAPER_LARS_CS, name
    # SGD's config holds none of LARS's keys: their defaults, and a constant WD (what MXNet's
    # SGD does whatever the WD schedule says)
    sgd = _config(arms["no-lars"], plan.FULL)
    assert (sgd["optim"]["eta"], sgd["schedule"]["wd_schedule"]) == (0.001, "constant")
    assert _config(arms["augment-polish"], plan.FULL)["data"]["polish_epochs"] == 2
    assert _config(arms["augment-polish-8"], plan.FULL)["data"]["polish_epochs"] == 8
    tail = _config(arms["paper-tail"], plan.FULL)["schedule"]
    # the paper's code: power 2.2 to end LR 0.0325 from LR 13; the same ratio at LR 8
    assert tail["power"] == 2.2 and math.isclose(tail["end_lr"] / 8, 0.0325 / 13)
    # the end LR stays below every LR the tail's grid can reach (the recipe's, and one below)
    assert tail["end_lr"] < min(plan.LARS_CS) / 2 * math.sqrt(plan.FULL.big / 4096)
    # the recipe is the paper's settings with eta 0.005 and the last gamma at 1
    assert diff(recipe, paper) == {"optim.eta", "model.zero_init_last_gamma"}
    assert (recipe["optim"]["eta"], paper["optim"]["eta"]) == (0.005, 0.001)
    assert (recipe["model"]["zero_init_last_gamma"], paper["model"]["zero_init_last_gamma"]) \
        == (False, True)
    # the combined tuning arm holds exactly the values of the two arms it combines
    both = _config(arms["eta-0.0025-gamma-1"], plan.FULL)
    assert both["optim"]["eta"] == _config(arms["eta-0.0025"], plan.FULL)["optim"]["eta"]
    assert both["model"]["zero_init_last_gamma"] == recipe["model"]["zero_init_last_gamma"]
    assert recipe["optim"]["eta"] == 2 * both["optim"]["eta"]
    assert _config(arms["eta-0.01-gamma-1"], plan.FULL)["optim"]["eta"] == 2 * recipe["optim"]["eta"]
    short = _config(arms["eta-0.0025-gamma-1-warmup-2"], plan.FULL)
    assert short["schedule"]["warmup_epochs"] == 2 and short["optim"] == both["optim"]


def test_lars_grids_are_ratio_2_around_lr_8_and_16_at_8k():
    """The recipe's grid at 8K is lr 4, 8, 16 and the paper settings' 8, 16, 32 (so every
    run the paper settings' searches trained keeps its cache key)."""
    a = plan.Arm("x", "x", 8192, "lars", plan.LARS_CS)
    assert [a.lr(f) for f in plan.LARS_CS] == [4.0, 8.0, 16.0]
    assert [a.lr(f) for f in plan.PAPER_LARS_CS] == [8.0, 16.0, 32.0]


def test_shared_arms_share_cache_keys():
    """The baseline and the recipe at 8K are the same runs in both benches."""
    h = {a.name: a for a in plan.headline_arms(plan.FULL)}
    ab = {a.name: a for a in plan.ablation_arms(plan.FULL)}
    for n in ("baseline", "lars-8k"):
        k1 = runcache.config_key(plan.overrides(plan.FULL, study.Run(h[n], 1.0, 0), "x"))
        k2 = runcache.config_key(plan.overrides(plan.FULL, study.Run(ab[n], 1.0, 0), "y"))
        assert k1 == k2
    a = h["baseline"]
    k0 = runcache.config_key(plan.overrides(plan.FULL, study.Run(a, 0.4, 0), "x"))
    assert k0 != runcache.config_key(plan.overrides(plan.FULL, study.Run(a, 0.4, 1), "x"))
    assert k0 != runcache.config_key(plan.overrides(plan.FULL, study.Run(a, 0.8, 0), "x"))


def test_select_names_unknown_arms():
    arms = plan.ablation_arms(plan.FULL)
    assert [a.name for a in plan.select(arms, ["no-warmup"])] == ["no-warmup"]
    with pytest.raises(UsageError, match="unknown arm.*nope"):
        plan.select(arms, ["nope"])


def _sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_cache_reads_only_entries_of_this_code(tmp_path):
    import yasgd.schedule as sched
    cache = runcache.RunCache(str(tmp_path))
    env = runcache.environment()
    good = {"code": {"yasgd.schedule": _sha(sched.__file__)}, "env": env, "result": {"x": 1}}
    cache.put("k1", good)
    assert cache.get("k1")["result"] == {"x": 1}
    cache.put("k2", dict(good, code={"yasgd.schedule": "0" * 64}))
    assert cache.get("k2") is None and "yasgd.schedule" in cache.why_stale(
        dict(good, code={"yasgd.schedule": "0" * 64}))
    cache.put("k3", dict(good, env=dict(env, mxnet="0.0")))
    assert cache.get("k3") is None
    cache.put("k4", dict(good, code={"yasgd.no_such_module": "0" * 64}))
    assert cache.get("k4") is None
    cache.put("k5", dict(good, code={}))
    assert cache.get("k5") is None
    assert cache.get("missing") is None
    (tmp_path / "k6.json").write_text("{not json")
    assert cache.get("k6") is None
    assert sorted(cache.stale_keys()) == ["k2", "k3", "k4", "k5", "k6"]
    assert not list(tmp_path.glob("*.tmp"))


def test_a_table_has_one_code_version_over_the_modules_its_runs_loaded(tmp_path):
    """An arm that loads one module more (precise BN loads yasgd.bn) is the same code: the
    table's version covers every module any run loaded, each with its one digest; two digests
    of a module, or two environments, are never one table, and the line names an entry of
    each side (an edited entry would otherwise stop every sitting without a name)."""
    from yasgd.bench.study_run import CodeChanged, Study
    env = runcache.environment()
    a, b, c = "1" * 64, "2" * 64, "3" * 64
    arm = _arm(batch=1024)          # a batch the quick scale's subset holds
    st = Study([arm], plan.QUICK, str(tmp_path))
    key = [st.run_of(arm, 1.0, i).key for i in range(2)]

    def searches(*runs):
        res = {(1.0, i): {"code": code, "env": e} for i, (code, e) in enumerate(runs)}
        return [study.Search(arm, [1.0], None, False, False, [], res)]
    two = st.code(searches(({"yasgd.train": a}, env),
                           ({"yasgd.train": a, "yasgd.bn": b}, env)))
    assert two == {"modules": {"yasgd.bn": b, "yasgd.train": a}, "env": env,
                   "version": runcache.code_version({"yasgd.bn": b, "yasgd.train": a}, env)}
    assert st.code(searches(({"yasgd.train": a, "yasgd.bn": b}, env))) == two
    named = f"{key[0]}.json and {key[1]}.json in the cache {st.cache.root}"
    with pytest.raises(CodeChanged, match=f"two versions of yasgd.train: {named}"):
        st.code(searches(({"yasgd.train": a}, env), ({"yasgd.train": c}, env)))
    with pytest.raises(CodeChanged, match=f"in 2 environments: {named}; the code changed"):
        st.code(searches(({"yasgd.train": a}, env),
                         ({"yasgd.train": a}, dict(env, mxnet="0.0"))))
    assert st.code([])["version"] is None


def test_loaded_code_hashes_the_sources_this_process_imported():
    import yasgd.schedule as sched
    code = runcache.loaded_code()
    assert code["yasgd.schedule"] == _sha(sched.__file__)
    assert all(m == "yasgd" or m.startswith("yasgd.") for m in code)


def test_points_are_signed_but_zero_is_not():
    from yasgd.bench.study_report import pts
    assert [pts(-0.001), pts(0.0), pts(1.234), pts(-0.5), pts(None)] == \
        ["0.00", "0.00", "+1.23", "-0.50", "n/a"]


def test_acceptance_line_strict_and_unknown_threshold():
    """``strict``: passing the line, not reaching it (the large-batch "more than the spread"
    lines); a line whose threshold is not known yet is not judged."""
    from yasgd.bench import common
    assert common.acceptance("x", 1.0, 1.0)["met"] is True
    assert common.acceptance("x", 1.0, 1.0, strict=True)["met"] is False
    assert common.acceptance("x", 1.001, 1.0, strict=True)["met"] is True
    assert common.acceptance("x", 0.5, 1.0, higher_is_better=False, strict=True)["met"] is True
    assert common.acceptance("x", 1.0, 1.0, higher_is_better=False, strict=True)["met"] is False
    line = common.acceptance("x", 2.0, None, strict=True)
    assert line["met"] is None and "| n/a |" in common.acceptance_table([line])


def test_recipe_text_reads_the_recipe(monkeypatch):
    """The reports describe the recipe from its overrides (a later override wins, as in
    yasgd.config.load)."""
    assert plan.recipe_text().startswith("LARS (eta 0.005, eps 1e-9, momentum 0.9, WD 5e-4")
    assert plan.recipe_text().endswith("BN gammas initialised to 1")
    monkeypatch.setattr(plan, "RECIPE", plan.RECIPE + plan.PAPER_SETTINGS)
    assert plan.recipe_text().startswith("LARS (eta 0.001,")
    assert plan.recipe_text().endswith("last BN gamma of each residual block initialised to 0")


def test_a_study_table_names_the_machines_its_runs_trained_on():
    from yasgd.bench import machine
    here = machine.machine_label()
    assert here.startswith(f"{machine.cpu_model()}, {machine.cores()} cores")
    records = [{"machine": "cpu A, 2 cores"}, {"machine": "cpu B, 8 cores"},
               {"machine": "cpu A, 2 cores"}, {}]
    on = machine.runs_on(records)
    assert on == [["cpu A, 2 cores", 2], ["cpu B, 8 cores", 1], ["not recorded", 1]]
    hw = machine.hardware({"runs_on": on})
    line = machine.hardware_line(hw)
    assert line.startswith("Runs trained on: cpu A, 2 cores (2 runs); cpu B, 8 cores (1 run); "
                           "not recorded (1 run). Table built on: " + here), line
    # without runs_on the line describes the one machine that measured the table
    assert machine.hardware_line(machine.hardware()).startswith("Hardware: " + here)


@pytest.mark.parametrize("cores,jobs", [(1, 1), (2, 2), (64, 2), (None, 1)])
def test_default_jobs_never_more_than_a_run_a_core(monkeypatch, cores, jobs):
    """Without --jobs, two runs side by side, but one on a 1-core host (where a typed
    ``--jobs 2`` is refused) and one where the core count is unknown."""
    from yasgd.bench import study_run
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    assert study_run.default_jobs() == jobs


def _ran(code, **fields):
    """What a worker's run returns (yasgd.bench.study_worker, with the wall time and threads
    that ``Study._train`` adds), with ``fields`` in place of its own."""
    return dict({"val_top1": 0.5, "test_top1": 0.5, "diverged": False, "error": None,
                 "curve": [{"epoch": 4, "val_top1": 0.5}], "wall_s": 1.0, "threads": 1,
                 "code": code, "env": runcache.environment()}, **fields)


def test_a_run_of_changed_code_stops_the_bench_instead_of_training_it_again(tmp_path,
                                                                              monkeypatch):
    """A pull or an edit while a bench runs: the run that ran the new code is kept in the
    cache, the bench stops with one line naming the module, and never trains it again (its
    entry is not of the code the bench started on, so it would be asked for forever)."""
    from yasgd.bench import study_run
    scale = plan.QUICK
    arm = plan.headline_arms(scale)[0]
    st = study_run.Study([arm], scale, str(tmp_path))
    assert st.code_at_start["yasgd.schedule"] == _sha(
        os.path.join(os.path.dirname(config_mod.__file__), "schedule.py"))
    assert st.code_at_start["yasgd.optim"] == _sha(
        os.path.join(os.path.dirname(config_mod.__file__), "optim", "__init__.py"))
    trained = []

    def train(run, threads, procs):     # what a worker records after the edit
        trained.append(run.key)
        code = dict(st.code_at_start, **{"yasgd.schedule": "0" * 64})
        return _ran(code)
    monkeypatch.setattr(st, "_train", train)
    with pytest.raises(study_run.CodeChanged, match=r"changed while the bench ran "
                                                     r"\(yasgd.schedule\)"):
        st.run(1, max_runs=5)       # bounded: without the stop it trains the run 5 times
    assert len(trained) == 1
    assert (tmp_path / "runs_cache" / f"{trained[0]}.json").exists()

    # the same result of unchanged code is simply the next run's
    trained.clear()
    st2 = study_run.Study([arm], scale, str(tmp_path / "b"))
    monkeypatch.setattr(st2, "_train", lambda run, threads, procs: (
        trained.append(run.key) or _ran(dict(st2.code_at_start))))
    st2.run(1, max_runs=2)
    assert len(trained) == 2


def test_the_docs_say_whether_the_tables_ran_this_checkouts_code(tmp_path):
    """The pages' code line applies the cache's own test to the code the tables recorded."""
    import yasgd.schedule as sched
    from yasgd.bench import report_study
    from yasgd.bench.report_util import Records
    env = runcache.environment()

    def line(modules, e=env):
        code = {"modules": modules, "env": e, "version": runcache.code_version(modules, e)}
        return report_study._code_line({"setup": {"code": code}}, Records(str(tmp_path)))
    assert line({"yasgd.schedule": _sha(sched.__file__)}) == [
        "Every run in these tables ran one code version: this checkout's training code."]
    stale = line({"yasgd.schedule": "0" * 64})
    assert len(stale) == 1 and stale[0].startswith(
        "Every run in these tables ran one code version, and this checkout's training code "
        "is not that code (changed since: yasgd.schedule): run again"), stale
    assert "environment" in line({"yasgd.schedule": _sha(sched.__file__)},
                                 dict(env, mxnet="0.0"))[0]
    assert report_study._code_line({"setup": {"code": {"modules": {}, "env": {},
                                                       "version": None}}},
                                   Records(str(tmp_path))) == []


def test_a_sitting_says_what_it_has_ahead_before_it_starts(tmp_path, monkeypatch):
    """The runs left (the plan's lower bound) and their hours at the mean wall time of the
    runs of this code in the cache; with none there, those in the repository's records;
    with none anywhere, no hours; nothing when the cache holds every run."""
    from yasgd.bench import study_run
    scale = plan.QUICK
    arm = plan.headline_arms(scale)[0]
    monkeypatch.setattr(study_run.common, "REPO_ROOT", str(tmp_path / "checkout"))
    st = study_run.Study([arm], scale, str(tmp_path / "a"))
    left = study.runs_left(st.searches())
    assert left > 2
    assert study_run.ahead_line(st, 2) == (f"at least {left} run(s) to train (no run of "
                                           "this code yet to time them by)")
    walls = iter([100.0, 300.0])
    monkeypatch.setattr(st, "_train", lambda run, threads, procs: _ran(
        dict(st.code_at_start), wall_s=next(walls)))
    st.run(1, max_runs=2)
    left = study.runs_left(st.searches())
    assert study_run.ahead_line(st, 2) == (
        f"at least {left} run(s) to train: about {left * 200 / 2 / 3600:.1f} h with 2 side "
        "by side, at the 200 s a run of the 2 run(s) of this code in its cache")
    # a new cache of a checkout whose records hold those runs: their times
    records = tmp_path / "checkout" / "examples" / "results"
    records.mkdir(parents=True)
    (tmp_path / "a" / "runs_cache").rename(records / "runs_cache")
    fresh = study_run.Study([arm], scale, str(tmp_path / "b"))
    assert study_run.ahead_line(fresh, 1).endswith(
        "at the 200 s a run of the 2 run(s) of this code in the repository's records")
    # every run in the cache: nothing ahead
    done = study_run.Study([arm], scale, str(tmp_path / "c"), str(records / "runs_cache"))
    monkeypatch.setattr(done, "_train", lambda run, threads, procs: _ran(
        dict(done.code_at_start)))
    done.run(1)
    assert study_run.ahead_line(done, 1) is None
