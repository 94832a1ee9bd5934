"""fit(): the training loop, read top to bottom.

    loader (sharded by rank) -> model -> smoothed loss -> backward
      -> allreduce layer (static groups, overlapped with backward)
      -> LARS (batched norms; schedule gives lr/wd for this step) -> next step

One optimizer step is ``yasgd.step.train_step`` (the function the benchmarks time
too); the epoch's metrics live on the device in a ``yasgd.meter.TrainMeter``. Sync
points (``.asnumpy()``, allreduce of metrics) happen only at log intervals, at
evaluation and at checkpoints; each is marked ``# SYNC``.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple, Union

from yasgd import UsageError, checkpoint, faults, loss_scale, mlperf, resume
from yasgd import config as config_mod
from yasgd.loss_scale import LossScaler
from yasgd.meter import TrainingError, TrainMeter  # noqa: F401 (TrainingError: callers use train.)
from yasgd.step import train_step
from yasgd.watchdog import Watchdog

if TYPE_CHECKING:   # annotations only: importing this module must not import MXNet
    import mxnet as mx
    from mxnet import gluon
    from yasgd.config import Config
    from yasgd.data import Loader
    from yasgd.dist import World
    from yasgd.logging import RunLog
    from yasgd.model import ResNet
    from yasgd.resume import ResumePlan


@dataclass
class Setup:
    """Everything one training run holds, made by :func:`build`."""
    cfg: Config
    world: World
    ctx: mx.Context
    net: ResNet
    trainer: gluon.Trainer              # allreduce.DistributedTrainer or Horovod's own
    loss_fn: gluon.loss.Loss
    train_loader: Loader
    val_loader: Loader
    per_rank: int                       # micro-batch of each rank
    steps_per_epoch: int                # optimizer steps (micro-batches // train.accumulate)
    run_dir: Optional[str]
    log: RunLog
    # checkpoints to continue from (yasgd.resume: a plan, or one checkpoint's path)
    resume_from: Union[ResumePlan, str, None] = None
    # progress watch (yasgd.watchdog); the default one is off (library callers, benchmarks)
    watchdog: Watchdog = field(default_factory=lambda: Watchdog(0))
    stop: Optional[faults.StopPoll] = None   # per-step signal poll (yasgd.faults), set by fit
    steps_run: int = 0                  # optimizer steps yasgd.step.train_step took on this run
    scaler: Optional[LossScaler] = None  # train.loss_scale (yasgd.loss_scale); None: no scaling


# -- start-up ----------------------------------------------------------------------
def prepare_run_dir(cfg, world) -> Tuple[Optional[str], Optional["resume.ResumePlan"]]:
    """Rank 0 turns run.resume into a plan (the checkpoints to try, newest first,
    verified file by file: yasgd.resume.find_resume), creates the run directory (a
    resumed run continues in its checkpoints' directory) and checks it is writable;
    all ranks learn (run_dir, plan) or the error (so that no rank waits for a rank
    that failed). Loading, and falling back past a checkpoint that does not load,
    happen in yasgd.resume.restore once the network exists."""
    if not cfg.run.dir:
        return None, None
    result = None
    if world.is_root:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = os.path.abspath(os.path.join(cfg.run.dir, f"{cfg.run.name}-{stamp}"))
        try:
            plan = resume.find_resume(cfg)
            path = plan.run_dir if plan else path
            os.makedirs(path, exist_ok=True)
            probe = os.path.join(path, ".write-test")
            with open(probe, "w") as f:
                f.write("ok")
            os.remove(probe)
            result = ("ok", path, plan)
        except OSError as e:
            result = ("error", f"run directory {path} is not writable: {e.strerror or e}")
        except UsageError as e:
            result = ("error", str(e))
    result = world.broadcast_object(result, name="yasgd.run_dir")
    if result[0] == "error":
        raise UsageError(result[1])
    return result[1], result[2]


def build(cfg, world) -> Setup:
    from yasgd import allreduce, data, init, model, optim, params, schedule
    from yasgd.logging import RunLog
    from yasgd.loss import LabelSmoothingCE

    per_rank = config_mod.per_rank_batch(cfg, world.size)
    from yasgd import ops
    ops.backend()   # load the operator library before the engine runs anything
    ctx = world.context()
    device = "gpu" if ctx.device_type == "gpu" else "cpu"
    config_mod.check_device(cfg, device)
    run_dir, resume_from = prepare_run_dir(cfg, world)
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
                            bn_momentum=bn_m, fused_bn_relu=config_mod.fused_bn_relu(cfg, device))
    # Parallel initialization: same seed everywhere, agreement checked once.
    init.parallel_initialize(net, cfg.run.seed, ctx=ctx, broadcast=cfg.comm.init == "broadcast",
                             check=cfg.comm.check_init, world=world)
    if cfg.model.dtype == "float16":
        net.cast("float16")
    if config_mod.hybridize(cfg):
        net.hybridize(static_alloc=True, static_shape=True)
    lars, plain = params.split_by_structure(net.collect_params().values())
    for p in plain:
        if not params.gets_wd(tuple(p.shape), cfg.optim.exclude_1d):
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
            gradient_predivide_factor=cfg.comm.gradient_predivide_factor,
            num_groups=cfg.comm.num_groups, group_budget_bytes=cfg.comm.group_budget_bytes)
    if world.is_root and world.size > 1 and isinstance(trainer, allreduce.DistributedTrainer):
        from yasgd.preflight import fusion_guard
        problem = fusion_guard(trainer.groups)   # one group = one allreduce, or say why not
        if problem:
            sys.stderr.write(f"yasgd: warning: {problem}\n")
    log = RunLog(os.path.join(run_dir, "metrics.jsonl") if run_dir else None,
                 world.is_root, cfg.train.progress)
    return Setup(cfg, world, ctx, net, trainer, LabelSmoothingCE(cfg.train.label_smoothing),
                 train_loader, val_loader, per_rank, steps_per_epoch, run_dir, log, resume_from,
                 scaler=loss_scale.from_config(cfg.train, trainer))


# -- one epoch -----------------------------------------------------------------------
def train_epoch(s: Setup, epoch: int, step: int, skip: int = 0) -> Dict[str, float]:
    """One epoch from its step ``skip`` (> 0: resuming mid-epoch); ``step``: steps done."""
    cfg, k = s.cfg, s.cfg.train.accumulate
    polish = epoch >= cfg.train.epochs - cfg.data.polish_epochs
    wd = s.watchdog
    wd.beat(step, epoch)
    with wd.phase("epoch start"):
        s.train_loader.set_epoch(epoch, polish=polish)
        batches = iter(s.train_loader)
        for _ in range(skip * k):   # resuming mid-epoch: replay this epoch's data order up to there
            next(batches)
    meter, last = TrainMeter(s.ctx), {}
    s.log.bar_start(s.steps_per_epoch, f"epoch {epoch + 1}/{cfg.train.epochs}")
    for i in range(skip, s.steps_per_epoch):
        # k micro-batches (forward, loss, backward), allreduce + LARS update, metrics on device
        train_step(s, batches, meter)
        step += 1
        last_step = i == s.steps_per_epoch - 1 or (cfg.train.max_steps and step >= cfg.train.max_steps)
        # log interval: the epoch's metrics so far, reduced over ranks
        if step % cfg.train.log_interval == 0 or last_step:
            last = meter.log(s, epoch, step)   # SYNC: the one per log interval
            wd.step_time(meter.next_window())
        # signals: every rank learns of them at the same step (yasgd.faults.StopPoll)
        signame = s.stop.after_step(step) if s.stop is not None else None
        wd.beat(step)
        if signame:
            s.log.bar_close()
            raise faults.StopRequested(step, epoch, signame)
        s.log.bar_update(1, **({"loss": f"{last['loss']:.3f}"} if last else {}))
        if cfg.train.max_steps and step >= cfg.train.max_steps:
            break
    s.log.bar_close()
    last["step"] = step
    return last


# -- evaluation ----------------------------------------------------------------------
def evaluate(s: Setup) -> float:
    """Top-1 accuracy on the validation set, every rank its shard, summed over ranks."""
    import mxnet as mx
    if s.cfg.train.bn_recalibrate_batches:
        from yasgd import bn
        with s.watchdog.phase("BN re-estimation"):
            bn.recalibrate(s.net, s.train_loader, s.cfg.train.bn_recalibrate_batches, s.world,
                           dtype=s.cfg.model.dtype)
    correct = mx.nd.zeros((1,), ctx=s.ctx, dtype="float64")
    count = 0
    with s.watchdog.phase("evaluation"):
        s.val_loader.set_epoch(0)
        for x, y in s.val_loader:
            if s.cfg.model.dtype == "float16":
                x = x.astype("float16")
            out = s.net(x)
            correct += (out.argmax(axis=1) == y.astype(out.dtype)).sum().astype("float64")
            count += x.shape[0]
            s.watchdog.beat()
        local = [correct.asscalar(), float(count)]   # SYNC: this rank's evaluation done
    # the reduction is a collective: waiting in it is waiting for a peer, not an evaluation
    tot = s.world.allreduce_sum(local, name="yasgd.eval")  # SYNC
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
    ranks = f"{s.world.size} ranks" if s.world.size > 1 else "1 rank"
    log.say(f"yasgd: {cfg.model.name} on {cfg.data.kind}, {ranks} x "
            f"{s.per_rank} x {cfg.train.accumulate} = global batch {cfg.train.global_batch}, "
            f"{s.steps_per_epoch} steps/epoch, {cfg.train.epochs} epochs, optimizer {cfg.optim.name}")
    log.event("start", world_size=s.world.size, per_rank_batch=s.per_rank,
              steps_per_epoch=s.steps_per_epoch, run_dir=s.run_dir)
    ml = mlperf.MLPerfLog.for_run(s, lambda e: should_evaluate(cfg, e))   # rank 0: mlperf.log
    # Resume: parameters, optimizer state and counters of the chosen checkpoint, every rank.
    start_epoch, step, elapsed = resume.restore(s)
    # SIGINT/SIGTERM from here on: every rank stops at one step boundary with a checkpoint
    s.stop = faults.StopPoll(s.world)
    faults.arm()
    ml.run_start()
    t0, acc, reached, epoch = time.time() - elapsed, None, None, start_epoch - 1
    for epoch in range(start_epoch, cfg.train.epochs):
        te = time.time()
        ml.epoch_start(epoch)
        try:
            last = train_epoch(s, epoch, step, skip=step - epoch * s.steps_per_epoch)
        except faults.StopRequested as stop:   # a rank got a signal: every rank stops here
            s.stop.drain()
            path = save_checkpoint(s, stop.step, time.time() - t0)
            log.event("terminated", signal=stop.signame, step=stop.step, checkpoint=path)
            log.close()
            s.watchdog.stop()
            where = f"checkpoint {path}; continue with run.resume=auto" if path else \
                "no checkpoint (no run directory, or train.keep_checkpoints=0)"
            raise faults.Terminated(f"stopped by {stop.signame} at step {stop.step} (epoch "
                                    f"{epoch + 1}); {where}", stop.signame, path)
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
            save_checkpoint(s, step, time.time() - t0)
        if reached or (cfg.train.max_steps and step >= cfg.train.max_steps):
            break
    if acc is None:
        ml.eval_start(max(epoch, 0))
        acc = evaluate(s)
        ml.eval_stop(max(epoch, 0), acc)
    save_checkpoint(s, step, time.time() - t0)   # at the end (kept if already written)
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
    s.watchdog.stop()
    return result


def save_checkpoint(s: Setup, step: int, elapsed: float) -> Optional[str]:
    """checkpoint.save under the watchdog's checkpoint allowance."""
    with s.watchdog.phase("checkpoint"):
        return checkpoint.save(s, step, elapsed)


def run_from_config(cfg) -> Dict[str, Any]:
    """Validate everything that can be validated before any work, then train."""
    from yasgd import data, dist
    config_mod.per_rank_batch(cfg, dist.env_world_size())   # before Horovod starts
    data.check_data(cfg)
    world = dist.world()
    # the stall watchdog covers everything from here on, start-up included
    watch = Watchdog(config_mod.stall_timeout(cfg), rank=world.rank, size=world.size).start()
    s = build(cfg, world)
    s.watchdog = watch
    return fit(s)
