"""The worker processes of ``yasgd bench largebatch``: one training run of the grid, or the
calibration of this machine's speed. Both run ``yasgd.train`` itself (``build`` then ``fit``,
or ``train_epoch``), so every step is ``yasgd.step.train_step``; what a result states about
its run (BN momentum, per-rank batch, steps) is read from the run's objects.
"""
from __future__ import annotations

import json
import os
import time
from typing import Dict

from yasgd.bench import common, runs
from yasgd.bench.largebatch_plan import MICRO


def worker_train(spec_path: str, result_path: str) -> None:
    """Train one grid point in this process; write its result (diverged runs included)."""
    from yasgd import config as config_mod, data, dist, train
    spec = common.read_json(spec_path)
    cfg = config_mod.load(None, spec["overrides"])
    data.check_data(cfg)
    world = dist.world()
    t0 = time.time()
    setup = train.build(cfg, world)
    built = time.time()
    diverged, error, res = False, None, {}
    try:
        res = train.fit(setup)
    except train.TrainingError as e:
        diverged, error = True, str(e)
        setup.log.say(f"diverged: {e}")
        setup.log.close()
    epochs, train_last = [], {}
    if setup.run_dir:
        with open(os.path.join(setup.run_dir, "metrics.jsonl")) as f:
            for line in f:
                ev = json.loads(line)
                if ev.get("event") == "eval":
                    epochs.append({"epoch": ev["epoch"], "top1": ev["top1"], "time": ev["time"]})
                elif ev.get("event") == "train":
                    train_last[ev["epoch"]] = {k: ev[k] for k in ("loss", "train_acc", "lr")}
    for e in epochs:
        e.update(train_last.get(e["epoch"], {}))
    # what the run held, read from its objects: the BN momentum its BatchNorm layers used
    # (the iterations rule counts micro-batches, the BN updates, not optimizer steps)
    common.write_json(result_path, {
        "final_top1": None if diverged else res["test_accuracy"], "diverged": diverged,
        "error": error, "epochs": epochs, "steps": res.get("steps"),
        "steps_per_epoch": setup.steps_per_epoch, "per_rank": setup.per_rank,
        "micro_batches_per_epoch": len(setup.train_loader),
        "bn_momentum": runs.bn_momentum(setup.net), "train_steps": setup.steps_run,
        "build_s": round(built - t0, 2),
        "fit_s": round(res.get("seconds", time.time() - built), 2), "run_dir": setup.run_dir,
    })


def worker_calibrate(width: int, model_name: str, result_path: str, started: float,
                     stem_stride: int = 2, steps: int = 6) -> None:
    """Images/s of training at micro-batch 512 and seconds per evaluation of the 10,000
    test images, with yasgd.train's own epoch loop, in this process now. (Per image,
    micro-batches of 256 and 512 cost the same here within the noise; the baseline's 256
    is estimated at the 512 rate.)"""
    import mxnet as mx
    from yasgd import config as config_mod, dist, train
    out: Dict[str, object] = {"train_img_s": {}}
    world = dist.world()
    for micro, n in ((MICRO, steps),):
        cfg = config_mod.load(None, [
            f"model.name={model_name}", f"model.width={width}", "run.dir=",
            f"model.stem_stride={stem_stride}",
            f"data.limit={micro * (n + 1)}", f"train.global_batch={micro}",
            "train.epochs=1", "train.progress=false", "train.keep_checkpoints=0", "mlperf.enabled=false", "train.log_interval=1000000",
            "optim.name=lars", "optim.lr=1.0", "schedule.warmup_epochs=0.5"])
        s = train.build(cfg, world)
        if "startup_s" not in out:
            out["startup_s"] = round(time.time() - started, 2)
        s.cfg.train.max_steps = 1
        train.train_epoch(s, 0, 0)          # warm-up step (allocations, first-call costs)
        mx.nd.waitall()
        s.cfg.train.max_steps = n + 1
        t, c = time.perf_counter(), os.times()
        train.train_epoch(s, 0, 1)           # n timed steps
        mx.nd.waitall()
        dt, c1 = time.perf_counter() - t, os.times()
        out["train_img_s"][str(micro)] = n * micro / dt
        out["train_steps"] = s.steps_run     # every one through yasgd.step.train_step
        # the share of the 2 cores this process got (the machine is shared): CPU seconds
        # of all its threads over wall seconds x threads
        threads = int(os.environ.get("OMP_NUM_THREADS", "1"))
        out["cpu_share"] = round(min(1.0, ((c1.user - c.user) + (c1.system - c.system))
                                     / (dt * threads)), 3)
        if micro == MICRO:
            t = time.perf_counter()
            train.evaluate(s)
            out["eval_s"] = time.perf_counter() - t
        s.log.close()
    common.write_json(result_path, out)
