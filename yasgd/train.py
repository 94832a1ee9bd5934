"""fit(): the training loop, read top to bottom.

    loader (sharded by rank) -> model -> smoothed loss -> backward
      -> allreduce layer (static groups, overlapped with backward)
      -> LARS (batched norms; schedule gives lr/wd for this step) -> next step

Sync points (``.asnumpy()``, allreduce of metrics) happen only at log
intervals, at evaluation and at checkpoints; each is marked ``# SYNC``.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Dict, Optional

import numpy as np

from yasgd import UsageError
from yasgd import config as config_mod


class TrainingError(RuntimeError):
    """The run cannot go on (non-finite loss, ...)."""


@dataclass
class Setup:
    cfg: Any
    world: Any
    ctx: Any
    net: Any
    trainer: Any
    loss_fn: Any
    train_loader: Any
    val_loader: Any
    per_rank: int
    steps_per_epoch: int
    run_dir: Optional[str]
    log: Any


# -- start-up ----------------------------------------------------------------------
def prepare_run_dir(cfg, world) -> Optional[str]:
    """Rank 0 creates the run directory and checks it is writable; all ranks learn
    its path or the error (so that no rank waits for a rank that failed)."""
    if not cfg.run.dir:
        return None
    result = None
    if world.is_root:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = os.path.abspath(os.path.join(cfg.run.dir, f"{cfg.run.name}-{stamp}"))
        try:
            os.makedirs(path, exist_ok=True)
            probe = os.path.join(path, ".write-test")
            with open(probe, "w") as f:
                f.write("ok")
            os.remove(probe)
            result = ("ok", path)
        except OSError as e:
            result = ("error", f"run directory {path} is not writable: {e.strerror or e}")
    result = world.broadcast_object(result, name="yasgd.run_dir")
    if result[0] == "error":
        raise UsageError(result[1])
    return result[1]


def build(cfg, world) -> Setup:
    import mxnet as mx
    from yasgd import allreduce, data, init, model, optim, params, schedule
    from yasgd.logging import RunLog
    from yasgd.loss import LabelSmoothingCE

    per_rank = config_mod.per_rank_batch(cfg, world.size)
    from yasgd import ops
    ops.backend()   # load the operator library before the engine runs anything
    run_dir = prepare_run_dir(cfg, world)
    ctx = world.context()
    train_loader, val_loader = data.build_loaders(cfg, world.rank, world.size, per_rank, ctx)
    steps_per_epoch = len(train_loader) // cfg.train.accumulate
    if steps_per_epoch == 0:
        raise UsageError(f"one epoch holds {len(train_loader)} micro-batches per rank, fewer than "
                         f"train.accumulate={cfg.train.accumulate}")
    # Batch norm: momentum fixed, or from the number of iterations per epoch.
    bn_m = cfg.model.bn_momentum
    if cfg.model.bn_momentum_rule == "iterations":
        bn_m = model.bn_momentum_for(steps_per_epoch)
    net = model.from_config(cfg.model, in_channels=getattr(train_loader, "channels", 3),
                            bn_momentum=bn_m)
    # Parallel initialization: same seed everywhere, agreement checked once.
    init.parallel_initialize(net, cfg.run.seed, ctx=ctx, broadcast=cfg.comm.init == "broadcast",
                             check=cfg.comm.check_init, world=world)
    if cfg.model.dtype == "float16":
        net.cast("float16")
    if cfg.train.hybridize:
        net.hybridize(static_alloc=True, static_shape=True)
    lars, plain = params.split_by_structure(net.collect_params().values())
    for p in plain:
        p.wd_mult = 0.0   # no weight decay on ndim <= 1 (BN, bias), by structure
    if cfg.train.accumulate > 1:
        for p in lars + plain:
            p.grad_req = "add"
    lr_s, wd_s = schedule.from_config(cfg.optim, cfg.schedule, steps_per_epoch, cfg.train.epochs)
    opt = optim.from_config(cfg.optim, lr_s, wd_s)
    pdict = net.collect_params()
    if cfg.comm.trainer == "horovod" and world.size > 1:
        trainer = allreduce.horovod_trainer(pdict, opt)
    else:
        trainer = allreduce.DistributedTrainer(
            pdict, opt, compression="fp16" if cfg.comm.fp16_compression else "none",
            num_groups=cfg.comm.num_groups, group_budget_bytes=cfg.comm.group_budget_bytes)
    log = RunLog(os.path.join(run_dir, "metrics.jsonl") if run_dir else None,
                 world.is_root, cfg.train.progress)
    return Setup(cfg, world, ctx, net, trainer, LabelSmoothingCE(cfg.train.label_smoothing),
                 train_loader, val_loader, per_rank, steps_per_epoch, run_dir, log)


# -- one epoch -----------------------------------------------------------------------
def train_epoch(s: Setup, epoch: int, step: int) -> Dict[str, float]:
    import mxnet as mx
    from mxnet import autograd
    cfg, k = s.cfg, s.cfg.train.accumulate
    polish = epoch >= cfg.train.epochs - cfg.data.polish_epochs
    s.train_loader.set_epoch(epoch, polish=polish)
    loss_sum = mx.nd.zeros((1,), ctx=s.ctx, dtype="float64")
    correct = mx.nd.zeros((1,), ctx=s.ctx, dtype="float64")
    seen, window_t, window_steps, last = 0, time.time(), 0, {}
    s.log.bar_start(s.steps_per_epoch, f"epoch {epoch + 1}/{cfg.train.epochs}")
    batches = iter(s.train_loader)
    for i in range(s.steps_per_epoch):
        for _ in range(k):
            x, y = next(batches)
            if cfg.model.dtype == "float16":
                x = x.astype("float16")
            # forward + smoothed loss, then backward (queued, not waited for)
            with autograd.record():
                out = s.net(x)
                loss = s.loss_fn(out, y)
            loss.backward()
            loss_sum += loss.sum().astype("float64")
            correct += (out.argmax(axis=1) == y.astype(out.dtype)).sum().astype("float64")
            seen += x.shape[0]
        # allreduce (grouped, overlapping backward) + LARS update
        s.trainer.step(s.per_rank * k)
        if k > 1:
            for p in s.net.collect_params().values():
                if p.grad_req == "add":
                    p.zero_grad()
        step += 1
        window_steps += 1
        if step % cfg.train.log_interval == 0 or i == s.steps_per_epoch - 1:
            last = _log_train(s, epoch, step, loss_sum, correct, seen, window_t, window_steps)
            window_t, window_steps = time.time(), 0
        s.log.bar_update(1, **({"loss": f"{last['loss']:.3f}"} if last else {}))
        if cfg.train.max_steps and step >= cfg.train.max_steps:
            break
    s.log.bar_close()
    last["step"] = step
    return last


def _log_train(s: Setup, epoch, step, loss_sum, correct, seen, window_t, window_steps):
    # SYNC: metrics reduced across ranks at log intervals only.
    local = np.concatenate([loss_sum.asnumpy(), correct.asnumpy(), [float(seen)]])
    tot = s.world.allreduce_sum(local, name=f"yasgd.metrics.{step}")
    loss, acc = tot[0] / tot[2], tot[1] / tot[2]
    if not np.isfinite(loss):
        raise TrainingError(f"non-finite training loss ({loss}) at step {step} (epoch {epoch + 1}); "
                            f"lower optim.lr or check the data")
    dt = max(time.time() - window_t, 1e-9)
    ips = window_steps * s.cfg.train.global_batch / dt
    opt = s.trainer._optimizer
    lr = opt.lr_scheduler(opt.num_update) if opt.lr_scheduler is not None else opt.learning_rate
    rec = {"epoch": epoch + 1, "step": step, "loss": float(loss), "train_acc": float(acc),
           "lr": float(lr), "img_per_s": float(ips)}
    s.log.event("train", **rec)
    return rec


# -- evaluation ----------------------------------------------------------------------
def evaluate(s: Setup) -> float:
    """Top-1 accuracy on the validation set, every rank its shard, summed over ranks."""
    import mxnet as mx
    correct = mx.nd.zeros((1,), ctx=s.ctx, dtype="float64")
    count = 0
    s.val_loader.set_epoch(0)
    for x, y in s.val_loader:
        if s.cfg.model.dtype == "float16":
            x = x.astype("float16")
        out = s.net(x)
        correct += (out.argmax(axis=1) == y.astype(out.dtype)).sum().astype("float64")
        count += x.shape[0]
    tot = s.world.allreduce_sum([correct.asscalar(), float(count)], name="yasgd.eval")  # SYNC
    return float(tot[0] / tot[1])


def should_evaluate(cfg, epoch: int) -> bool:
    t = cfg.train
    last = epoch == t.epochs - 1
    return last or (epoch + 1 - t.eval_offset) % t.eval_every == 0 and epoch + 1 > t.eval_offset


# -- the run -------------------------------------------------------------------------
def fit(s: Setup) -> Dict[str, Any]:
    cfg, log = s.cfg, s.log
    if s.run_dir and s.world.is_root:
        cfg.dump(os.path.join(s.run_dir, "config.yaml"))
        from yasgd import provenance
        provenance.write(s.run_dir, world_size=s.world.size)
    log.say(f"yasgd: {cfg.model.name} on {cfg.data.kind}, {s.world.size} rank(s) x "
            f"{s.per_rank} x {cfg.train.accumulate} = global batch {cfg.train.global_batch}, "
            f"{s.steps_per_epoch} steps/epoch, {cfg.train.epochs} epochs, optimizer {cfg.optim.name}")
    log.event("start", world_size=s.world.size, per_rank_batch=s.per_rank,
              steps_per_epoch=s.steps_per_epoch, run_dir=s.run_dir)
    t0, step, acc, reached = time.time(), 0, None, None
    for epoch in range(cfg.train.epochs):
        te = time.time()
        last = train_epoch(s, epoch, step)
        step = last["step"]
        line = (f"epoch {epoch + 1:3d}/{cfg.train.epochs}  loss {last['loss']:.4f}  "
                f"train-acc {last['train_acc']:.4f}  lr {last['lr']:.4g}  {time.time() - te:.1f}s")
        if should_evaluate(cfg, epoch):
            acc = evaluate(s)
            log.event("eval", epoch=epoch + 1, step=step, top1=acc)
            line += f"  test-acc {acc:.4f}"
            if cfg.train.target_accuracy and acc >= cfg.train.target_accuracy and reached is None:
                reached = {"epoch": epoch + 1, "seconds": time.time() - t0}
        log.say(line)
        if reached or (cfg.train.max_steps and step >= cfg.train.max_steps):
            break
    if acc is None:
        acc = evaluate(s)
    result = {"test_accuracy": acc, "epochs": epoch + 1, "steps": step,
              "seconds": time.time() - t0, "run_dir": s.run_dir, "target_reached": reached}
    if s.run_dir and s.world.is_root:
        s.net.save_parameters(os.path.join(s.run_dir, "final.params"))
    log.event("end", **result)
    log.say(f"final test accuracy: {acc:.4f} ({acc * 100:.2f} %) after {epoch + 1} epochs, "
            f"{result['seconds']:.1f} s")
    if s.run_dir:
        log.say(f"run directory: {s.run_dir}")
    log.close()
    return result


def run_from_config(cfg) -> Dict[str, Any]:
    """Validate everything that can be validated before any work, then train."""
    from yasgd import data, dist
    config_mod.per_rank_batch(cfg, dist.env_world_size())   # before Horovod starts
    data.check_data(cfg)
    world = dist.world()
    return fit(build(cfg, world))
