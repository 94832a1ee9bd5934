"""The checkpoint format: names, manifest, verification and listing (no MXNet).

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

The config must match the checkpoint's except for :data:`NOT_IN_DIGEST`. Writing a
checkpoint: :mod:`yasgd.checkpoint`; which one to resume from: :mod:`yasgd.resume`.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Any, Dict, List, Optional, Tuple

FORMAT = 2
PARAMS, STATES, STATE = "model.params", "optimizer.states", "state.json"
MANIFEST, MANIFEST_DIGEST = "MANIFEST.json", "MANIFEST.sha256"
#: Fields every state.json has (written by yasgd.checkpoint, read by yasgd.resume).
STATE_FIELDS = ("format", "step", "epoch", "steps_per_epoch", "world_size", "elapsed_s", "optimizer",
                "params", "config_digest", "config")
OPTIMIZER_FIELDS = ("class", "num_update", "begin_num_update", "index_update_counts", "states")
#: Checkpoint directory names: ``ckpt-<E>`` or ``ckpt-<E>-step<S>``.
NAME = re.compile(r"ckpt-(\d+)(?:-step(\d+))?")
#: Config keys that may differ between a checkpoint and the run that resumes it
#: (they do not change the trajectory: naming, logging, stopping, checkpointing).
NOT_IN_DIGEST = ("run.name", "run.dir", "run.resume", "run.stall_timeout_s",
                 "train.progress", "train.max_steps",
                 "train.log_interval", "train.checkpoint_every", "train.keep_checkpoints",
                 "train.eval_every", "train.eval_offset", "train.target_accuracy",
                 "data.threads", "comm.check_init", "mlperf")


def aux_name(rank: int) -> str:
    """The file of rank ``rank``'s (>= 1) BN running statistics."""
    return f"aux-rank{rank}.params"


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


# -- writing the manifest (rank 0, by yasgd.checkpoint) ------------------------------
def fsync(path: str) -> None:
    """fsync a file or a directory by path."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_synced(path: str, text: str) -> None:
    """Write ``text`` to ``path`` and fsync it before closing."""
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
    write_synced(os.path.join(path, MANIFEST), text)
    digest = hashlib.sha256(text.encode()).hexdigest()
    write_synced(os.path.join(path, MANIFEST_DIGEST), f"{digest}  {MANIFEST}\n")
