"""Checkpoints: atomic save, validation, and the choice of the one to resume from.

A checkpoint is a directory ``<run_dir>/ckpt-<E>`` (E epochs done) or, when
written in the middle of an epoch (SIGTERM, ``train.max_steps``),
``<run_dir>/ckpt-<E>-step<S>``, holding MXNet's own formats, no pickle:

    model.params       ``net.save_parameters`` on rank 0: weights (the same on every
                       rank) and rank 0's BN running statistics
    aux-rank<r>.params ``mx.nd.save`` on rank r >= 1: its own BN running statistics
                       (each rank's come from its own data shard, as in any data-
                       parallel run without synchronised BN statistics)
    optimizer.states   ``mx.nd.save`` of a dict: ``"<i>"`` momentum of trainer
                       parameter i, ``"<i>.<j>"`` the j-th array of a tuple state
                       (LARS/SGD with fp16: ``<i>.0`` fp32 master, ``<i>.1`` momentum)
    state.json         step, epoch, steps per epoch, world size, training seconds so
                       far, optimizer counters (``num_update``, per-index update
                       counts, LARS ``_last_lr``), the state structure, the config
                       digest and the config, and each file's size and SHA-256

Writing (a collective; the run directory must be shared by the ranks, as it is
on a cluster): every file goes into ``.tmp-<name>``, fsync'ed; after a barrier
rank 0 writes ``state.json`` last, fsyncs the directory, renames it (atomic on
POSIX) and fsyncs the run directory; a last barrier makes "save returned" mean
"the checkpoint exists" everywhere. The newest ``train.keep_checkpoints`` are
kept; a killed writer leaves only a ``.tmp-`` directory (removed at the next
save) and the previous checkpoints untouched. :func:`latest_valid` never returns
a half-written checkpoint (state.json parses, every file there with its size).

RNG state: none is needed. Every random stream of training is a pure function
of (run.seed, epoch, rank[, batch]) (the data loaders), and MXNet's and NumPy's
global generators are used only by the initialization, which a resume
overwrites: resuming at an epoch boundary reproduces the uninterrupted run bit
for bit; mid-epoch, ``train_epoch`` replays the epoch's loader up to the step.

Resume: :func:`find_resume` (rank 0, ``run.resume``: ``auto`` = the newest valid
checkpoint of the newest run directory ``<run.dir>/<run.name>-<stamp>`` that has
one; or a checkpoint / run directory), loading on every rank in :mod:`yasgd.resume`.
The config must match the checkpoint's except for :data:`NOT_IN_DIGEST`.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from typing import Any, Dict, List, Optional, Tuple

from yasgd import UsageError

FORMAT = 1
PARAMS, STATES, STATE = "model.params", "optimizer.states", "state.json"
#: Test hook, not a tuning knob: seconds to sleep after the files are written and
#: before the temporary directory is renamed, so that a test can kill the writer
#: in the middle of a checkpoint (tests/e2e/test_resume.py). Unset in real runs.
DELAY_ENV = "YASGD_TEST_CHECKPOINT_DELAY"
#: Config keys that may differ between a checkpoint and the run that resumes it
#: (they do not change the trajectory: naming, logging, stopping, checkpointing).
NOT_IN_DIGEST = ("run.name", "run.dir", "run.resume", "train.progress", "train.max_steps",
                 "train.log_interval", "train.checkpoint_every", "train.keep_checkpoints",
                 "train.eval_every", "train.eval_offset", "train.target_accuracy",
                 "data.threads", "comm.check_init", "mlperf")


class CheckpointError(RuntimeError):
    """A checkpoint is missing, incomplete or inconsistent."""


# -- config digest ---------------------------------------------------------------
def trajectory_config(cfg) -> Dict[str, Any]:
    """The config as a flat {section.key: value} without the keys of NOT_IN_DIGEST."""
    flat = {f"{sec}.{k}": v for sec, vals in cfg.to_dict().items() for k, v in vals.items()}
    return {k: v for k, v in sorted(flat.items())
            if k not in NOT_IN_DIGEST and k.split(".")[0] not in NOT_IN_DIGEST}


def config_digest(cfg) -> str:
    text = json.dumps(trajectory_config(cfg), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


# -- finding and validating ----------------------------------------------------------
def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def validate(path: str, deep: bool = False) -> Dict[str, Any]:
    """The checkpoint's state.json, or CheckpointError saying what is wrong.

    Checks that state.json parses and has the expected fields, and that every
    file it lists exists with its recorded size (``deep``: and SHA-256).
    """
    spath = os.path.join(path, STATE)
    try:
        with open(spath) as f:
            state = json.load(f)
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path}: cannot read {STATE}: {e}")
    if not isinstance(state, dict) or state.get("format") != FORMAT or "files" not in state:
        raise CheckpointError(f"{path}: {STATE} is not a yasgd checkpoint of format {FORMAT}")
    for name, meta in state["files"].items():
        fpath = os.path.join(path, name)
        if not os.path.isfile(fpath):
            raise CheckpointError(f"{path}: {name} is missing")
        if os.path.getsize(fpath) != meta["size"]:
            raise CheckpointError(f"{path}: {name} has {os.path.getsize(fpath)} bytes, "
                                  f"{meta['size']} expected (truncated?)")
        if deep and sha256(fpath) != meta["sha256"]:
            raise CheckpointError(f"{path}: {name} does not match its SHA-256")
    return state


def list_valid(run_dir: str) -> List[Tuple[int, str]]:
    """(step, path) of every valid checkpoint in run_dir, oldest first."""
    found = []
    try:
        names = os.listdir(run_dir)
    except OSError:
        return []
    for name in names:
        if not name.startswith("ckpt-"):
            continue
        path = os.path.join(run_dir, name)
        try:
            found.append((int(validate(path)["step"]), path))
        except (CheckpointError, KeyError, TypeError, ValueError):
            continue   # half-written or damaged: skipped
    return sorted(found)


def latest_valid(run_dir: str) -> Optional[str]:
    """The newest (highest step) valid checkpoint in run_dir, or None."""
    found = list_valid(run_dir)
    return found[-1][1] if found else None


def run_dirs(parent: str, name: str) -> List[str]:
    """Run directories ``<parent>/<name>-YYYYmmdd-HHMMSS``, newest first."""
    pattern = re.compile(re.escape(name) + r"-\d{8}-\d{6}")
    try:
        names = [d for d in os.listdir(parent) if pattern.fullmatch(d)]
    except OSError:
        return []
    return [os.path.abspath(os.path.join(parent, d)) for d in sorted(names, reverse=True)]


def find_resume(cfg) -> Optional[str]:
    """The checkpoint ``run.resume`` asks for (rank 0 decides), or None for a fresh run."""
    how = cfg.run.resume
    if how in ("none", ""):
        return None
    if how == "auto":
        for d in run_dirs(cfg.run.dir, cfg.run.name):
            ckpt = latest_valid(d)
            if ckpt:
                return ckpt
        return None
    path = os.path.abspath(how)
    if os.path.isfile(os.path.join(path, STATE)):
        try:
            validate(path)
        except CheckpointError as e:
            raise UsageError(f"run.resume: {e}")
        return path
    if os.path.isdir(path):
        ckpt = latest_valid(path)
        if ckpt:
            return ckpt
        raise UsageError(f"run.resume: no valid checkpoint in {path}")
    raise UsageError(f"run.resume: {how} is neither a checkpoint nor a run directory "
                     f"(or use run.resume=auto / none)")


# -- saving ------------------------------------------------------------------------
def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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


def save(s, step: int, elapsed: float) -> Optional[str]:
    """Checkpoint the state after ``step`` steps (a collective: every rank calls it).

    Returns the checkpoint's path (every rank), or None when the run has no run
    directory or ``train.keep_checkpoints`` is 0. A valid checkpoint of the same
    step that is already there is kept, not rewritten.
    """
    if not s.run_dir or s.cfg.train.keep_checkpoints <= 0:
        return None
    world = s.world
    path = os.path.join(s.run_dir, _name(step, s.steps_per_epoch))
    tmp = os.path.join(s.run_dir, f".tmp-{os.path.basename(path)}")
    fresh = False
    if world.is_root:
        try:
            fresh = int(validate(path)["step"]) != step
        except (CheckpointError, KeyError, TypeError, ValueError):
            fresh = True
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


def aux_name(rank: int) -> str:
    return f"aux-rank{rank}.params"


def structural_params(net) -> Dict[str, Any]:
    """Parameters by structural name ("0.weight"), as save/load_parameters use them."""
    return net._collect_params_with_prefix()


def _aux_arrays(net) -> Dict[str, Any]:
    """The parameters without gradient (BN running mean/variance), by structural name."""
    return {k: p.data() for k, p in structural_params(net).items() if p.grad_req == "null"}


def mx_save(path: str, arrays: Dict[str, Any]) -> None:
    import mxnet as mx
    mx.nd.save(path, arrays)
    _fsync(path)


def _finish(s, tmp: str, path: str, step: int, elapsed: float, opt_desc: Dict[str, Any]) -> None:
    """Rank 0: state.json (sizes and SHA-256 of every file), fsync, rename, prune."""
    names = [PARAMS, STATES] + [aux_name(r) for r in range(1, s.world.size)]
    files = {}
    for fname in names:
        fpath = os.path.join(tmp, fname)
        files[fname] = {"size": os.path.getsize(fpath), "sha256": sha256(fpath)}
    state = {"format": FORMAT, "step": int(step), "epoch": int(step // s.steps_per_epoch),
             "steps_per_epoch": int(s.steps_per_epoch), "world_size": int(s.world.size),
             "elapsed_s": float(elapsed), "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
             "seed": int(s.cfg.run.seed), "optimizer": opt_desc,
             "params": list(structural_params(s.net)),
             "config_digest": config_digest(s.cfg), "config": trajectory_config(s.cfg),
             "files": files}
    with open(os.path.join(tmp, STATE), "w") as f:
        json.dump(state, f, indent=1, default=str)
        f.flush()
        os.fsync(f.fileno())
    delay = float(os.environ.get(DELAY_ENV, "0") or 0)
    if delay > 0:
        time.sleep(delay)   # test hook only (see DELAY_ENV)
    _fsync(tmp)
    run_dir, name = os.path.split(path)
    if os.path.exists(path):   # an invalid leftover of the same name
        trash = os.path.join(run_dir, f".tmp-trash-{name}")
        os.rename(path, trash)
        shutil.rmtree(trash, ignore_errors=True)
    os.rename(tmp, path)
    _fsync(run_dir)
    _prune(run_dir, s.cfg.train.keep_checkpoints, keep=path)


def _prune(run_dir: str, keep_n: int, keep: str) -> None:
    """Keep the newest keep_n valid checkpoints; remove older ones and stale temp dirs."""
    for name in os.listdir(run_dir):
        if name.startswith(".tmp-"):
            shutil.rmtree(os.path.join(run_dir, name), ignore_errors=True)
    valid = list_valid(run_dir)
    for _, old in valid[:-keep_n] if keep_n > 0 else []:
        if old != keep:
            shutil.rmtree(old, ignore_errors=True)
