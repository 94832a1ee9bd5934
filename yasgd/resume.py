"""Continuing a run from a checkpoint (written by :mod:`yasgd.checkpoint`), on every rank.

``restore(s)`` is a collective: rank 0's ``state.json`` is broadcast; every rank
checks that the config matches the checkpoint's (:func:`check_config`, a usage
error naming the keys that differ), that the files it reads have rank 0's SHA-256,
then loads the weights, its own BN statistics (``aux-rank<r>.params``; rank 0's
when the world size changed), the optimizer states and counters; one allreduce
makes every rank stop if any rank failed. Checkpoints newer than the one resumed
from are renamed ``abandoned-...`` so that neither ``run.resume=auto`` nor pruning
picks them later.
"""
from __future__ import annotations

import os
import time
from typing import Any, Dict, Tuple

from yasgd import UsageError
from yasgd.checkpoint import (PARAMS, STATES, CheckpointError, aux_name, config_digest, list_valid,
                              sha256, structural_params, trajectory_config, validate)


def check_config(state: Dict[str, Any], cfg, path: str) -> None:
    if state.get("config_digest") == config_digest(cfg):
        return
    old, new = state.get("config", {}), trajectory_config(cfg)
    diffs = [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in sorted(set(old) | set(new))
             if old.get(k) != new.get(k)]
    raise UsageError(f"cannot resume from {path}: the config differs from the checkpoint's in "
                     f"{'; '.join(diffs) or 'its digest'} (restore these values, or start a new "
                     f"run with run.resume=none)")


def load_into(s, path: str, state: Dict[str, Any]) -> None:
    """Load parameters, optimizer states and counters of ``path`` into this rank."""
    import mxnet as mx
    names = list(structural_params(s.net))
    if names != state["params"]:
        raise CheckpointError(f"{path}: its parameters ({len(state['params'])}) do not match "
                              f"the model's ({len(names)}), e.g. {sorted(set(names) ^ set(state['params']))[:3]}")
    s.net.load_parameters(os.path.join(path, PARAMS), ctx=s.ctx)
    aux = os.path.join(path, aux_name(s.world.rank))
    if s.world.rank > 0 and state["world_size"] == s.world.size:
        params = structural_params(s.net)
        for name, arr in mx.nd.load(aux).items():
            params[name].set_data(arr)
    arrays = mx.nd.load(os.path.join(path, STATES))
    arrays = arrays if isinstance(arrays, dict) else {}
    desc = state["optimizer"]
    opt = s.trainer._optimizer
    if type(opt).__name__ != desc["class"]:
        raise CheckpointError(f"{path}: optimizer {desc['class']}, the run uses {type(opt).__name__}")
    updater = s.trainer._updaters[0]
    updater.states.clear()
    updater.states_synced.clear()
    # keys are structural parameter names (see checkpoint._optimizer_state)
    index_of_id = {id(p): i for i, p in enumerate(s.trainer._params)}
    index = {n: index_of_id[id(p)] for n, p in structural_params(s.net).items() if id(p) in index_of_id}
    for key, kind in desc["states"].items():
        i = index[key]
        if kind is None:
            st = None
        elif kind == "array":
            st = arrays[key].as_in_context(s.ctx)
        else:
            st = tuple(arrays[f"{key}.{j}"].as_in_context(s.ctx) for j in range(int(kind)))
        updater.states[i] = st
        updater.states_synced[i] = True
    opt.num_update = int(desc["num_update"])
    opt.begin_num_update = int(desc["begin_num_update"])
    opt._all_index_update_counts = {int(dev): {index[n]: int(c) for n, c in counts.items()}
                                    for dev, counts in desc["index_update_counts"].items()}
    dev = int(desc.get("current_device", 0))
    opt._all_index_update_counts.setdefault(dev, {})
    opt._index_update_count = opt._all_index_update_counts[dev]
    if hasattr(opt, "_last_lr"):
        opt._last_lr = desc.get("last_lr")


def restore(s) -> Tuple[int, int, float]:
    """Load ``s.resume_from`` on every rank (a collective).

    Returns (epoch to continue in, steps done, training seconds so far);
    (0, 0, 0.0) for a fresh run. Every rank checks the files' SHA-256 against
    rank 0's state.json; if any rank fails, every rank raises.
    """
    path = getattr(s, "resume_from", None)
    if not path:
        return 0, 0, 0.0
    world = s.world
    state = validate(path) if world.is_root else None
    state = world.broadcast_object(state, name="yasgd.ckpt.state")
    error = None
    try:
        check_config(state, s.cfg, path)
        if state["steps_per_epoch"] != s.steps_per_epoch:
            raise UsageError(f"cannot resume from {path}: {state['steps_per_epoch']} steps per "
                             f"epoch there, {s.steps_per_epoch} now (global batch or data changed)")
        mine = validate(path)
        for fname in (PARAMS, STATES, aux_name(world.rank)):
            meta = state["files"].get(fname)
            if meta is None:
                continue
            if mine["files"].get(fname) != meta or sha256(os.path.join(path, fname)) != meta["sha256"]:
                raise CheckpointError(f"{path}/{fname} differs from rank 0's")
        load_into(s, path, state)
    except (CheckpointError, UsageError, OSError, KeyError, ValueError) as e:
        error = e
    failed = int(world.allreduce_sum([1.0 if error else 0.0], name="yasgd.ckpt.load")[0])
    if failed:
        if isinstance(error, UsageError):
            raise error
        raise CheckpointError(f"resuming from {path} failed on {failed} rank(s)"
                              + (f"; on this rank: {error}" if error else ""))
    if world.is_root:
        _set_aside_newer(path, int(state["step"]))
    if state["world_size"] != world.size:
        s.log.say(f"note: checkpoint written by {state['world_size']} ranks, resumed on "
                  f"{world.size}: the data shards differ, so the run is not bit-exact")
    s.log.say(f"resumed from {path}: {state['epoch']} epochs, step {state['step']}")
    s.log.event("resume", checkpoint=path, epoch=state["epoch"], step=state["step"])
    return int(state["epoch"]), int(state["step"]), float(state["elapsed_s"])


def _set_aside_newer(path: str, step: int) -> None:
    """Resuming from an older checkpoint abandons the newer ones: rename them
    ``abandoned-ckpt-...`` so that neither run.resume=auto nor pruning picks them."""
    run_dir = os.path.dirname(path)
    for newer_step, newer in list_valid(run_dir):
        if newer_step > step:
            base = os.path.basename(newer)
            os.rename(newer, os.path.join(run_dir, f"abandoned-{base}-{int(time.time())}"))
