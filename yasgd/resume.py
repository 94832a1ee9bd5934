"""Continuing a run from a checkpoint (written by :mod:`yasgd.checkpoint`): which one,
and the loading on every rank.

The choice is made in two steps, because the last check needs the network:

1. :func:`find_resume` (rank 0, in ``train.prepare_run_dir``, before the network is
   built) turns ``run.resume`` into a :class:`ResumePlan`: the checkpoints to try,
   newest first, of one run directory (the run continues there). ``auto`` takes
   the newest run directory ``<run.dir>/<run.name>-<stamp>`` that holds a checkpoint
   passing :func:`checkpoint_format.verify` (manifest, sizes, every SHA-256, state fields);
   the ones that fail are recorded with their reason. A run directory as
   ``run.resume`` is the same within that directory; a checkpoint directory is
   the only candidate, and a damaged one is a usage error.
2. :func:`restore` (a collective, every rank) tries the candidates in order: rank
   0 verifies one (the first was verified in step 1) and broadcasts its state and
   manifest; the config must match (:func:`check_config`, a usage error naming the
   keys); each other rank checks the files it reads against the manifest; every
   rank loads; one allreduce tells every rank whether any rank failed, so all of
   them move on to the next candidate together or all take this one.

Each checkpoint skipped gets one warning line (rank 0, stderr) and a
``checkpoint_skipped`` event; none is deleted or renamed for being damaged. When
every checkpoint fails, the run stops with a usage error naming each and why;
``auto`` with no checkpoint at all starts fresh. Valid checkpoints newer than the
one resumed from (an explicit older path) are renamed ``abandoned-...`` so that
neither ``run.resume=auto`` nor pruning picks them later.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from yasgd import UsageError, loss_scale
from yasgd.checkpoint import structural_params
from yasgd.checkpoint_format import (MANIFEST, MANIFEST_DIGEST, NAME, PARAMS, STATE, STATES,
                                     CheckpointError, aux_name, check_file, checkpoints,
                                     config_digest, name_key, run_dirs, trajectory_config, verify)

Verified = Tuple[Dict[str, Any], Dict[str, Dict[str, Any]]]   # (state, manifest files)


@dataclass
class ResumePlan:
    """What rank 0 decided before the network existed (broadcast to every rank)."""
    candidates: List[str]                       # checkpoints to try, newest first, one run dir
    skipped: List[Tuple[str, str]] = field(default_factory=list)   # (path, why), found damaged
    explicit: bool = False                      # run.resume named this one checkpoint
    first: Optional[Verified] = None            # candidates[0] as rank 0 verified it

    @property
    def run_dir(self) -> str:
        return os.path.dirname(self.candidates[0])


# -- 1. the choice (rank 0) ------------------------------------------------------------
def _listing(skipped: List[Tuple[str, str]]) -> str:
    return "; ".join(f"{path}: {why}" for path, why in skipped)


def _plan_in(run_dir: str, skipped: List[Tuple[str, str]]) -> Optional[ResumePlan]:
    """The plan of run_dir from its newest verified checkpoint on; the damaged newer
    ones are appended to ``skipped``. None when none verifies."""
    found = checkpoints(run_dir)
    for i, path in enumerate(found):
        try:
            first = verify(path, deep=True)
        except CheckpointError as e:
            skipped.append((path, e.reason))
            continue
        return ResumePlan(found[i:], list(skipped), first=first)
    return None


def _looks_like_checkpoint(path: str) -> bool:
    return os.path.isdir(path) and (NAME.fullmatch(os.path.basename(path)) is not None or any(
        os.path.exists(os.path.join(path, f)) for f in (MANIFEST_DIGEST, MANIFEST, STATE, PARAMS)))


def find_resume(cfg) -> Optional[ResumePlan]:
    """The plan ``run.resume`` asks for (rank 0 decides), or None for a fresh run."""
    how = cfg.run.resume
    if how in ("none", ""):
        return None
    skipped: List[Tuple[str, str]] = []
    if how == "auto":
        for d in run_dirs(cfg.run.dir, cfg.run.name):
            plan = _plan_in(d, skipped)
            if plan:
                return plan
        if skipped:
            raise UsageError(f"run.resume=auto: no checkpoint can be resumed, every one is damaged: "
                             f"{_listing(skipped)} (repair or remove them, or start anew with "
                             f"run.resume=none)")
        return None
    path = os.path.abspath(how)
    if _looks_like_checkpoint(path):
        try:
            first = verify(path, deep=True)
        except CheckpointError as e:
            raise UsageError(f"run.resume: cannot resume from {path}: {e.reason}")
        return ResumePlan([path], explicit=True, first=first)
    if os.path.isdir(path):
        plan = _plan_in(path, skipped)
        if plan:
            return plan
        if skipped:
            raise UsageError(f"run.resume: no valid checkpoint in {path}, every one is damaged: "
                             f"{_listing(skipped)}")
        raise UsageError(f"run.resume: no checkpoint in {path}")
    raise UsageError(f"run.resume: {how} is neither a checkpoint nor a run directory "
                     f"(or use run.resume=auto / none)")


# -- 2. loading (every rank) -------------------------------------------------------------
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
        raise CheckpointError(f"its parameters ({len(state['params'])}) do not match the model's "
                              f"({len(names)}), e.g. {sorted(set(names) ^ set(state['params']))[:3]}",
                              path)
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
        raise CheckpointError(f"optimizer {desc['class']}, the run uses {type(opt).__name__}", path)
    updater = s.trainer._updaters[0]
    updater.states.clear()
    updater.states_synced.clear()
    # keys are structural parameter names (see yasgd.checkpoint._optimizer_state)
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
    loss_scale.restore(s.scaler, state.get("loss_scale"))


def restore(s) -> Tuple[int, int, float]:
    """Resume from ``s.resume_from`` (a ResumePlan, or one checkpoint's path): a collective.

    Returns (epoch to continue in, steps done, training seconds so far); (0, 0, 0.0)
    for a fresh run. Every rank takes the same candidate: the first that rank 0
    verifies and that every rank loads.
    """
    plan = getattr(s, "resume_from", None)
    if not plan:
        return 0, 0, 0.0
    if isinstance(plan, str):
        plan = ResumePlan([os.path.abspath(plan)], explicit=True)
    skipped = list(plan.skipped)
    for path, why in skipped:
        _warn(s, path, why)
    for i, path in enumerate(plan.candidates):
        found = _verified_by_root(s, plan, i)
        if isinstance(found, str):
            why = found
        else:
            state, files = found
            # Usage errors, decided on rank 0's state: every rank raises the same one.
            check_config(state, s.cfg, path)
            if state["steps_per_epoch"] != s.steps_per_epoch:
                raise UsageError(f"cannot resume from {path}: {state['steps_per_epoch']} steps per "
                                 f"epoch there, {s.steps_per_epoch} now (global batch or data changed)")
            why = _load_everywhere(s, path, state, files, tag=i)
            if why is None:
                return _resumed(s, path, state, skipped)
        if plan.explicit:
            raise UsageError(f"cannot resume from {path}: {why}")
        skipped.append((path, why))
        _warn(s, path, why)
    raise UsageError(f"cannot resume: every checkpoint is damaged: {_listing(skipped)} "
                     f"(repair or remove them, or start anew with run.resume=none)")


def _verified_by_root(s, plan: ResumePlan, i: int):
    """(state, files) of candidate i as rank 0 verified it, or why it failed; every rank."""
    found = None
    if s.world.is_root:
        found = plan.first if i == 0 else None
        if found is None:
            try:
                found = verify(plan.candidates[i], deep=True)
            except CheckpointError as e:
                found = e.reason
    return s.world.broadcast_object(found, name=f"yasgd.ckpt.candidate.{i}")


def _one_line(e: BaseException) -> str:
    if isinstance(e, CheckpointError):
        return e.reason
    text = (str(e).strip().splitlines() or [""])[0]   # MXNet's errors carry a stack trace
    return f"{type(e).__name__}: {text[:200]}"


def _load_everywhere(s, path: str, state: Dict[str, Any], files: Dict[str, Any],
                     tag: int) -> Optional[str]:
    """Every rank checks and loads ``path``; None when all succeeded, else why (the
    same decision on every rank: one allreduce of a failure flag per rank)."""
    world, error = s.world, None
    try:
        if not world.is_root:   # rank 0 verified every file itself
            for fname in (PARAMS, STATES, aux_name(world.rank)):
                if fname in files:
                    check_file(path, fname, files[fname], deep=True)
        load_into(s, path, state)
    except Exception as e:   # whatever stops one rank from loading moves every rank on
        error = e
    flags = np.zeros(world.size)
    flags[world.rank] = float(error is not None)
    failed = [r for r, f in enumerate(world.allreduce_sum(flags, name=f"yasgd.ckpt.load.{tag}")) if f]
    if not failed:
        return None
    if world.size == 1:
        return _one_line(error)
    ranks = ", ".join(map(str, failed[:8])) + (", ..." if len(failed) > 8 else "")
    return (f"loading failed on rank{'s' if len(failed) > 1 else ''} {ranks} of {world.size}"
            + (f" (rank {world.rank}: {_one_line(error)})" if error is not None else ""))


def _warn(s, path: str, why: str) -> None:
    """One line on stderr (rank 0) and an event, for a checkpoint skipped."""
    if s.world.is_root:
        sys.stderr.write(f"yasgd: warning: skipping checkpoint {path}: {why}\n")
        sys.stderr.flush()
        s.log.event("checkpoint_skipped", checkpoint=path, reason=why)


def _resumed(s, path: str, state: Dict[str, Any], skipped) -> Tuple[int, int, float]:
    world = s.world
    if world.is_root:
        _set_aside_newer(path, int(state["step"]), {p for p, _ in skipped})
    if state["world_size"] != world.size:
        s.log.say(f"note: checkpoint written by {state['world_size']} ranks, resumed on "
                  f"{world.size}: the data shards differ, so the run is not bit-exact")
    s.log.say(f"resumed from {path}: {state['epoch']} epochs, step {state['step']}")
    s.log.event("resume", checkpoint=path, epoch=state["epoch"], step=state["step"],
                skipped=[p for p, _ in skipped])
    return int(state["epoch"]), int(state["step"]), float(state["elapsed_s"])


def _set_aside_newer(path: str, step: int, damaged) -> None:
    """Resuming from an older checkpoint abandons the newer valid ones: rename them
    ``abandoned-ckpt-...`` so that neither run.resume=auto nor pruning picks them.
    Damaged ones (``damaged``, or failing verification here) stay as they are."""
    run_dir, mine = os.path.dirname(path), name_key(path)
    for other in checkpoints(run_dir):
        if other == path or other in damaged or (mine is not None and name_key(other) <= mine):
            continue
        try:
            newer = verify(other, deep=True)[0]["step"] > step
        except CheckpointError:
            continue
        if newer:
            base = os.path.basename(other)
            os.rename(other, os.path.join(run_dir, f"abandoned-{base}-{int(time.time())}"))
