"""Running a study: the runs its arms' searches still need (yasgd.bench.study), ``--jobs``
at a time, one process each (yasgd.bench.study_worker), every finished run stored in the
cache (yasgd.bench.runcache) before the next is chosen, a partial report after each.

An interruption (SIGINT, SIGTERM) stops the runs in flight and keeps every finished one;
the same command continues from the cache. ``max_runs`` and ``stop_after_s`` bound one
sitting: no run starts past them, the runs in flight finish. A run that recorded other code
than the bench started on (a pull or an edit under it) stops the bench (``CodeChanged``):
its entry is not of the code the bench reads, so the bench would ask for it again and again.
One training sitting at a time holds a cache (``cache_lock``).
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from yasgd import UsageError
from yasgd.bench import cache_entry, common, machine, output, runcache
from yasgd.bench.study import Arm, Run, Search, runs_left, search
from yasgd.bench.study_plan import Scale, overrides
from yasgd.bench.study_guard import check_record
from yasgd.bench.study_procs import Workers, first_done
from yasgd.meter import TrainingError
from yasgd.supervise import Stopped, die_with_parent, stop_by_unwinding


class Interrupted(Stopped):
    """A stop signal while the bench trains: the runs in flight are stopped."""


class CodeChanged(TrainingError):
    """A run ran other code than the bench started on (a pull or an edit while it ran): the
    bench cannot go on (one ``yasgd: error:`` line, exit 1)."""


def package_code() -> Dict[str, str]:
    """{module: SHA-256 of its source} for every module of the ``yasgd`` package on disk,
    the digest a run records for each module it imports (``runcache.loaded_code``)."""
    root = os.path.join(machine.REPO_ROOT, "yasgd")
    out = {}
    for d, _, files in os.walk(root):
        for name in files:
            if not name.endswith(".py"):
                continue
            parts = os.path.relpath(os.path.join(d, name[:-3]), machine.REPO_ROOT).split(os.sep)
            if parts[-1] == "__init__":
                parts.pop()
            with open(os.path.join(d, name), "rb") as f:
                out[".".join(parts)] = hashlib.sha256(f.read()).hexdigest()
    return out


@contextlib.contextmanager
def cache_lock(root: str):
    """One training sitting at a time on a cache: an exclusive ``flock`` on its directory,
    held while the sitting runs (the kernel drops it when the process ends, however it ends).
    A second sitting would train the same runs again, side by side on the same cores."""
    os.makedirs(root, exist_ok=True)
    fd = os.open(root, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(f"--cache {root}: another bench is training into this cache; "
                             f"the same command continues from it once that one ends (or "
                             f"give another --cache)") from None
        except OSError:
            pass        # a filesystem without flock: one sitting at a time is the user's to keep
        yield
    finally:
        os.close(fd)


DEFAULT_JOBS = 2


def default_jobs() -> int:
    """``--jobs`` when not given: two runs side by side, never more than a run a core."""
    return max(1, min(DEFAULT_JOBS, os.cpu_count() or 1))


def threads_per_job(jobs: int) -> int:
    return max(1, (os.cpu_count() or 2) // max(1, jobs))


def _worker_env(threads: int) -> Dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MXNET_OMP_MAX_THREADS=str(threads))
    for k in [k for k in env if k.startswith(("OMPI_", "PMI_", "PMIX_", "HOROVOD_RANK",
                                              "HOROVOD_SIZE"))]:
        del env[k]      # one process, never a Horovod job
    return env


class Study:
    """The arms of one bench over one cache."""

    def __init__(self, arms: Sequence[Arm], scale: Scale, out_dir: str,
                 cache_dir: Optional[str] = None):
        self.arms, self.scale = list(arms), scale
        self.out_dir = out_dir
        self.run_dir = os.path.abspath(os.path.join(out_dir, output.STUDY_RUNS))
        self.work = os.path.join(self.run_dir, "_work")
        self.cache = cache_entry.Cache(cache_dir or os.path.join(out_dir, output.STUDY_CACHE))
        self._keys: Dict[Tuple[str, float, int], Run] = {}
        self.failed: Dict[str, str] = {}
        self.machine = machine.machine_label()     # recorded with every run trained here
        self.code_at_start = package_code()

    def run_of(self, arm: Arm, factor: float, seed: int) -> Run:
        k = (arm.name, factor, seed)
        if k not in self._keys:
            r = Run(arm, factor, seed)
            r.overrides = overrides(self.scale, r, self.run_dir)
            r.key = runcache.config_key(r.overrides)
            self._keys[k] = r
        return self._keys[k]

    def lookup(self, arm: Arm, factor: float, seed: int) -> Optional[Dict[str, object]]:
        e = self.cache.get(self.run_of(arm, factor, seed).key)
        return None if e is None else e["result"]

    def searches(self) -> List[Search]:
        return [search(a, self.lookup) for a in self.arms]

    def records(self, searches: Sequence[Search]) -> List[Dict[str, object]]:
        """Every run the searches used: arm, lr, seed and its result."""
        out = []
        for s in searches:
            for (f, seed), res in sorted(s.results.items()):
                run = self.run_of(s.arm, f, seed)
                rec = {"arm": s.arm.name, "batch": s.arm.batch, "optimizer": s.arm.optimizer,
                       "lr": run.lr, "factor": f, "seed": seed, "key": run.key,
                       "chosen_lr": f == s.best}
                who = dict(rec)     # what the run is: no field of its result replaces it
                rec.update({k: v for k, v in res.items() if k not in ("code", "env")})
                rec.update(who)
                out.append(rec)
        return out

    def code(self, searches: Sequence[Search]) -> Dict[str, object]:
        """The training code the runs of ``searches`` ran, from what each run recorded: every
        ``yasgd`` module any of them loaded with its one source digest (an arm that loads a
        module the others do not, such as ``yasgd.bn`` for precise BN, adds it), their one
        environment, and ``version``, the digest of both. The cache serves only runs of this
        checkout's code, so a module with two digests (or two environments) means the code
        changed while the bench ran, or an entry was edited; that is never built into a
        table, and the line names a run of each side."""
        modules: Dict[str, Tuple[str, str]] = {}       # module -> (digest, a run's key)
        envs: List[Tuple[object, str]] = []            # (environment, a run's key)
        for s in searches:
            for (f, seed), res in sorted(s.results.items()):
                key = self.run_of(s.arm, f, seed).key
                for m, sha in (res.get("code") or {}).items():
                    first = modules.setdefault(m, (sha, key))
                    if first[0] != sha:
                        raise CodeChanged(self._two(f"two versions of {m}", first[1], key))
                env = res.get("env")
                if env is not None and env not in [e for e, _ in envs]:
                    envs.append((env, key))
        if len(envs) > 1:
            raise CodeChanged(self._two(f"in {len(envs)} environments", envs[0][1], envs[1][1]))
        env = envs[0][0] if envs else {}
        digests = {m: sha for m, (sha, _) in sorted(modules.items())}
        return {"modules": digests, "env": env,
                "version": runcache.code_version(digests, env) if digests else None}

    def _two(self, what: str, a: str, b: str) -> str:
        return (f"the runs of this table ran {what}: {a}.json and {b}.json in the cache "
                f"{self.cache.root}; the code changed while the bench ran (run it again), or "
                f"an entry was edited (remove it: its run trains again)")

    # -- one run ---------------------------------------------------------------------
    def _train(self, run: Run, threads: int, workers: Workers) -> Dict[str, object]:
        os.makedirs(self.work, exist_ok=True)
        spec = os.path.join(self.work, f"{run.key}.spec.json")
        res_path = os.path.join(self.work, f"{run.key}.result.json")
        log = os.path.join(self.work, f"{run.key}.log")
        common.write_json(spec, {"overrides": run.overrides})
        if os.path.exists(res_path):
            os.remove(res_path)
        t0 = time.time()
        with open(log, "w") as f:
            p = workers.start(run.key, [sys.executable, "-m", "yasgd.bench.study_worker",
                                        "--worker", "--spec", spec, "--result", res_path],
                              stdout=f, stderr=subprocess.STDOUT, env=_worker_env(threads),
                              cwd=common.REPO_ROOT, preexec_fn=die_with_parent())
            try:
                rc = p.wait(timeout=self.scale.run_timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                rc = "timeout"
            finally:
                workers.ended(run.key)
        if rc != 0:
            with open(log, errors="replace") as f:
                tail = "".join(f.readlines()[-5:])
            raise RuntimeError(f"run {run.key} exited with {rc}; last lines of {log}:\n{tail}")
        with open(res_path) as f:
            res = json.load(f)
        res["wall_s"] = round(time.time() - t0, 1)
        res["threads"] = threads
        res["machine"] = self.machine
        return res

    # -- the loop --------------------------------------------------------------------
    def run(self, jobs: int, max_runs: Optional[int] = None, stop_after_s: Optional[float] = None,
            on_progress: Optional[Callable[[List[Search], bool], None]] = None) -> List[Search]:
        threads = threads_per_job(jobs)
        workers = Workers()
        old = stop_by_unwinding(Interrupted)    # a hang-up too: no worker trains unwatched
        t0, started = time.time(), 0
        in_flight: Dict[object, Run] = {}
        ex = ThreadPoolExecutor(max_workers=jobs)
        try:
            while True:
                searches = self.searches()
                may_start = ((max_runs is None or started < max_runs)
                             and (stop_after_s is None or time.time() - t0 < stop_after_s))
                busy = {r.key for r in in_flight.values()}
                for s in searches:
                    for f, seed in s.needed:
                        if not may_start or len(in_flight) >= jobs:
                            break
                        run = self.run_of(s.arm, f, seed)
                        if run.key in busy or run.key in self.failed:
                            continue
                        in_flight[ex.submit(self._train, run, threads, workers)] = run
                        busy.add(run.key)
                        started += 1
                        may_start = max_runs is None or started < max_runs
                if not in_flight:
                    break
                done = first_done(list(in_flight))
                for fut in done:
                    run = in_flight.pop(fut)
                    try:
                        res = fut.result()
                    except Exception as e:  # noqa: BLE001 -- reported, not cached, not retried
                        self.failed[run.key] = str(e)
                        common.say(f"  run {run.arm.name} lr {run.lr:g} seed {run.seed} "
                                   f"FAILED: {e}")
                        continue
                    self.cache.put(run.key, {
                        "key": run.key,
                        "overrides": [o for o in run.overrides
                                      if not o.startswith(("run.dir=", "run.name="))],
                        "config": runcache.config_dict(run.overrides),
                        "code": res.get("code"), "env": res.get("env"), "result": res})
                    changed = sorted(m for m, sha in (res.get("code") or {}).items()
                                     if self.code_at_start.get(m) != sha)
                    if changed:     # its entry is kept: a run of the new code
                        raise CodeChanged(
                            f"the training code changed while the bench ran "
                            f"({', '.join(changed)}): a table is built from runs of one code "
                            f"version; {len(in_flight)} run(s) in flight stopped, every "
                            f"finished run is in {self.cache.root}; the same command "
                            f"continues on the new code")
                    v = res.get("val_top1")
                    common.say(f"  [{started} started] {run.arm.name} lr {run.lr:g} seed "
                               f"{run.seed}: validation "
                               f"{'diverged' if v is None else f'{100 * v:.2f} %'}, "
                               f"{res['wall_s']:.0f} s")
                    if on_progress:
                        on_progress(self.searches(), True)
        except (Interrupted, CodeChanged) as e:
            workers.stop()
            ex.shutdown(wait=True, cancel_futures=True)
            if isinstance(e, Interrupted):
                common.say(f"interrupted by {e}: {len(in_flight)} run(s) in flight stopped; "
                           f"every finished run is in {self.cache.root}; the same command "
                           f"continues")
            raise
        finally:
            ex.shutdown(wait=True, cancel_futures=True)
            for sig, h in old.items():
                signal.signal(sig, h)
        searches = self.searches()
        left = runs_left(searches)
        if left:
            common.say(f"stopped with at least {left} run(s) left (the same command continues)")
        return searches


def table_hardware(records: Sequence[Dict[str, object]], jobs: int) -> Dict[str, object]:
    """The hardware of a study table: the machine that builds it, and (``runs_on``) the
    machines its runs trained on, as each run recorded."""
    return common.hardware({"jobs": jobs, "runs_on": machine.runs_on(records)})


def compute(records: Sequence[Dict[str, object]], searches: Sequence[Search]) -> Dict[str, object]:
    """The compute of the runs in a table: trained runs, their wall and core-hours, and the
    runs still needed at the mean wall time of a run."""
    walls = [r.get("wall_s") or 0.0 for r in records]
    core_h = sum((r.get("wall_s") or 0.0) * (r.get("threads") or 1) for r in records) / 3600
    mean = sum(walls) / len(walls) if walls else 0.0
    left = runs_left(searches)
    return {"runs": len(records), "run_wall_h": round(sum(walls) / 3600, 2),
            "core_h": round(core_h, 2), "mean_run_s": round(mean, 1), "runs_left_at_least": left,
            "left_core_h_at_least": round(left * mean * (records[0].get("threads") or 1) / 3600, 2)
            if records else None}


def ahead_line(study: Study, jobs: int) -> Optional[str]:
    """What a sitting has ahead, said before it starts: the runs it needs at least, and the
    hours they take ``jobs`` side by side at the mean wall time of the runs of this code
    trained before (in its cache, else in the repository's records); None if none is left."""
    left = runs_left(study.searches())
    if not left:
        return None
    records = os.path.join(common.REPO_ROOT, "examples", "results", output.STUDY_CACHE)
    others = [("in its cache", study)]
    if os.path.isdir(records) and os.path.realpath(records) != os.path.realpath(study.cache.root):
        others.append(("in the repository's records",
                       Study(study.arms, study.scale, study.out_dir, records)))
    for where, s in others:
        walls = [r["wall_s"] for r in s.records(s.searches()) if r.get("wall_s")]
        if walls:
            mean = sum(walls) / len(walls)
            hours = left * mean / jobs / 3600
            return (f"at least {left} run(s) to train: about {hours:.1f} h with {jobs} side "
                    f"by side, at the {mean:.0f} s a run of the {len(walls)} run(s) of this "
                    f"code {where}")
    return f"at least {left} run(s) to train (no run of this code yet to time them by)"


def run_bench(name: str, intro: str, arms: Sequence[Arm], scale: Scale, out_dir: str,
              quick: bool, jobs: Optional[int], max_runs: Optional[int],
              stop_after: Optional[float], cache: Optional[str], report: Callable[..., dict]
              ) -> dict:
    """One sitting of the training bench ``name``: train what its arms still need, ``jobs``
    runs side by side (:func:`default_jobs` when None), rewriting the report
    (``report(study, searches, out_dir, quick, jobs, wall, partial, progress)``) after every
    run, then the final report (with the plots) of what the cache holds. The record already
    at ``out_dir`` is only ever replaced by one that holds all its runs (:func:`check_record`)."""
    jobs = default_jobs() if jobs is None else jobs
    study = Study(arms, scale, out_dir, cache)

    def write(*args):       # a full disk under --out: one line; the runs stay in the cache
        try:
            return report(*args)
        except OSError as e:
            raise UsageError(f"bench {name}: --out {out_dir}: writing its report failed "
                             f"({e.strerror or e}); every finished run is kept in the cache "
                             f"{study.cache.root}") from None

    check_record(name, os.path.join(out_dir, f"bench_{name}.json"), study, quick, max_runs)
    # --max-runs 0 trains nothing: the tables of the cache as it is, beside a sitting
    with cache_lock(study.cache.root) if max_runs != 0 else contextlib.nullcontext():
        common.say(f"{intro}, {jobs} runs side by side; cache {study.cache.root}")
        os.makedirs(out_dir, exist_ok=True)     # once the sitting is let in and has spoken
        if max_runs != 0:
            ahead = ahead_line(study, jobs)
            if ahead:
                common.say(ahead)
        t0 = time.time()
        searches = study.run(jobs, max_runs=max_runs,
                             stop_after_s=None if stop_after is None else 60 * stop_after,
                             on_progress=lambda ss, p: write(study, ss, out_dir, quick, jobs,
                                                             time.time() - t0, True, True))
        partial = any(not s.done for s in searches)
        return write(study, searches, out_dir, quick, jobs, time.time() - t0, partial)
