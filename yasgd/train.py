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
from typing import Any, Dict, Optional, Tuple

import numpy as np

from yasgd import UsageError, checkpoint, faults, mlperf, resume
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
    resume_from: Optional[str] = None   # checkpoint to continue from (yasgd.checkpoint)


# -- start-up ----------------------------------------------------------------------
def prepare_run_dir(cfg, world) -> Tuple[Optional[str], Optional[str]]:
    """Rank 0 picks the checkpoint to resume from (run.resume), creates the run
    directory (a resumed run continues in its checkpoint's) and checks it is
    writable; all ranks learn (run_dir, checkpoint) or the error (so that no rank
    waits for a rank that failed)."""
    if not cfg.run.dir:
        return None, None
    result = None
    if world.is_root:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = os.path.abspath(os.path.join(cfg.run.dir, f"{cfg.run.name}-{stamp}"))
        try:
            ckpt = checkpoint.find_resume(cfg)
            path = os.path.dirname(ckpt) if ckpt else path
            os.makedirs(path, exist_ok=True)
            probe = os.path.join(path, ".write-test")
            with open(probe, "w") as f:
                f.write("ok")
            os.remove(probe)
            result = ("ok", path, ckpt)
        except OSError as e:
            result = ("error", f"run directory {path} is not writable: {e.strerror or e}")
        except UsageError as e:
            result = ("error", str(e))
    result = world.broadcast_object(result, name="yasgd.run_dir")
    if result[0] == "error":
        raise UsageError(result[1])
    return result[1], result[2]


def build(cfg, world) -> Setup:
    import mxnet as mx
    from yasgd import allreduce, data, init, model, optim, params, schedule
    from yasgd.logging import RunLog
    from yasgd.loss import LabelSmoothingCE

    per_rank = config_mod.per_rank_batch(cfg, world.size)
    from yasgd import ops
    ops.backend()   # load the operator library before the engine runs anything
    run_dir, resume_from = prepare_run_dir(cfg, world)
    ctx = world.context()
    train_loader, val_loader = data.build_loaders(cfg, world.rank, world.size, per_rank, ctx)
    steps_per_epoch = len(train_loader) // cfg.train.accumulate
    if steps_per_epoch == 0:
        raise UsageError(f"one epoch holds {len(train_loader)} micro-batches per rank, fewer than "
                         f"train.accumulate={cfg.train.accumulate}")
    # Batch norm: momentum fixed, or from the number of iterations per epoch.
    bn_m = cfg.model.bn_momentum
    if cfg.model.bn_momentum_rule == "iterations":
        bn_m = model.bn_momentum_for(len(train_loader))   # BN updates once per micro-batch
    net = model.from_config(cfg.model, in_channels=getattr(train_loader, "channels", 3),
                            bn_momentum=bn_m)
    # Parallel initialization: same seed everywhere, agreement checked once.
    init.parallel_initialize(net, cfg.run.seed, ctx=ctx, broadcast=cfg.comm.init == "broadcast",
                             check=cfg.comm.check_init, world=world)
    if cfg.model.dtype == "float16":
        net.cast("float16")
    if config_mod.hybridize(cfg):
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
                 train_loader, val_loader, per_rank, steps_per_epoch, run_dir, log, resume_from)


# -- one epoch -----------------------------------------------------------------------
def train_epoch(s: Setup, epoch: int, step: int, skip: int = 0) -> Dict[str, float]:
    """One epoch from its step ``skip`` (> 0: resuming mid-epoch); ``step``: steps done."""
    import mxnet as mx
    from mxnet import autograd
    cfg, k = s.cfg, s.cfg.train.accumulate
    polish = epoch >= cfg.train.epochs - cfg.data.polish_epochs
    s.train_loader.set_epoch(epoch, polish=polish)
    loss_sum = mx.nd.zeros((1,), ctx=s.ctx, dtype="float64")
    correct = mx.nd.zeros((1,), ctx=s.ctx, dtype="float64")
    bad = mx.nd.zeros((1,), ctx=s.ctx, dtype="float64")   # steps since the loss became non-finite
    seen, window_t, window_steps, last = 0, time.time(), 0, {}
    s.log.bar_start(s.steps_per_epoch, f"epoch {epoch + 1}/{cfg.train.epochs}")
    batches = iter(s.train_loader)
    for _ in range(skip * k):   # resuming mid-epoch: replay this epoch's data order up to there
        next(batches)
    for i in range(skip, s.steps_per_epoch):
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
        bad += 1 - mx.nd.contrib.isfinite(loss_sum)   # on the device, no sync (yasgd.faults)
        if step % cfg.train.log_interval == 0 or i == s.steps_per_epoch - 1:
            last = _log_train(s, epoch, step, loss_sum, correct, seen, window_t, window_steps, bad)
            window_t, window_steps = time.time(), 0
        s.log.bar_update(1, **({"loss": f"{last['loss']:.3f}"} if last else {}))
        if cfg.train.max_steps and step >= cfg.train.max_steps:
            break
    s.log.bar_close()
    last["step"] = step
    return last


def _log_train(s: Setup, epoch, step, loss_sum, correct, seen, window_t, window_steps, bad):
    # SYNC: metrics, the non-finite count and the SIGTERM flag reduced across ranks
    # at log intervals only.
    local = np.concatenate([loss_sum.asnumpy(), correct.asnumpy(), [float(seen)], bad.asnumpy(),
                            [faults.stop_flag()]])
    tot = s.world.allreduce_sum(local, name=f"yasgd.metrics.{step}")
    loss, acc = tot[0] / tot[2], tot[1] / tot[2]
    if not np.isfinite(loss):
        first = faults.first_nonfinite_step(s.world, step, float(local[3]))
        where = f"first at step {first}" if first else f"at step {step}"
        raise TrainingError(f"non-finite training loss ({loss}) {where} (epoch {epoch + 1}, checked "
                            f"at step {step}); lower optim.lr or check the data")
    dt = max(time.time() - window_t, 1e-9)
    ips = window_steps * s.cfg.train.global_batch / dt
    opt = s.trainer._optimizer
    lr = opt.lr_scheduler(opt.num_update) if opt.lr_scheduler is not None else opt.learning_rate
    rec = {"epoch": epoch + 1, "step": step, "loss": float(loss), "train_acc": float(acc),
           "lr": float(lr), "img_per_s": float(ips)}
    s.log.event("train", **rec)
    if tot[4] > 0:
        raise faults.StopRequested(step, epoch)
    return rec


# -- evaluation ----------------------------------------------------------------------
def evaluate(s: Setup) -> float:
    """Top-1 accuracy on the validation set, every rank its shard, summed over ranks."""
    import mxnet as mx
    if s.cfg.train.bn_recalibrate_batches:
        from yasgd import bn
        bn.recalibrate(s.net, s.train_loader, s.cfg.train.bn_recalibrate_batches, s.world,
                       dtype=s.cfg.model.dtype)
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
    ml = mlperf.MLPerfLog.for_run(s, lambda e: should_evaluate(cfg, e))   # rank 0: mlperf.log
    # Resume: parameters, optimizer state and counters of the chosen checkpoint, every rank.
    start_epoch, step, elapsed = resume.restore(s)
    faults.install_sigterm_handler()   # SIGTERM: checkpoint at the next log interval, then exit
    ml.run_start()
    t0, acc, reached, epoch = time.time() - elapsed, None, None, start_epoch - 1
    for epoch in range(start_epoch, cfg.train.epochs):
        te = time.time()
        ml.epoch_start(epoch)
        try:
            last = train_epoch(s, epoch, step, skip=step - epoch * s.steps_per_epoch)
        except faults.StopRequested as stop:   # some rank got SIGTERM: every rank stops here
            path = checkpoint.save(s, stop.step, time.time() - t0)
            log.event("terminated", signal="SIGTERM", step=stop.step, checkpoint=path)
            log.close()
            raise faults.Terminated(f"stopped by SIGTERM at step {stop.step} (epoch {epoch + 1}); "
                                    f"checkpoint {path}; continue with run.resume=auto", path)
        step = last["step"]
        ml.epoch_stop(epoch)
        line = (f"epoch {epoch + 1:3d}/{cfg.train.epochs}  loss {last['loss']:.4f}  "
                f"train-acc {last['train_acc']:.4f}  lr {last['lr']:.4g}  {time.time() - te:.1f}s")
        if should_evaluate(cfg, epoch):
            ml.eval_start(epoch)
            acc = evaluate(s)
            ml.eval_stop(epoch, acc)
            log.event("eval", epoch=epoch + 1, step=step, top1=acc)
            line += f"  test-acc {acc:.4f}"
            if cfg.train.target_accuracy and acc >= cfg.train.target_accuracy and reached is None:
                reached = {"epoch": epoch + 1, "seconds": time.time() - t0}
        log.say(line)
        if checkpoint.due(cfg, epoch):
            checkpoint.save(s, step, time.time() - t0)
        if reached or (cfg.train.max_steps and step >= cfg.train.max_steps):
            break
    if acc is None:
        ml.eval_start(max(epoch, 0))
        acc = evaluate(s)
        ml.eval_stop(max(epoch, 0), acc)
    checkpoint.save(s, step, time.time() - t0)   # at the end (kept if already written)
    result = {"test_accuracy": acc, "epochs": epoch + 1, "steps": step,
              "seconds": time.time() - t0, "run_dir": s.run_dir, "target_reached": reached,
              "epochs_to_accuracy": reached and reached["epoch"],
              "time_to_accuracy_s": reached and reached["seconds"]}
    if s.run_dir and s.world.is_root:
        s.net.save_parameters(os.path.join(s.run_dir, "final.params"))
    ml.run_stop(bool(reached) or (not cfg.train.target_accuracy and epoch + 1 == cfg.train.epochs),
                epoch + 1)
    log.event("end", **result)
    if reached:
        log.say(f"target top-1 {cfg.train.target_accuracy} reached after {reached['epoch']} epochs, "
                f"{reached['seconds']:.1f} s")
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
