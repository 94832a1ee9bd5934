"""Checkpoints: atomic save, verification, and the listing of the ones to resume from.

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
                       digest and the config
    MANIFEST.json      size and SHA-256 of every file above, state.json included
    MANIFEST.sha256    the SHA-256 of MANIFEST.json (``sha256sum -c`` reads it)

No file holds its own digest: the manifest covers state.json and the data files,
MANIFEST.sha256 covers the manifest, so an edit of any of them (state.json or the
manifest included) is found by :func:`verify`. It detects damage and stray edits,
not forgery: whoever rewrites a file, the manifest and its digest consistently
makes a checkpoint that verifies. Format-1 checkpoints (no manifest, an older
yasgd) are reported as such and not resumed.

Writing (a collective; the run directory must be shared by the ranks, as it is
on a cluster): every file goes into ``.tmp-<name>``, fsync'ed; after a barrier
rank 0 writes ``state.json``, then the manifest, then its digest, fsyncs the
directory, renames it (atomic on POSIX) and fsyncs the run directory; a last
barrier makes "save returned" mean "the checkpoint exists" everywhere. The newest
``train.keep_checkpoints`` valid ones are kept; a killed writer leaves only a
``.tmp-`` directory (removed at the next save) and the previous checkpoints
untouched. A damaged checkpoint is never deleted: pruning ignores it, and when a
new checkpoint needs its name it is renamed ``damaged-<name>-<time>``.

RNG state: none is needed. Every random stream of training is a pure function
of (run.seed, epoch, rank[, batch]) (the data loaders), and MXNet's and NumPy's
global generators are used only by the initialization, which a resume
overwrites: resuming at an epoch boundary reproduces the uninterrupted run bit
for bit; mid-epoch, ``train_epoch`` replays the epoch's loader up to the step.

Which checkpoint to resume from, and the loading on every rank: :mod:`yasgd.resume`.
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

FORMAT = 2
PARAMS, STATES, STATE = "model.params", "optimizer.states", "state.json"
MANIFEST, MANIFEST_DIGEST = "MANIFEST.json", "MANIFEST.sha256"
#: Fields every state.json has (written by :func:`_finish`, read by yasgd.resume).
STATE_FIELDS = ("format", "step", "epoch", "steps_per_epoch", "world_size", "elapsed_s", "optimizer",
                "params", "config_digest", "config")
OPTIMIZER_FIELDS = ("class", "num_update", "begin_num_update", "index_update_counts", "states")
#: Checkpoint directory names: ``ckpt-<E>`` or ``ckpt-<E>-step<S>``.
NAME = re.compile(r"ckpt-(\d+)(?:-step(\d+))?")
#: Test hook, not a tuning knob: seconds to sleep after the files are written and
#: before the temporary directory is renamed, so that a test can kill the writer
#: in the middle of a checkpoint (tests/e2e/test_resume.py). Unset in real runs.
DELAY_ENV = "YASGD_TEST_CHECKPOINT_DELAY"
#: Config keys that may differ between a checkpoint and the run that resumes it
#: (they do not change the trajectory: naming, logging, stopping, checkpointing).
NOT_IN_DIGEST = ("run.name", "run.dir", "run.resume", "run.stall_timeout_s",
                 "train.progress", "train.max_steps",
                 "train.log_interval", "train.checkpoint_every", "train.keep_checkpoints",
                 "train.eval_every", "train.eval_offset", "train.target_accuracy",
                 "data.threads", "comm.check_init", "mlperf")


class CheckpointError(RuntimeError):
    """A checkpoint is missing, incomplete, damaged or inconsistent: ``reason`` says
    what, ``path`` (when known) which checkpoint."""

    def __init__(self, reason: str, path: Optional[str] = None):
        super().__init__(f"{path}: {reason}" if path else reason)
        self.reason, self.path = reason, path


# -- config digest ---------------------------------------------------------------
def trajectory_config(cfg) -> Dict[str, Any]:
    """The config as a flat {section.key: value} without the keys of NOT_IN_DIGEST."""
    flat = {f"{sec}.{k}": v for sec, vals in cfg.to_dict().items() for k, v in vals.items()}
    return {k: v for k, v in sorted(flat.items())
            if k not in NOT_IN_DIGEST and k.split(".")[0] not in NOT_IN_DIGEST}


def config_digest(cfg) -> str:
    text = json.dumps(trajectory_config(cfg), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


# -- verifying -----------------------------------------------------------------------
def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def check_file(path: str, name: str, meta: Dict[str, Any], deep: bool = True) -> None:
    """File ``name`` of checkpoint ``path`` against its manifest entry: present, its
    size, and (``deep``) its SHA-256; CheckpointError saying which fails."""
    fpath = os.path.join(path, name)
    if not os.path.isfile(fpath):
        raise CheckpointError(f"{name} is missing", path)
    size = os.path.getsize(fpath)
    if size != meta["size"]:
        raise CheckpointError(f"{name} has {size} bytes, {meta['size']} expected"
                              + (" (truncated)" if size < meta["size"] else ""), path)
    if deep and sha256(fpath) != meta["sha256"]:
        raise CheckpointError(f"{name} does not match its SHA-256 (damaged or edited)", path)


def read_manifest(path: str) -> Dict[str, Dict[str, Any]]:
    """{file: {"size", "sha256"}} of checkpoint ``path``, after checking the manifest
    against MANIFEST.sha256; CheckpointError if either is missing, unreadable or edited."""
    dpath, mpath = os.path.join(path, MANIFEST_DIGEST), os.path.join(path, MANIFEST)
    if not os.path.isfile(dpath):
        raise CheckpointError(_without_manifest(path), path)
    try:
        with open(dpath) as f:
            want = f.read().split()[0]   # "<sha256>  MANIFEST.json", as sha256sum writes it
    except IndexError:
        raise CheckpointError(f"{MANIFEST_DIGEST} is empty", path)
    except (OSError, UnicodeDecodeError) as e:
        raise CheckpointError(f"cannot read {MANIFEST_DIGEST}: {e}", path)
    if not os.path.isfile(mpath):
        raise CheckpointError(f"{MANIFEST} is missing", path)
    if sha256(mpath) != want:
        raise CheckpointError(f"{MANIFEST} does not match {MANIFEST_DIGEST} (damaged or edited)", path)
    try:
        with open(mpath) as f:
            manifest = json.load(f)
        files = manifest["files"]
        ok = manifest["format"] == FORMAT and all(
            isinstance(m["size"], int) and isinstance(m["sha256"], str) for m in files.values())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        ok = False
    if not ok:
        raise CheckpointError(f"{MANIFEST} is not a yasgd manifest of format {FORMAT}", path)
    unlisted = [n for n in (PARAMS, STATES, STATE) if n not in files]
    if unlisted:
        raise CheckpointError(f"{MANIFEST} does not list {', '.join(unlisted)}", path)
    return files


def _without_manifest(path: str) -> str:
    """Why a directory without MANIFEST.sha256 is not a checkpoint this yasgd reads."""
    try:
        with open(os.path.join(path, STATE)) as f:
            old = json.load(f).get("format")
    except (OSError, ValueError, AttributeError):
        old = None
    if isinstance(old, int) and old < FORMAT:
        return (f"written by an older yasgd (checkpoint format {old}; this one reads format "
                f"{FORMAT}): resume it with that version, or start a new run")
    return f"{MANIFEST_DIGEST} is missing"


def _read_state(path: str) -> Dict[str, Any]:
    """state.json of ``path`` with its fields checked (its bytes were checked already)."""
    try:
        with open(os.path.join(path, STATE)) as f:
            state = json.load(f)
    except (OSError, ValueError) as e:
        raise CheckpointError(f"cannot read {STATE}: {e}", path)
    if not isinstance(state, dict):
        raise CheckpointError(f"{STATE} is not a JSON object", path)
    opt = state.get("optimizer") if isinstance(state.get("optimizer"), dict) else {}
    missing = [k for k in STATE_FIELDS if k not in state] + [
        f"optimizer.{k}" for k in OPTIMIZER_FIELDS if k not in opt]
    if missing:
        raise CheckpointError(f"{STATE} lacks {', '.join(missing)}", path)
    if state["format"] != FORMAT:
        raise CheckpointError(f"{STATE} has format {state['format']!r}, {FORMAT} expected", path)
    ints = [state[k] for k in ("step", "epoch", "steps_per_epoch", "world_size")]
    if (not all(isinstance(v, int) for v in ints) or not isinstance(state["params"], list)
            or not isinstance(state["elapsed_s"], (int, float)) or state["steps_per_epoch"] < 1
            or state["world_size"] < 1 or state["step"] < 0
            or state["epoch"] != state["step"] // state["steps_per_epoch"]):
        raise CheckpointError(f"{STATE} is inconsistent (step {state['step']!r}, epoch "
                              f"{state['epoch']!r}, {state['steps_per_epoch']!r} steps per epoch)",
                              path)
    return state


def verify(path: str, deep: bool = True) -> Tuple[Dict[str, Any], Dict[str, Dict[str, Any]]]:
    """(state, manifest files) of checkpoint ``path``, or CheckpointError naming every problem.

    The manifest against its digest, every file it lists present with its size and
    (``deep``) its SHA-256, state.json's fields, and an ``aux-rank<r>.params`` listed
    for every rank r >= 1 of the world that wrote it. Without ``deep`` (the quick
    check of pruning and listing) a same-size change of a data file goes unseen.
    """
    if not os.path.isdir(path):
        raise CheckpointError("is not a directory", path)
    files = read_manifest(path)
    problems = []
    for name in sorted(files, key=lambda n: (n == STATE, n)):
        try:
            check_file(path, name, files[name], deep)
        except CheckpointError as e:
            problems.append(e.reason)
    if problems:
        raise CheckpointError("; ".join(problems), path)
    state = _read_state(path)
    unlisted = [aux_name(r) for r in range(1, state["world_size"]) if aux_name(r) not in files]
    if unlisted:
        raise CheckpointError(f"{MANIFEST} does not list {', '.join(unlisted[:3])}", path)
    return state, files


def validate(path: str, deep: bool = False) -> Dict[str, Any]:
    """The state.json of checkpoint ``path`` after :func:`verify`."""
    return verify(path, deep)[0]


# -- listing -------------------------------------------------------------------------
def name_key(path: str) -> Optional[Tuple[int, int]]:
    """(epochs, step within the name or 0) of a checkpoint directory's name: sorts
    ckpt-1 < ckpt-1-step6 < ckpt-2 without reading anything; None for other names."""
    m = NAME.fullmatch(os.path.basename(path))
    return (int(m.group(1)), int(m.group(2) or 0)) if m else None


def checkpoints(run_dir: str) -> List[str]:
    """The checkpoint directories of run_dir, valid or not, newest first (by name)."""
    try:
        names = os.listdir(run_dir)
    except OSError:
        return []
    found = [(name_key(n), os.path.join(run_dir, n)) for n in names
             if NAME.fullmatch(n) and os.path.isdir(os.path.join(run_dir, n))]
    return [p for _, p in sorted(found, reverse=True)]


def list_valid(run_dir: str) -> List[Tuple[int, str]]:
    """(step, path) of every checkpoint in run_dir that passes the quick check, oldest first."""
    found = []
    for path in checkpoints(run_dir):
        try:
            found.append((int(validate(path)["step"]), path))
        except CheckpointError:
            continue   # half-written or damaged: skipped
    return sorted(found)


def latest_valid(run_dir: str) -> Optional[str]:
    """The newest (highest step) checkpoint in run_dir that passes the quick check, or None."""
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


# -- saving ------------------------------------------------------------------------
def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_synced(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def write_manifest(path: str, names: List[str]) -> None:
    """MANIFEST.json (size and SHA-256 of each of ``names`` in directory ``path``),
    then MANIFEST.sha256, each fsync'ed."""
    files = {n: {"size": os.path.getsize(os.path.join(path, n)), "sha256": sha256(os.path.join(path, n))}
             for n in names}
    text = json.dumps({"format": FORMAT, "files": files}, indent=1, sort_keys=True) + "\n"
    _write_synced(os.path.join(path, MANIFEST), text)
    digest = hashlib.sha256(text.encode()).hexdigest()
    _write_synced(os.path.join(path, MANIFEST_DIGEST), f"{digest}  {MANIFEST}\n")


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
    """Rank 0: state.json, the manifest and its digest, fsync, rename, prune."""
    names = [PARAMS, STATES] + [aux_name(r) for r in range(1, s.world.size)]
    state = {"format": FORMAT, "step": int(step), "epoch": int(step // s.steps_per_epoch),
             "steps_per_epoch": int(s.steps_per_epoch), "world_size": int(s.world.size),
             "elapsed_s": float(elapsed), "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
             "seed": int(s.cfg.run.seed), "optimizer": opt_desc,
             "params": list(structural_params(s.net)),
             "config_digest": config_digest(s.cfg), "config": trajectory_config(s.cfg)}
    _write_synced(os.path.join(tmp, STATE), json.dumps(state, indent=1, default=str))
    write_manifest(tmp, names + [STATE])
    delay = float(os.environ.get(DELAY_ENV, "0") or 0)
    if delay > 0:
        time.sleep(delay)   # test hook only (see DELAY_ENV)
    _fsync(tmp)
    run_dir, name = os.path.split(path)
    if os.path.exists(path):   # a damaged one of the same name (save checked): kept, renamed
        aside = os.path.join(run_dir, f"damaged-{name}-{int(time.time())}")
        os.rename(path, aside)
        s.log.say(f"note: the damaged checkpoint {path} is kept as {os.path.basename(aside)}; "
                  f"a new {name} replaces it")
    os.rename(tmp, path)
    _fsync(run_dir)
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
