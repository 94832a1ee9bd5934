"""``python -m yasgd.bench.report [--check] [--results DIR]``: every measured figure of the
README and of ``docs/*.md``, written from the recorded results (the last step of ``make bench``).

A generated block in a Markdown file is::

    <!-- yasgd:begin NAME -->
    ... (written by this module; edits are overwritten) ...
    <!-- yasgd:end NAME -->

where NAME selects a rendering function of :data:`RENDERERS`. Inputs, all in the results
folder (``--results``, default ``examples/results``; a file missing there is read from
``examples/results``):

* ``bench_*.json`` -- what ``make bench`` recorded (tables, acceptance lines, notes);
* ``paper.json`` -- the published figures the documents quote (the paper, the MLPerf v0.6
  log of the same team, published inputs of the scaling model);
* ``make_train.log`` / ``make_test.log`` -- the recorded output of the README's two commands;
* the scaling model itself: :mod:`yasgd.simulate` is pure Python and deterministic, so its
  tables are computed here, at generation time, never copied.

``--check`` rewrites nothing and exits 1 naming every block that differs from what the
records give, and a SUMMARY.md that differs from them (:func:`yasgd.bench.summary.stale`);
``tests/unit/test_docs.py`` does the same in memory. A JSON record that is no JSON object, or
lacks or mistypes a field the blocks read (:data:`report_util.SHAPES`), is refused before
anything is written: one line naming the file and the field, exit status 2. So is a row or
entry that a block looks up by name (a loader, an arm) and its record lacks: the line names
the files the block read, what is missing and the block.
"""
from __future__ import annotations

import glob
import os
import sys
from typing import Callable, Dict, List, Optional, Tuple

from yasgd import outputs, usage
from yasgd.bench.report_util import (BEGIN, BLOCK, DEFAULT_RESULTS, DOC_GLOBS, REPO,  # noqa: F401
                                     Missing, Records)
from yasgd.bench.report_bench import (bench_acceptance, bench_allreduce, bench_init,
                                      bench_optimizer, bench_overlap, bench_reading,
                                      bench_throughput, data_loaders, headline_results,
                                      paper_headline, reason_cma, reason_cycle, reason_guarded,
                                      reason_hybridize)
from yasgd.bench.data_imagenet import loader_feeds_gpu
from yasgd.bench.report_logs import RECORDED_LOGS, make_test, make_train, read_log, write_record
from yasgd.bench.report_study import ablation_results, largebatch_reading, largebatch_results
from yasgd.bench import record_shape, summary
from yasgd.bench.report_simulate import (prior_work, simulate_abci2019, simulate_abci3,
                                         simulate_constants, simulate_inputs,
                                         simulate_single_node, simulate_sweeps, simulate_tail,
                                         simulate_validation)
from yasgd.wheelarch import render_block as mxnet_cuda_wheels

RENDERERS: Dict[str, Callable[[Records], str]] = {
    "paper-headline": paper_headline, "make-train": make_train, "make-test": make_test,
    "headline-results": headline_results,
    "bench-acceptance": bench_acceptance, "bench-optimizer": bench_optimizer,
    "bench-allreduce": bench_allreduce, "bench-overlap": bench_overlap,
    "bench-init": bench_init, "bench-throughput": bench_throughput,
    "bench-reading": bench_reading, "data-loaders": data_loaders,
    "loader-feeds-gpu": loader_feeds_gpu,
    "largebatch-results": largebatch_results, "largebatch-reading": largebatch_reading,
    "ablation-results": ablation_results,
    "simulate-abci2019": simulate_abci2019, "simulate-abci3": simulate_abci3,
    "simulate-inputs": simulate_inputs, "simulate-single-node": simulate_single_node,
    "simulate-validation": simulate_validation,
    "simulate-tail": simulate_tail,
    "simulate-sweeps": simulate_sweeps, "simulate-constants": simulate_constants,
    "prior-work": prior_work,
    "reason-hybridize": reason_hybridize, "reason-guarded": reason_guarded,
    "reason-cycle": reason_cycle, "reason-cma": reason_cma,
    "mxnet-cuda-wheels": mxnet_cuda_wheels,
}


# -- the engine ---------------------------------------------------------------------------
def doc_files(root: str = REPO) -> List[str]:
    out: List[str] = []
    for g in DOC_GLOBS:
        out += sorted(glob.glob(os.path.join(root, g)))
    return out


def blocks(text: str) -> List[Tuple[str, str]]:
    """(name, body) of every generated block, in order; ValueError on a begin marker without
    its end marker."""
    found = [(m.group(2), m.group(3)) for m in BLOCK.finditer(text)]
    begins = BEGIN.findall(text)
    if len(begins) != len(found):
        closed = {n for n, _ in found}
        raise ValueError(f"begin marker without its end marker: "
                         f"{', '.join(n for n in begins if n not in closed) or begins}")
    return found


def render_text(text: str, rec: Records) -> Tuple[str, List[str]]:
    """``text`` with every block rewritten from the records, and the names that changed."""
    blocks(text)   # validates the markers
    changed: List[str] = []

    def sub(m):
        name = m.group(2)
        if name not in RENDERERS:
            raise ValueError(f"unknown block {name!r}; one of {', '.join(RENDERERS)}")
        rec.used = []
        try:
            body = RENDERERS[name](rec).rstrip("\n") + "\n"
        except KeyError as e:      # a row or entry the block looks up by name
            if isinstance(e, Missing):
                found, what = rec.source(e.record), str(e)
            else:
                found, what = None, f"no entry {e.args[0]!r}"
            raise record_shape.RecordError(f"{found or ', '.join(rec.used) or rec.dir}: {what}, "
                                           f"which the generated block {name} reads") from None
        if body != m.group(3):
            changed.append(name)
        return m.group(1) + body + m.group(4)
    return BLOCK.sub(sub, text), changed


def stale(root: str = REPO, results: str = DEFAULT_RESULTS,
          rec: Optional[Records] = None) -> List[Tuple[str, str]]:
    """(file relative to root, block name) of every block that differs from the records
    (``rec``: those of ``results``, where the caller has read them already)."""
    rec = Records(results) if rec is None else rec
    out = []
    for path in doc_files(root):
        with open(path) as f:
            _, changed = render_text(f.read(), rec)
        out += [(os.path.relpath(path, root), n) for n in changed]
    return out


@outputs.together()
def write(root: str = REPO, results: str = DEFAULT_RESULTS,
          rec: Optional[Records] = None) -> List[Tuple[str, str]]:
    rec = Records(results) if rec is None else rec
    out = []
    for path in doc_files(root):
        with open(path) as f:
            text = f.read()
        new, changed = render_text(text, rec)
        if new != text:
            outputs.write_text(path, new)
        out += [(os.path.relpath(path, root), n) for n in changed]
    return out


def main(argv: List[str] = None) -> int:
    ap = usage.Parser(prog="python -m yasgd.bench.report",
                      description="Write every measured figure of README.md and docs/*.md "
                                  "(their generated blocks) from the recorded results: the "
                                  "last step of `make bench`.")
    ap.add_argument("--results", default=DEFAULT_RESULTS, metavar="DIR",
                    help="folder of bench_*.json, paper.json and the recorded logs (default: "
                         "the repository's examples/results)")
    ap.add_argument("--check", action="store_true",
                    help="rewrite nothing; exit 1 if a block differs from the records")
    ap.add_argument("--make-train-log", metavar="LOG",
                    help="the output of one `make train`: record its banner, epochs and end "
                         "in RESULTS/make_train.log, then rewrite the blocks")
    ap.add_argument("--make-test-log", metavar="LOG",
                    help="the output of one `make test`: record what it says about each "
                         "suite in RESULTS/make_test.log, then rewrite the blocks")
    args = ap.parse_args(argv)
    if not os.path.isdir(args.results):
        return ap.fail(f"--results: {args.results} is not a folder")
    logs = [(w, getattr(args, f"make_{w}_log")) for w in RECORDED_LOGS]
    for which, log in logs:
        if log is not None and args.check:
            return ap.fail(f"--make-{which}-log writes a record; --check writes nothing")
    recorded = []
    for which, log in logs:        # each log read and checked before any record is written
        try:
            if log is not None:
                recorded.append(read_log(which, log))
                problem = outputs.file_problem(os.path.join(args.results, recorded[-1][0]))
                if problem:             # a folder or a pipe where the record goes
                    raise ValueError(f"cannot write its record: {problem}")
        except (OSError, ValueError) as e:
            return ap.fail(f"--make-{which}-log: {e}")
    rec = Records(args.results)     # every JSON record read and checked before anything is
    try:                            # written; the blocks are rendered from the same records
        rec.check()
    except record_shape.RecordError as e:
        return ap.fail(e)
    try:
        for name, lines in recorded:
            write_record(args.results, name, lines)
        if args.check:                # both read before a line is printed
            bad, old_summary = stale(REPO, args.results, rec), summary.stale(args.results)
            for f, n in bad:
                print(f"{f}: block {n} differs from the records in {args.results}")
            print("generated blocks up to date" if not bad else
                  f"{len(bad)} block(s) out of date: run python -m yasgd.bench.report")
            if old_summary:
                print(f"{os.path.join(args.results, 'SUMMARY.md')} differs from the bench_*.md "
                      f"in {args.results}: run python -m yasgd.bench.summary --out "
                      f"{args.results}")
            return 1 if bad or old_summary else 0
        done = write(REPO, args.results, rec)
    except (OSError, ValueError, KeyError) as e:
        return ap.fail(e)
    for f, n in done:
        print(f"{f}: rewrote block {n}")
    print(f"{len(done)} block(s) rewritten from {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(usage.run(main))
