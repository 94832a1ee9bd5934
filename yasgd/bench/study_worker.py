"""One training run of a study (``bench largebatch``, ``bench ablation``), in its own process:
``yasgd.config.load(None, overrides)`` -> ``yasgd.train.build`` -> ``yasgd.train.fit``,
evaluated during training on the validation split (``data.eval_set=holdout``: the training
images the run does not train on) and, once at the end, on the test set with the same
``yasgd.train.evaluate``. The result also records the code version it ran (the sources of
every yasgd module this process imported) for the cache.

``python -m yasgd.bench.study_worker --worker --spec SPEC.json --result RESULT.json``
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import List, Optional


def train_run(overrides: List[str]) -> dict:
    import copy
    from yasgd import config as config_mod, data, dist, train
    from yasgd.bench import runcache, runs
    cfg = config_mod.load(None, overrides)
    data.check_data(cfg)
    world = dist.world()
    t0 = time.time()
    setup = train.build(cfg, world)
    diverged, error, res = False, None, {}
    try:
        res = train.fit(setup)
    except train.TrainingError as e:
        diverged, error = True, str(e)
        setup.log.say(f"diverged: {e}")
        setup.log.close()
    fit_s = time.time() - t0
    curve, train_last = [], {}
    if setup.run_dir:
        with open(os.path.join(setup.run_dir, "metrics.jsonl")) as f:
            for line in f:
                ev = json.loads(line)
                if ev.get("event") == "eval":
                    curve.append({"epoch": ev["epoch"], "val_top1": ev["top1"]})
                elif ev.get("event") == "train":
                    train_last[ev["epoch"]] = {k: ev[k] for k in ("loss", "train_acc", "lr")}
    for e in curve:
        e.update(train_last.get(e["epoch"], {}))
    test = None
    if not diverged:
        # the test set, read once, by the same evaluation on the trained network
        tcfg = copy.deepcopy(cfg)
        tcfg.data.eval_set = "test"
        setup.val_loader = data.build_loaders(tcfg, world.rank, world.size, setup.per_rank,
                                              setup.ctx)[1]
        test = train.evaluate(setup)
    env = runcache.environment()
    code = runcache.loaded_code()
    return {
        "val_top1": None if diverged else res["test_accuracy"], "test_top1": test,
        "diverged": diverged, "error": error, "curve": curve, "steps": res.get("steps"),
        "steps_per_epoch": setup.steps_per_epoch, "per_rank": setup.per_rank,
        "accumulate": cfg.train.accumulate, "micro_batches_per_epoch": len(setup.train_loader),
        "bn_momentum": runs.bn_momentum(setup.net), "train_steps": setup.steps_run,
        "fit_s": round(fit_s, 1), "code": code, "env": env,
        "code_version": runcache.code_version(code, env),
    }


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m yasgd.bench.study_worker")
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--spec", required=True)
    ap.add_argument("--result", required=True)
    a = ap.parse_args(argv)
    with open(a.spec) as f:
        spec = json.load(f)
    out = train_run(spec["overrides"])
    tmp = a.result + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f)
    os.replace(tmp, a.result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
