"""Checkpoints: the atomic save of params + optimizer state + step (a collective).

The format (files, manifest, verification) and the listing of checkpoints are
:mod:`yasgd.checkpoint_format`, re-exported here; which checkpoint to resume from, and
the loading on every rank: :mod:`yasgd.resume`.

Writing (the run directory must be shared by the ranks, as it is on a cluster): every
file goes into ``.tmp-<name>``, fsync'ed; after a barrier rank 0 writes ``state.json``,
then the manifest, then its digest, fsyncs the directory, renames it (atomic on POSIX)
and fsyncs the run directory; a last barrier makes "save returned" mean "the checkpoint
exists" everywhere. The newest ``train.keep_checkpoints`` valid ones are kept; a killed
writer leaves only a ``.tmp-`` directory (removed at the next save) and the previous
checkpoints untouched. A damaged checkpoint is never deleted: pruning ignores it, and when
a new checkpoint needs its name it is renamed ``damaged-<name>-<time>``.

RNG state: none is needed. Every random stream of training is a pure function
of (run.seed, epoch, rank[, batch]) (the data loaders), and MXNet's and NumPy's
global generators are used only by the initialization, which a resume
overwrites: resuming at an epoch boundary reproduces the uninterrupted run bit
for bit; mid-epoch, ``train_epoch`` replays the epoch's loader up to the step.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from typing import Any, Dict, Optional, Tuple

from yasgd.checkpoint_format import (  # noqa: F401 -- re-exported: yasgd.checkpoint's API
    FORMAT, MANIFEST, MANIFEST_DIGEST, NAME, NOT_IN_DIGEST, OPTIMIZER_FIELDS, PARAMS, STATE,
    STATE_FIELDS, STATES, CheckpointError, aux_name, check_file, checkpoints, config_digest,
    latest_valid, list_valid, name_key, read_manifest, run_dirs, sha256, trajectory_config,
    validate, verify, write_manifest)
from yasgd import loss_scale
from yasgd.checkpoint_format import fsync, write_synced


def _optimizer_state(trainer, net) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """(arrays for mx.nd.save, JSON-able description) of the trainer's optimizer.

    States and update counts are keyed by the parameter's structural name, not by
    the trainer's index: gluon.Trainer orders parameters by their *names*, which
    carry process-global counters (``dense9_`` vs ``dense10_``), so the same model
    can get another index order in the resuming process."""
    updaters = trainer._updaters
    if len(updaters) != 1:
        raise CheckpointError(f"one context per process expected, the trainer has {len(updaters)}")
    name_of_id = {id(p): n for n, p in structural_params(net).items()}
    key = lambda i: name_of_id[id(trainer._params[int(i)])]  # noqa: E731
    arrays, structure = {}, {}
    for idx, st in updaters[0].states.items():
        i = key(idx)
        if st is None:
            structure[str(i)] = None
        elif isinstance(st, (tuple, list)):
            structure[str(i)] = len(st)
            for j, a in enumerate(st):
                arrays[f"{i}.{j}"] = a
        else:
            structure[str(i)] = "array"
            arrays[str(i)] = st
    opt = trainer._optimizer
    current = [k for k, v in opt._all_index_update_counts.items() if v is opt._index_update_count]
    desc = {"class": type(opt).__name__, "num_update": int(opt.num_update),
            "begin_num_update": int(opt.begin_num_update),
            "index_update_counts": {str(dev): {key(i): int(c) for i, c in counts.items()}
                                    for dev, counts in opt._all_index_update_counts.items()},
            "current_device": current[0] if current else 0,
            "last_lr": getattr(opt, "_last_lr", None), "states": structure}
    return arrays, desc


def _name(step: int, steps_per_epoch: int) -> str:
    epoch, rest = divmod(step, steps_per_epoch)
    return f"ckpt-{epoch}" if rest == 0 else f"ckpt-{epoch}-step{step}"


def due(cfg, epoch: int) -> bool:
    """Whether epoch (0-based, just finished) ends with a periodic checkpoint."""
    n = cfg.train.checkpoint_every
    return n > 0 and (epoch + 1) % n == 0


def _is_checkpoint_of(path: str, step: int) -> bool:
    try:
        return os.path.exists(path) and verify(path, deep=True)[0]["step"] == step
    except CheckpointError:
        return False


def save(s, step: int, elapsed: float) -> Optional[str]:
    """Checkpoint the state after ``step`` steps (a collective: every rank calls it).

    Returns the checkpoint's path (every rank), or None when the run has no run
    directory or ``train.keep_checkpoints`` is 0. A checkpoint of the same step
    that is already there and verifies (every SHA-256) is kept, not rewritten.
    """
    if not s.run_dir or s.cfg.train.keep_checkpoints <= 0:
        return None
    world = s.world
    path = os.path.join(s.run_dir, _name(step, s.steps_per_epoch))
    tmp = os.path.join(s.run_dir, f".tmp-{os.path.basename(path)}")
    fresh = False
    if world.is_root:
        fresh = not _is_checkpoint_of(path, step)
        if fresh:
            shutil.rmtree(tmp, ignore_errors=True)
            os.makedirs(tmp)
    # Rank 0's decision reaches everyone by an allreduce, not a broadcast: this may be the
    # run's last collective, and a broadcast's root can finish (and exit, shutting Horovod
    # down) before the other ranks have received it.
    if not world.allreduce_sum([float(fresh)], name=f"yasgd.ckpt.{step}.begin")[0]:
        return path
    # SYNC: reading parameters and optimizer state waits for the queued updates.
    if world.is_root:
        s.net.save_parameters(os.path.join(tmp, PARAMS))
        arrays, opt_desc = _optimizer_state(s.trainer, s.net)
        mx_save(os.path.join(tmp, STATES), arrays)
    else:   # BN running statistics are each rank's own (batch statistics of its shard)
        mx_save(os.path.join(tmp, aux_name(world.rank)), _aux_arrays(s.net))
    world.barrier(name=f"yasgd.ckpt.{step}.files")
    if world.is_root:
        _finish(s, tmp, path, step, elapsed, opt_desc)
    world.barrier(name=f"yasgd.ckpt.{step}.done")
    return path


def structural_params(net) -> Dict[str, Any]:
    """Parameters by structural name ("0.weight"), as save/load_parameters use them."""
    return net._collect_params_with_prefix()


def _aux_arrays(net) -> Dict[str, Any]:
    """The parameters without gradient (BN running mean/variance), by structural name."""
    return {k: p.data() for k, p in structural_params(net).items() if p.grad_req == "null"}


def mx_save(path: str, arrays: Dict[str, Any]) -> None:
    import mxnet as mx
    mx.nd.save(path, arrays)
    fsync(path)


def _finish(s, tmp: str, path: str, step: int, elapsed: float, opt_desc: Dict[str, Any]) -> None:
    """Rank 0: state.json, the manifest and its digest, fsync, rename, prune."""
    names = [PARAMS, STATES] + [aux_name(r) for r in range(1, s.world.size)]
    state = {"format": FORMAT, "step": int(step), "epoch": int(step // s.steps_per_epoch),
             "steps_per_epoch": int(s.steps_per_epoch), "world_size": int(s.world.size),
             "elapsed_s": float(elapsed), "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
             "seed": int(s.cfg.run.seed), "optimizer": opt_desc,
             "loss_scale": loss_scale.state(s.scaler),
             "params": list(structural_params(s.net)),
             "config_digest": config_digest(s.cfg), "config": trajectory_config(s.cfg)}
    write_synced(os.path.join(tmp, STATE), json.dumps(state, indent=1, default=str))
    write_manifest(tmp, names + [STATE])
    fsync(tmp)
    run_dir, name = os.path.split(path)
    if os.path.exists(path):   # a damaged one of the same name (save checked): kept, renamed
        aside = os.path.join(run_dir, f"damaged-{name}-{int(time.time())}")
        os.rename(path, aside)
        s.log.say(f"note: the damaged checkpoint {path} is kept as {os.path.basename(aside)}; "
                  f"a new {name} replaces it")
    os.rename(tmp, path)
    fsync(run_dir)
    _prune(run_dir, s.cfg.train.keep_checkpoints, keep=path)


def _prune(run_dir: str, keep_n: int, keep: str) -> None:
    """Keep the newest keep_n valid checkpoints; remove older valid ones and stale temp
    dirs. Damaged checkpoints are left alone (for whoever looks into the damage)."""
    for name in os.listdir(run_dir):
        if name.startswith(".tmp-"):
            shutil.rmtree(os.path.join(run_dir, name), ignore_errors=True)
    valid = list_valid(run_dir)
    for _, old in valid[:-keep_n] if keep_n > 0 else []:
        if old != keep:
            shutil.rmtree(old, ignore_errors=True)
