"""The records of the README's two commands, ``make train`` and ``make test``: which lines
of their output a record keeps (``python -m yasgd.bench.report --make-train-log LOG`` /
``--make-test-log LOG`` write ``examples/results/make_train.log`` / ``make_test.log``), and
the README blocks that quote them (:mod:`yasgd.bench.report`)."""
from __future__ import annotations

import os
import re
import stat
from typing import Dict, List, Tuple

from yasgd.bench.output import write_text
from yasgd.bench.report_util import Records, _fold, _wrap


#: how ``yasgd train`` prints its last line, "final test accuracy: 0.9112 (91.12 %) after ..."
_FINAL = "final test accuracy: "
# what both records strip and keep: terminal colours (pytest colours its output when mpirun
# gives the ranks a terminal, and so does the progress bar) and make's error lines
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_MAKE_ERROR = re.compile(r"^make(?:\[\d+\])?: \*\*\* .*$")


def make_train_info(rec: Records) -> Tuple[str, dict]:
    """(the recorded ``make train`` log, or "" when there is none; its steps an epoch,
    epochs, final top-1 % and training seconds, each where the log states it)."""
    text = rec.text("make_train.log")
    if text is None:
        return "", {}
    info: Dict[str, object] = {}
    m = re.search(r"(\d+) steps/epoch, (\d+) epochs", text)
    if m:
        info["steps"], info["epochs"] = int(m.group(1)), int(m.group(2))
    m = re.search(re.escape(_FINAL) + r"([0-9.]+) \(([0-9.]+) %\) after (\d+) epochs, ([0-9.]+) s",
                  text)
    if m:
        info["acc_pct"], info["train_s"] = float(m.group(2)), float(m.group(4))
    return text, info


# what a record of ``make train`` keeps: the run's banner, its epoch lines, the end of the run
_TRAIN_BANNER = re.compile(r"yasgd: \S+ on \S+, \d+ ranks? x .*\d+ steps/epoch, \d+ epochs, "
                           r"optimizer \S+$")
_TRAIN_EPOCH = re.compile(r"epoch +(\d+)/\d+  loss \S+  .*\d+\.\ds(  test-acc \S+)?$")
_TRAIN_END = re.compile(r"(?:resumed from \S+: \d+ epochs|target top-1 \S+ reached after|"
                        + re.escape(_FINAL) + r"[0-9.]+ \(|run directory: |yasgd: error: )")
_TRAIN_GAP = "..."
# the run prints its run directory as an absolute path: the record keeps its last two parts,
# run.dir's folder and the run's own (runs/demo-YYYYmmdd-HHMMSS), no path of the machine
_RUN_DIR = re.compile(r"^(run directory: )(/.*)$")


def _run_dir(m: "re.Match[str]") -> str:
    path = m.group(2).rstrip("/")
    return m.group(1) + "/".join(path.split("/")[-2:])


def make_train_lines(text: str) -> List[str]:
    """The lines of a ``make train`` log a record keeps: the banner, the first epoch, each
    evaluated epoch and the last one (a ``...`` line after the first where epochs are left
    out), how the run ended (the run directory as ``runs/NAME``), and make's error lines; the
    progress bar (carriage returns, terminal colours) and the install's output are dropped.
    Idempotent."""
    # (epoch, evaluated, line); epoch 0 for the lines that are not an epoch's
    found: List[Tuple[int, bool, str]] = []
    for phys in text.splitlines():
        for seg in phys.split("\r"):          # the progress bar redraws its line
            ln = _ANSI.sub("", seg).strip()
            m = _TRAIN_EPOCH.match(ln)
            if m:
                found.append((int(m.group(1)), bool(m.group(2)), ln))
            elif _TRAIN_BANNER.match(ln) or _TRAIN_END.match(ln) or _MAKE_ERROR.match(ln):
                found.append((0, False, _RUN_DIR.sub(_run_dir, ln)))
    epochs = [i for i, (n, _, _) in enumerate(found) if n]
    keep = [i for i in epochs if i in (epochs[0], epochs[-1]) or found[i][1]]
    out: List[str] = []
    for i, (n, _, ln) in enumerate(found):
        if n and i not in keep:
            continue
        out.append(ln)
        if len(keep) > 1 and i == keep[0] and found[keep[1]][0] > n + 1:
            out.append(_TRAIN_GAP)             # the epochs left out after the first
    return out


def make_train(rec: Records) -> str:
    text, info = make_train_info(rec)
    if not text:
        return _wrap("No `make train` output is recorded yet: `make train 2>&1 | tee "
                     "make_train.out`, then `python -m yasgd.bench.report --make-train-log "
                     "make_train.out`.")
    lines = [f for ln in text.rstrip("\n").splitlines() for f in _fold(ln)]
    out = ["```"] + lines + ["```", ""]
    if info.get("train_s") and info.get("epochs"):
        out.append(_wrap(f"(Recorded in `examples/results/make_train.log`: {info['epochs']} "
                         f"epochs of {info['steps']} LARS steps, {info['train_s']:.1f} s of "
                         f"training, {info['train_s'] / info['epochs']:.1f} s an epoch on the "
                         f"2-core machine of the benchmarks; epochs without evaluation are left "
                         f"out of the record"
                         + ("; long lines folded)" if len(lines) > len(text.splitlines())
                            else ")")))
    return "\n".join(out)


# a pytest command of the Makefile (or its line in a recorded log): its marker expression
# (-m), when it selects by one, and the suite it runs
_SUITE = re.compile(r"\bpytest\b(?:.*?\s(-m (?:\"[^\"]*\"|'[^']*'|\S+)))?.*?\s(tests/[\w./-]+)\s*$")
# pytest's last line, "-q" or not: "1357 passed, 1 skipped in 173.59s (0:02:53)"; under
# mpirun the ranks' output interleaves, so one may follow another's progress on its line
_OUTCOME = re.compile(r"(?<!\w)((?:\d+ \w+|no tests ran)(?:, \d+ \w+)* in [0-9.]+s"
                      r"(?: \(\d+:\d\d:\d\d\))?)\s*=*$")
_RUNS = "pytest "      # how a record names a suite: "pytest tests/unit", "pytest -m serial ..."


def make_test_lines(text: str) -> List[str]:
    """The lines of a ``make test`` log that say what ran and how it ended: each suite as
    ``pytest tests/NAME``, pytest's last line of each run (one per rank under mpirun) and
    make's error lines. Idempotent, so the record it writes parses the same way; the rest
    (the install, progress dots, warnings) holds paths of the machine it ran on."""
    out: List[str] = []
    for ln in text.splitlines():
        ln = _ANSI.sub("", ln).rstrip()
        for rx, fmt in ((_SUITE, _RUNS + "{}"), (_OUTCOME, "{}"), (_MAKE_ERROR, None)):
            m = rx.search(ln)
            if m:
                ln = ln if fmt is None else fmt.format(" ".join(g for g in m.groups() if g))
                if not (out and ln == out[-1] and ln.startswith(_RUNS)):
                    out.append(ln)      # a launcher echoing the command it runs: once
                break
    return out


def make_test_outcomes(lines: List[str]) -> List[Tuple[str, List[str]]]:
    """(suite, pytest's last line of each of its runs) in the order they ran, from the
    lines :func:`make_test_lines` keeps."""
    out: List[Tuple[str, List[str]]] = []
    for ln in lines:
        if ln.startswith(_RUNS):
            out.append((ln[len(_RUNS):], []))
        elif not _MAKE_ERROR.match(ln) and out:
            out[-1][1].append(ln)
    return out


def make_test(rec: Records) -> str:
    text = rec.text("make_test.log")
    if text is None:
        return _wrap("No `make test` output is recorded yet: `make test 2>&1 | tee "
                     "make_test.out`, then `python -m yasgd.bench.report --make-test-log "
                     "make_test.out`.")
    lines = make_test_lines(text)
    suites = make_test_outcomes(lines)
    errors = [ln for ln in lines if _MAKE_ERROR.match(ln)]
    if not suites:
        return "The recorded `make test` log (`examples/results/make_test.log`) names no suite."
    ends = "; ".join(f"`{_label(suite)}` " + (" / ".join(e) or "no result line (interrupted?)")
                     for suite, e in suites)
    stop = ("; make stopped: " + "; ".join(f"`{e}`" for e in errors)) if errors else ""
    return _wrap(f"Pytest's last lines in one `make test` on a 2-core machine with no GPU "
                 f"(`examples/results/make_test.log`; one a rank under mpirun): {ends}{stop}.")


def _label(suite: str) -> str:
    """A recorded suite as the README names it: ``tests/unit``, ``tests/unit -m serial``."""
    if not suite.startswith("-m "):
        return suite
    marks, path = suite.rsplit(" ", 1)
    return f"{path} {marks}"


def _ran_to_the_end(lines: List[str]) -> bool:
    return any(ln.startswith(_FINAL) for ln in lines)


#: what ``--make-train-log`` / ``--make-test-log`` record: the record's file, the lines kept
#: (:func:`make_train_lines`, :func:`make_test_lines`), and what those lines must hold
RECORDED_LOGS = {
    "train": ("make_train.log", make_train_lines, _ran_to_the_end,
              "holds no finished run (the output of `make train`?)"),
    "test": ("make_test.log", make_test_lines, make_test_outcomes,
             "names no pytest suite (the output of `make test`?)"),
}


def read_log(which: str, log: str) -> Tuple[str, List[str]]:
    """(the record's file name, the lines it keeps) of the output of ``make train`` or
    ``make test`` (``which``) in ``log`` (:data:`RECORDED_LOGS`); ValueError when it holds
    nothing a record keeps."""
    name, keep, holds, missing = RECORDED_LOGS[which]
    if not stat.S_ISREG(os.stat(log).st_mode):     # a FIFO would wait, /dev/zero never ends
        raise ValueError(f"{log} is not a regular file: give the saved output of "
                         f"`make {which}`")
    with open(log, errors="replace") as f:
        lines = keep(f.read())
    if not holds(lines):
        raise ValueError(f"{log} {missing}")
    return name, lines


def write_record(results: str, name: str, lines: List[str]) -> str:
    """Write a record :func:`read_log` gave into ``results``; the path written."""
    path = os.path.join(results, name)
    write_text(path, "\n".join(lines) + "\n")
    return path
