"""The result cache of the training benches (``bench largebatch``, ``bench ablation``).

One JSON file per run, named by the digest of the run's full config (every key of every
section as ``yasgd.config.load`` resolved it, the run's directory and name left out): two
benches that train the same config share the run. Each entry also holds the code version
it ran: the SHA-256 of the source of every ``yasgd`` module the training process had
imported when it finished (so the model, the optimizer, the data, the schedule and the
worker itself), and the versions of MXNet and NumPy. An entry counts only while all of
those still match this checkout and environment; a stale entry is kept on disk but never
read into a table, and is overwritten when its run is trained again. So an interrupted
bench continues where it stopped, and a table is only ever built from runs of one code
version.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import os
import sys
from typing import Dict, Iterable, Optional, Sequence

# keys that name where a run writes, not what it computes
_NOT_CONFIG = {("run", "dir"), ("run", "name")}


def config_dict(overrides: Sequence[str]) -> Dict[str, Dict[str, object]]:
    """The full config ``overrides`` resolve to, without the run's directory and name."""
    from yasgd import config as config_mod
    cfg = config_mod.load(None, list(overrides))
    out: Dict[str, Dict[str, object]] = {}
    for f in dataclasses.fields(cfg):
        sec = getattr(cfg, f.name)
        if not dataclasses.is_dataclass(sec):
            continue
        out[f.name] = {k: v for k, v in dataclasses.asdict(sec).items()
                       if (f.name, k) not in _NOT_CONFIG}
    return out


def digest(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def config_key(overrides: Sequence[str]) -> str:
    """The cache key of a run: 16 hex digits of its full config's digest."""
    return digest(config_dict(overrides))[:16]


def _source_sha(module: str) -> Optional[str]:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    with open(spec.origin, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def environment() -> Dict[str, str]:
    import numpy
    from importlib.metadata import PackageNotFoundError, version
    try:
        mx = version("mxnet")
    except PackageNotFoundError:
        mx = "none"
    return {"mxnet": mx, "numpy": numpy.__version__,
            "python": ".".join(map(str, sys.version_info[:2]))}


def loaded_code() -> Dict[str, str]:
    """{module: sha256 of its source} for every yasgd module this process has imported."""
    out = {}
    names = set(sys.modules)
    main_spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if main_spec is not None and main_spec.name:
        names.add(main_spec.name)          # a module run with ``python -m``
    for name in sorted(names):
        if name == "yasgd" or name.startswith("yasgd."):
            sha = _source_sha(name)
            if sha:
                out[name] = sha
    return out


def code_version(code: Dict[str, str], env: Dict[str, str]) -> str:
    return digest({"code": code, "env": env})[:12]


class RunCache:
    """The entries under ``root`` (``<key>.json``)."""

    def __init__(self, root: str):
        self.root = root
        self._env = environment()
        self._shas: Dict[str, Optional[str]] = {}

    def path(self, key: str) -> str:
        return os.path.join(self.root, f"{key}.json")

    def _current(self, module: str) -> Optional[str]:
        if module not in self._shas:
            self._shas[module] = _source_sha(module)
        return self._shas[module]

    def why_stale(self, entry: Dict[str, object]) -> Optional[str]:
        """None when ``entry`` ran this checkout's code in this environment, else why not."""
        if entry.get("env") != self._env:
            return f"environment {entry.get('env')} != {self._env}"
        code = entry.get("code") or {}
        if not code:
            return "no code version recorded"
        changed = [m for m, sha in code.items() if self._current(m) != sha]
        return f"changed since: {', '.join(changed)}" if changed else None

    def get(self, key: str) -> Optional[Dict[str, object]]:
        """The entry of ``key`` if it exists and is current."""
        try:
            with open(self.path(key)) as f:
                entry = json.load(f)
        except (OSError, ValueError):
            return None
        return entry if self.why_stale(entry) is None else None

    def put(self, key: str, entry: Dict[str, object]) -> None:
        os.makedirs(self.root, exist_ok=True)
        tmp = self.path(key) + ".tmp"
        with open(tmp, "w") as f:
            json.dump(entry, f, indent=1, sort_keys=True)
            f.write("\n")
        os.replace(tmp, self.path(key))     # an interruption never leaves half an entry

    def stale_keys(self) -> Iterable[str]:
        if not os.path.isdir(self.root):
            return []
        out = []
        for name in sorted(os.listdir(self.root)):
            if name.endswith(".json") and self.get(name[:-5]) is None:
                out.append(name[:-5])
        return out
