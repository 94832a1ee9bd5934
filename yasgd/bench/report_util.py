"""The records behind the generated blocks (:class:`Records`) and the small formatting
helpers every renderer of :mod:`yasgd.bench.report` shares."""
from __future__ import annotations

import os
import re
import textwrap
from typing import Dict, List, Optional, Tuple

from yasgd.bench import common, record_shape, summary
from yasgd.bench.record_shape import ANY, BOOL, INT, NUM, STR, ListOf, MapOf, Maybe

REPO = common.REPO_ROOT
DEFAULT_RESULTS = os.path.join(REPO, "examples", "results")
#: The Markdown files that may hold generated blocks (relative to the repository).
DOC_GLOBS = ("README.md", "docs/*.md")
BEGIN = re.compile(r"<!-- yasgd:begin ([a-z0-9-]+) -->")
BLOCK = re.compile(r"(<!-- yasgd:begin ([a-z0-9-]+) -->\n)(.*?)(<!-- yasgd:end \2 -->)", re.S)


# -- what the renderers read of each record ----------------------------------------------
# (shapes as yasgd.bench.record_shape.mismatch reads them: "key?" may be absent; ANY where a value
# is only shown, never computed with)
def _with(base: dict, fields: dict) -> dict:
    """``base`` with ``fields`` added, each replacing the key of the same name ("x"/"x?")."""
    names = {k.rstrip("?") for k in fields}
    return {**{k: v for k, v in base.items() if k.rstrip("?") not in names}, **fields}


#: an acceptance line as yasgd.bench.common.acceptance_table reads it
_ACCEPTANCE = _with(summary.ACCEPTANCE_LINE, {"value": Maybe(NUM), "met": Maybe(BOOL)})
#: what yasgd.bench.common.hardware_line reads of a record's hardware
_HW = {"cpu_flags?": Maybe([STR]), "runs_on?": Maybe([ListOf(ANY, 2)])}
_CORES = _with(_HW, {"cpu": ANY, "cores": ANY})
_TIMED = {"median_ms": NUM, "samples_ms": ListOf(NUM, 1)}


def _bench(fields: dict, acceptance: Optional[int] = None, hardware: dict = _HW,
           notes: bool = True) -> dict:
    """A bench_*.json: summary.BENCH, ``fields``, its hardware, its notes (where ``notes``)
    and, where ``acceptance`` is given, a list of at least that many acceptance lines."""
    more = {"notes": [STR], "hardware": hardware} if notes else {"hardware": hardware}
    if acceptance is not None:
        more["acceptance"] = ListOf(_ACCEPTANCE, acceptance)
    return _with(summary.BENCH, {**fields, **more})


_ARM = {"arm": STR, "label": ANY, "batch": INT, "complete?": ANY, "grid_lrs": [NUM],
        "grid_val_top1": [Maybe(NUM)], "grid_state?": Maybe([ANY]), "best_lr": Maybe(NUM),
        "best_inside_grid": ANY, "grid_capped": ANY, "test_top1_by_seed": [Maybe(NUM)],
        "mean_test_top1": Maybe(NUM), "spread_pts": Maybe(NUM)}
_FRESH = {"checks?": ANY, "pending?": ANY, "arms?": [{}], "rows?": [{}], "recipe?": {},
          "comparisons?": [{"batch": ANY, "against": ANY, "fresh_pts?": Maybe(NUM)}]}
_STUDY = {"setup": {"scale": {"big": INT, "huge": INT, "epochs": INT, "limit": INT,
                              "name?": ANY},
                    "compute": {"runs?": ANY, "runs_left_at_least?": ANY},
                    "code": {"version?": ANY, "modules?": {}, "env?": {}}},
          "fresh?": Maybe(_FRESH), "plots?": Maybe([STR]), "partial?": ANY}
_PTS = ("sgd_mean", "sgd_spread_pts", "sgd_lr", "recipe_mean", "recipe_spread_pts", "recipe_lr",
        "recipe_minus_baseline_pts", "recipe_minus_sgd_pts", "larger_spread_pts")

#: the recorded logs the renderers read (report_logs.RECORDED_LOGS writes them)
TEXTS = ("make_train.log", "make_test.log")

#: What the renderers read of each JSON record (a file not named: a JSON object).
SHAPES: Dict[str, object] = {
    "paper.json": {
        "yasgd": {"time_s": NUM, "gpus": INT, "batch": INT, "top1_pct": ANY,
                  "images_per_s": NUM, "efficiency_pct": ANY, "cite": ANY},
        "v100_latency_p99_ms": MapOf(NUM),
        "prior_work": [{k: ANY for k in ("work", "batch", "hardware", "framework", "time",
                                         "top1")}]},
    "mlperf_logs.json": {"multi_node": [{
        "case": STR, "repository": ANY, "results": ANY, "runs_used": [STR],
        "score_runs": [STR], "median_epoch_s": ANY, "steps_per_epoch": ANY,
        "per_gpu_batch": ANY, "epochs": NUM, "evals": NUM, "note?": ANY, "explanation?": ANY,
        "runs": ListOf({"first_epoch_s": NUM, "median_epoch_s": NUM,
                        "run_start_to_first_epoch_s": NUM}, 3)}]},
    "bench_optimizer.json": _bench({
        "records": ListOf(_with(_TIMED, {"arm": STR,
                                         "update_rel_diff_vs_first_arm": Maybe(NUM)}), 2),
        "setup": {"floats": NUM}, "memcpy_ms": NUM, "fused_gb_per_s": MapOf(NUM)}, 2,
        _with(_CORES, {"mxnet": ANY, "horovod": ANY})),
    "bench_allreduce.json": _bench({"records": [_with(_TIMED, {
        "setting": STR, "way": STR, "bus_bandwidth_GBps": NUM, "ratio_to_copy_bound": NUM})]},
        3),
    "bench_overlap.json": _bench({"records": ListOf(_with(_TIMED, {"step": STR}), 1)}),
    "bench_init.json": _bench({"records": ListOf(_with(_TIMED, {
        "arm": ANY, "identical_on_all_ranks": ANY}), 1)}),
    "bench_throughput.json": _bench({
        "records": ListOf({"ranks": ANY, "loop": STR, "horovod_settings": ANY,
                           "median_step_ms": NUM, "images_per_s": NUM, "achieved_gflops": NUM,
                           "vs_baseline_hybridized?": Maybe(NUM),
                           "fraction_of_peak?": Maybe(NUM)}, 1),
        "setup": {"batch_per_rank": NUM}, "bf16_speedup?": Maybe(NUM),
        "mixed_precision?": Maybe({"batch?": NUM, "times?": Maybe(MapOf({"median_ms": NUM}))})},
        3),
    "bench_data.json": _bench({
        "setup": {"images": NUM, **{k: ANY for k in ("source", "image_size", "batch",
                                                     "threads", "passes", "warmup_passes")}},
        "results": [{"loader": STR, "images_per_s": NUM, "passes_images_per_s": [NUM],
                     "note": ANY}],
        "yasgd_vs_gluon_folder": NUM,
        "imagenet_sized?": Maybe({
            "image": {"n": ANY, "mean_kb": NUM, "mean_px": NUM, "quality": ANY},
            "per_core": {k: NUM for k in ("train", "val", "decode", "train_256")},
            "setup": {k: ANY for k in ("batch", "passes", "warmup_passes",
                                       "resized_records")}})},
        hardware=_with(_CORES, {k: ANY for k in ("python", "mxnet", "numpy", "opencv",
                                                  "platform")}), notes=False),
    "bench_largebatch.json": _bench(_with(_STUDY, {"setup": {
        **_STUDY["setup"], "arms": [_ARM],
        "summary": [{"batch": INT, "seeds": ANY, **{k: Maybe(NUM) for k in _PTS}}]}}), 0),
    "bench_ablation.json": _bench(_with(_STUDY, {
        "setup": {**_STUDY["setup"], "arms": [_with(_ARM, {"group": STR})]},
        "effects?": [{}]}), 0),
}


class Records:
    """The recorded results, loaded on first use, each JSON record checked once against
    what the renderers read of it (:data:`SHAPES`; record_shape.RecordError naming the file)."""

    def __init__(self, results_dir: str = DEFAULT_RESULTS):
        self.dir = results_dir
        self._cache: Dict[str, object] = {}
        self.used: List[str] = []   # the files read since the caller last emptied it

    def _locate(self, name: str) -> str:
        p = os.path.join(self.dir, name)
        return p if os.path.exists(p) else os.path.join(DEFAULT_RESULTS, name)

    def path(self, name: str) -> str:
        p = self._locate(name)
        if p not in self.used:
            self.used.append(p)
        return p

    def source(self, record: object) -> Optional[str]:
        """The file a loaded record came from (None for an object that is not one)."""
        for name, value in self._cache.items():
            if value is record:
                return self._locate(name)
        return None

    def json(self, name: str) -> dict:
        path = self.path(name)      # noted as read even when the record is cached
        if name not in self._cache:
            shape = SHAPES.get(name, summary.BENCH if name.startswith("bench_") else {})
            self._cache[name] = record_shape.load_record(path, shape)
        return self._cache[name]

    def check(self) -> None:
        """Load every record the renderers read (:data:`SHAPES` and each bench_*.json the
        acceptance table collects): record_shape.RecordError on the first that is not what they
        read, before anything is rendered or written."""
        for name in SHAPES:
            self.json(name)
        for name in TEXTS:
            self.text(name)
        self.found()

    def bench(self, name: str) -> dict:
        return self.json(f"bench_{name}.json")

    def text(self, name: str) -> Optional[str]:
        """The recorded text ``name`` (UTF-8), None where there is none; RecordError naming
        the file where it cannot be read."""
        p = self.path(name)
        if not os.path.exists(p):
            return None
        return record_shape.read_text(p)

    def found(self) -> Dict[str, Dict[str, object]]:
        """summary.collect() of the results folder (bench name -> json/md/pngs), a bench it
        lacks taken from ``examples/results`` as every other record is (:meth:`path`)."""
        if "_found" not in self._cache:
            found = summary.collect(DEFAULT_RESULTS)
            if os.path.realpath(self.dir) != os.path.realpath(DEFAULT_RESULTS):
                found.update({name: entry for name, entry in summary.collect(self.dir).items()
                              if entry["json"] is not None})
            self._cache["_found"] = summary.in_order(found)
        return self._cache["_found"]


# -- helpers -----------------------------------------------------------------------------
def _rel(name: str) -> str:
    """A results file as the documents link it (docs/ sit one level down)."""
    return f"../examples/results/{name}"


def _hardware(hw: dict) -> str:
    """common.hardware_line without the git revision (a record states its data, not a build)."""
    return common.hardware_line(dict(hw, git=None))


def _notes(notes: List[str], skip: Tuple[str, ...] = ()) -> List[str]:
    return [f"- {n}" for n in notes if not any(s in n for s in skip)]


def _acc(d: dict, i: int) -> str:
    a = d["acceptance"][i]
    return f"{common.acceptance_value(a)}{a.get('unit', '')}"


def _wrap(text: str, width: int = 96) -> str:
    """Prose for the README, whose lines stay within 100 characters."""
    glued = _UNIT_SPACE.sub(lambda m: m.group(1) + "\0" + m.group(2), text)
    return textwrap.fill(glued, width, break_on_hyphens=False,
                         break_long_words=False).replace("\0", " ")


#: a number and its unit stay on one line
_UNIT_SPACE = re.compile(r"(\d) (%|ms|s|min|h|img/s|images/s|GB/s|MB|M|pts)(?![\w/])")


def _fold(line: str, width: int = 96) -> List[str]:
    """A recorded output line longer than the README allows, folded with a trailing ``\\``."""
    out = []
    while len(line) > width:
        cut = line.rfind(" ", 0, width)
        cut = cut if cut > 0 else width
        out.append(line[:cut] + " \\")
        line = "    " + line[cut:].lstrip()
    return out + [line]


class Missing(KeyError):
    """An entry a block looks up by name that ``record`` lacks; the message says which."""

    def __init__(self, message: str, record: Optional[dict] = None):
        super().__init__(message)
        self.record = record

    def __str__(self) -> str:
        return str(self.args[0])


def _rec(d: dict, key: str, value: str, **match) -> dict:
    for r in d["records"]:
        if r.get(key) == value and all(r.get(k) == v for k, v in match.items()):
            return r
    raise Missing(f"no record with {key}={value!r}" + (f" and {match}" if match else ""), d)


def _range(r: dict) -> str:
    s = r["samples_ms"]
    return f"{min(s):.0f}-{max(s):.0f}"


def _x(a: float, b: float, digits: int = 2) -> str:
    return f"{a / b:.{digits}f}x"
