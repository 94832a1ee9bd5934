"""Read MLPerf Training ResNet-50 result logs by the one rule ``examples/results/mlperf_logs.json``
records (its ``about`` and ``rule``), so that every published figure the scaling model is set
from or tested on can be read again from the public logs (mlcommons/training_results_v0.5 on).

Per run: each epoch is its ``epoch_start``..``epoch_stop`` (paired by ``epoch_num``); the run's
median epoch leaves the first out; evaluations are ``eval_start``..``eval_stop``; the stamps
cover the run by (the epochs + the evaluations x their median) / ``run_start``..``run_stop``.
Per results folder: the runs used are those whose stamps cover at least four fifths of the run;
the median epoch is the median over them of each run's median epoch; iteration = median epoch /
ceil(train_samples / global batch) optimizer steps (the log's ``train_samples``, ImageNet's
1,281,167 where it logs none); images/s = global batch x steps / median epoch;
the score is the mean run time of the middle three of five runs, and the epochs and evaluations
the model is given are the medians of those three.

    python -m yasgd.simulate.mlperf_logs RESULTS_FOLDER --gpus N [--batch B]

prints the folder's entry as JSON (the fields of ``mlperf_logs.json``). MLPerf v0.5's logs
(``:::MLPv0.5.0`` lines) stamp only each epoch's start (``train_epoch``): see :func:`_epochs`.
"""
from __future__ import annotations

import json
import math
import os
import statistics
from typing import Dict, List, Optional

from yasgd import UsageError, usage
from yasgd.simulate.model import IMAGENET_TRAIN

COVER = 0.8
#: the most training samples (or images in a batch) a log may give: a 64-bit integer
MAX_COUNT = 2 ** 63 - 1


def _json(text: str):
    """``text`` as JSON; nesting too deep for the parser is invalid JSON like any other
    (ValueError), not a RecursionError."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deep") from None


def _finite(seconds: float) -> float:
    """A time stamp, unless it is NaN or infinite (ValueError: not an MLPerf event)."""
    if not math.isfinite(seconds):
        raise ValueError(f"time stamp {seconds} is not a finite number")
    return seconds


def events(text: str) -> List[Dict]:
    """The MLPerf events of a log, each as {time_s, key, value, metadata}: ``:::MLLOG {json}``
    (v0.7 on, ``time_ms``), ``:::MLL <seconds> <key>: {json}`` (v0.6) and ``:::MLPv0.5.0
    <benchmark> <seconds> (<file>:<line>) <key>[: <value>]`` (v0.5)."""
    out = []
    for line in text.splitlines():
        i = line.find(":::MLLOG ")
        if i >= 0:
            e = _json(line[i + 9:])
            out.append({"time_s": _finite(e["time_ms"] / 1000), "key": e["key"],
                        "value": e.get("value"), "metadata": e.get("metadata") or {}})
            continue
        i = line.find(":::MLL ")
        if i >= 0:
            stamp, key, rest = line[i + 7:].split(" ", 2)
            e = _json(rest)
            out.append({"time_s": _finite(float(stamp)), "key": key.rstrip(":"),
                        "value": e.get("value"), "metadata": e.get("metadata") or {}})
            continue
        i = line.find(":::MLPv0.5.0 ")
        if i >= 0:
            parts = line[i:].split(None, 4)
            key, _, value = (parts[4] if len(parts) > 4 else "").partition(":")
            try:
                value = _json(value) if value.strip() else None
            except ValueError:
                value = value.strip()
            out.append({"time_s": _finite(float(parts[2])), "key": key.strip(), "value": value,
                        "metadata": {}})
    return out


def _one(ev: List[Dict], key: str) -> float:
    times = [e["time_s"] for e in ev if e["key"] == key]
    if len(times) != 1:
        raise UsageError(f"the log has {len(times)} {key} stamps, not one")
    return times[0]


def _epochs(ev: List[Dict], evals: List[tuple]):
    """(each epoch's length, the number of epochs, the first epoch's start, the run's end key).
    v0.6 on: ``epoch_start``..``epoch_stop`` paired by ``epoch_num``. v0.5: ``train_epoch``
    stamps each epoch's start, so an epoch is the time to the next stamp less the evaluations
    inside it (the last, with no stamp after it, is counted but not timed); the run ends at
    ``run_final``. UsageError naming the epoch where one lasts no time or less."""
    if any(e["key"] == "epoch_start" for e in ev):
        begin = {e["metadata"].get("epoch_num"): e["time_s"] for e in ev
                 if e["key"] == "epoch_start"}
        end = {e["metadata"].get("epoch_num"): e["time_s"] for e in ev if e["key"] == "epoch_stop"}
        nums = sorted(k for k in begin if k in end and k is not None)
        for k in nums:
            if not end[k] > begin[k]:
                raise UsageError(f"epoch_num {k}: epoch_stop is not after epoch_start "
                                 f"(epoch_stop - epoch_start = {end[k] - begin[k]:g} s)")
        return [end[k] - begin[k] for k in nums], len(nums), begin.get(nums[0]) if nums else 0, \
            "run_stop"
    stamps = [e for e in ev if e["key"] == "train_epoch"]
    t = [e["time_s"] for e in stamps]
    lengths = [b - a - sum(max(0.0, min(y, b) - max(x, a)) for x, y in evals)
               for a, b in zip(t, t[1:])]
    for e, length in zip(stamps, lengths):
        if not length > 0:
            raise UsageError(f"train_epoch {_shown(e['value'])}: the epoch lasts {length:g} s "
                             "(to the next train_epoch stamp, less its evaluations), not a "
                             "positive time")
    return lengths, len(t), t[0] if t else 0, "run_final"


def read_run(text: str) -> Dict:
    """One run's figures (the ``runs`` entries of mlperf_logs.json, less ``file``)."""
    return _run(events(text))


def _run(ev: List[Dict]) -> Dict:
    """:func:`read_run` of a log's parsed events."""
    start = _one(ev, "run_start")
    evals = list(zip([e["time_s"] for e in ev if e["key"] == "eval_start"],
                     [e["time_s"] for e in ev if e["key"] == "eval_stop"]))
    epoch, count, first, end_key = _epochs(ev, evals)
    if len(epoch) < 2:
        raise UsageError("the log times fewer than two epochs")
    stop = _one(ev, end_key)
    acc = [e["value"]["value"] if isinstance(e["value"], dict) else e["value"]
           for e in ev if e["key"] == "eval_accuracy"]
    run_s = stop - start
    if not run_s > 0:
        raise UsageError(f"{end_key} is not after run_start ({end_key} - run_start = "
                         f"{run_s:g} s)")
    median_epoch = round(statistics.median(epoch[1:]), 4)
    if not median_epoch > 0:
        raise UsageError(f"the median epoch length (the first left out) is {median_epoch:g} "
                         "s, not positive")
    eval_median = statistics.median(b - a for a, b in evals) if evals else 0.0
    return {"run_s": round(run_s, 3), "epochs": count, "evals": len(acc),
            "median_epoch_s": median_epoch,
            "first_epoch_s": round(epoch[0], 3),
            "eval_s_median": round(eval_median, 4) if evals else None,
            "run_start_to_first_epoch_s": round(first - start, 3),
            "stamps_cover_run": round((sum(epoch) + len(evals) * eval_median) / run_s, 3),
            "final_accuracy": acc[-1] if acc else None}


def _logged(ev: List[Dict], key: str) -> Optional[int]:
    """The log's first value of ``key`` (``global_batch_size``, ``train_samples``), if any: a
    positive integer (a JSON number or a string of digits), else UsageError naming ``key``."""
    vals = [e["value"] for e in ev if e["key"] == key]
    if not vals:
        return None
    v = vals[0]
    n = None
    if isinstance(v, int) and not isinstance(v, bool):
        n = v
    elif isinstance(v, float) and v.is_integer():
        n = int(v)
    elif isinstance(v, str) and v.strip().isascii() and v.strip().isdigit():
        n = int(v)
    if n is None or n <= 0:
        raise UsageError(f"{key} is {_shown(v)}, not a positive integer")
    if n > MAX_COUNT:
        raise UsageError(f"{key} is {_shown(v)}, more than {MAX_COUNT:,} (a 64-bit integer)")
    return n


def _shown(v) -> str:
    """``v`` as the error line shows it: its repr, cut to 40 characters."""
    return repr(v) if len(repr(v)) <= 40 else repr(v)[:37] + "..."


def read_results(folder: str, gpus: int, batch: Optional[int] = None) -> Dict:
    """A results folder's entry: its runs (``result_*.txt``), the runs used, the median epoch,
    iteration, images/s, and with five runs the score and the epochs and evaluations of it."""
    files = sorted(f for f in os.listdir(folder) if f.startswith("result_") and f.endswith(".txt"))
    if not files:
        raise UsageError(f"{folder}: no result_*.txt")
    runs, batches, samples = [], set(), set()
    for name in files:
        path = os.path.join(folder, name)
        if not os.path.isfile(path):    # a FIFO would block the read, a folder fail it
            raise UsageError(f"{path}: not a regular file")
        try:
            with open(path, "rb") as f:
                data = f.read()
            if b"\0" in data:     # binary, though it may decode (as git and grep tell)
                raise UsageError(f"{path}: not a text log (a NUL byte at byte {data.index(0)})")
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise UsageError(f"{path}: not a text log ({e.reason} at byte {e.start})") from None
        try:
            ev = events(text)
            runs.append({"file": name, **_run(ev)})
            batches.add(_logged(ev, "global_batch_size"))
            samples.add(_logged(ev, "train_samples"))
        except UsageError as e:
            raise UsageError(f"{path}: {e}") from None
        except (ValueError, KeyError, TypeError, IndexError) as e:
            raise UsageError(f"{path}: a line is not an MLPerf event ({type(e).__name__}: "
                             f"{e})") from None
    given = batch
    batch = batch or (batches.pop() if len(batches) == 1 and None not in batches else None)
    if not batch:
        raise UsageError(f"{folder}: the logs give no single global_batch_size; pass --batch")
    if batch % gpus:
        raise UsageError(f"global batch {_shown(batch)} is not a multiple of --gpus {gpus}")
    # the training set: as the logs give it (MLPerf v0.7 on), ImageNet's where they give none
    samples.discard(None)
    logged = bool(samples)
    if len(samples) > 1:
        raise UsageError(f"{folder}: the logs give different train_samples: {sorted(samples)}")
    train = samples.pop() if samples else IMAGENET_TRAIN
    if batch > train:       # no batch of that training set; and batch x steps stays a float
        raise UsageError(("--batch " if given else f"{folder}: the logs' global_batch_size ")
                         + f"{_shown(batch)} is more than the {train:,} training samples of an "
                         + ("epoch (the logs' train_samples)" if logged else
                            "epoch (ImageNet's; the logs give no train_samples)"))
    steps = -(-train // batch)          # the ceiling in integers: exact for any count
    used = [r for r in runs if r["stamps_cover_run"] >= COVER]
    if not used:
        raise UsageError(f"{folder}: no run's stamps cover four fifths of it")
    median_epoch = statistics.median(r["median_epoch_s"] for r in used)
    out = {"files": files, "gpus": gpus, "global_batch": batch, "train_samples": train,
           "per_gpu_batch": batch // gpus,
           "steps_per_epoch": steps, "runs": runs, "runs_used": [r["file"] for r in used],
           "median_epoch_s": median_epoch, "iteration_s": round(median_epoch / steps, 6),
           "images_per_s": round(batch * steps / median_epoch, 1)}
    if len(runs) == 5:
        mid = sorted(runs, key=lambda r: r["run_s"])[1:-1]
        out.update(score_s=round(sum(r["run_s"] for r in mid) / 3, 3),
                   score_runs=[r["file"] for r in mid],
                   epochs=statistics.median(r["epochs"] for r in mid),
                   evals=statistics.median(r["evals"] for r in mid))
    return out


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m yasgd.simulate.mlperf_logs FOLDER --gpus N [--batch B]``: the entry as JSON;
    a bad argument, folder or log is one ``yasgd: error:`` line, exit 2."""
    from yasgd.argtypes import integer

    ap = usage.Parser(prog="python -m yasgd.simulate.mlperf_logs",
                      description="Read the MLPerf Training ResNet-50 result logs of one run "
                                  "(mlcommons/training_results_v0.5 on) by the rule "
                                  "examples/results/mlperf_logs.json records, and print the "
                                  "run's figures as JSON.")
    ap.add_argument("folder", metavar="FOLDER",
                    help="an MLPerf results folder holding result_*.txt")
    ap.add_argument("--gpus", type=integer(1), required=True, metavar="N",
                    help="GPUs of the run")
    ap.add_argument("--batch", type=integer(1), metavar="B",
                    help="global batch, where the logs give none (default: the logs')")
    args = ap.parse_args(argv)
    try:
        out = read_results(args.folder, args.gpus, args.batch)
    except OSError as e:
        return ap.fail(f"{e.filename or args.folder}: {e.strerror}")
    except UsageError as e:
        return ap.fail(e)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(usage.run(main))
