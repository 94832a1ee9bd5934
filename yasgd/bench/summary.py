"""``python -m yasgd.bench.summary --out DIR``: every ``bench_*.json``/``bench_*.md`` in DIR
collected into ``DIR/SUMMARY.md`` (``make bench``, before yasgd.bench.report writes the
figures of the README and docs/ from the same records).

SUMMARY.md holds: the hardware and software of this machine (yasgd.bench.common.hardware),
an index of the benchmarks found (quick or full run, load average when each started, its
acceptance lines met), every acceptance line in one table, then each benchmark's own
Markdown (headings moved one level down) with its plots, and links to any PNG in DIR not
shown yet. Benchmarks missing from DIR are listed as missing, never silently dropped; a
bench_*.json that is no JSON object, or lacks or mistypes a field read here, is refused
(record_shape.load_record: one line naming the file and the field, exit 2, nothing written).
"""
from __future__ import annotations

import glob
import os
import re
import sys
import time
from typing import Dict, List, Optional

from yasgd import outputs, usage
from yasgd.bench import common
from yasgd.bench.record_shape import (ANY, BOOL, NUM, STR, Maybe, RecordError, load_record,
                                      read_text)

#: The order of ``make bench`` (Makefile), then anything else found.
ORDER = ("optimizer", "allreduce", "init", "overlap", "throughput", "data", "largebatch",
         "ablation", "ops_micro")
EXPECTED = ORDER[:8]


#: An acceptance line as the summary's tables read it (yasgd.bench.common.acceptance).
ACCEPTANCE_LINE = {"criterion": STR, "value?": Maybe(NUM), "threshold?": Maybe(NUM),
                   "unit?": STR, "met?": Maybe(BOOL), "count?": ANY}
#: What the summary reads of every ``bench_*.json`` (yasgd.bench.common.write_results).
BENCH = {"title?": STR, "quick?": ANY, "hardware?": {"load_avg_1min?": ANY},
         "acceptance?": [ACCEPTANCE_LINE]}


def _demote(md: str) -> str:
    return re.sub(r"^(#+) ", lambda m: "#" + m.group(1) + " ", md, flags=re.M)


def collect(out_dir: str) -> Dict[str, Dict[str, object]]:
    """name -> {"json": dict or None, "md": text or None, "pngs": [...]}; RecordError on a
    bench_*.json that is not what the summary reads (:data:`BENCH`), before anything is
    written."""
    found: Dict[str, Dict[str, object]] = {}
    for path in glob.glob(os.path.join(out_dir, "bench_*.json")) + \
            glob.glob(os.path.join(out_dir, "bench_*.md")):
        name = os.path.splitext(os.path.basename(path))[0][len("bench_"):]
        entry = found.setdefault(name, {"json": None, "md": None, "pngs": []})
        if path.endswith(".json"):
            entry["json"] = load_record(path, BENCH)
        else:
            entry["md"] = read_text(path)
    for name, entry in found.items():
        entry["pngs"] = sorted(os.path.basename(p) for p in
                               glob.glob(os.path.join(out_dir, f"bench_{name}*.png")))
    return in_order(found)


def in_order(found: Dict[str, Dict[str, object]]) -> Dict[str, Dict[str, object]]:
    """``found`` with its benches in :data:`ORDER` (others after, by name)."""
    order = {n: i for i, n in enumerate(ORDER)}
    return dict(sorted(found.items(), key=lambda kv: (order.get(kv[0], len(ORDER)), kv[0])))


def acceptance_rows(found: Dict[str, Dict[str, object]]) -> List[List[str]]:
    """[bench, criterion, measured, verdict] of every acceptance line in ``found`` (as
    :func:`collect` returns it); also the acceptance table of docs/benchmarks.md
    (yasgd.bench.report)."""
    rows = []
    for name, e in found.items():
        for a in (e["json"] or {}).get("acceptance") or []:
            val = "n/a" if a.get("value") is None else \
                f"{common.acceptance_value(a)}{a.get('unit', '')}"
            verdict = {True: "met", False: "**not met**", None: "n/a"}[a.get("met")]
            if (e["json"] or {}).get("quick"):
                verdict += " (quick run)"
            rows.append([name, a["criterion"], val, verdict])
    return rows


def render(out_dir: str, found: Dict[str, Dict[str, object]], hw: Dict[str, object]) -> str:
    lines = ["# yasgd benchmarks: summary", "",
             f"Generated {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by "
             f"`python -m yasgd.bench.summary --out {out_dir}` from the bench_*.json/.md files "
             f"in this folder. Every benchmark skips warm-up, reports medians and compares its "
             f"arms side by side in one run.", "",
             "## Hardware and software", "", common.hardware_line(hw), ""]
    env = hw.get("tuning_env") or {}
    if env:
        lines += ["Tuning variables in the environment of the summary step: "
                  + ", ".join(f"`{k}={v}`" for k, v in env.items()) + " (each benchmark sets "
                  "its own per arm; see its table).", ""]
    # index
    rows = []
    for name, e in found.items():
        j = e["json"] or {}
        h = j.get("hardware") or {}
        acc = j.get("acceptance") or []
        met = sum(1 for a in acc if a.get("met"))
        files = [f"[md](bench_{name}.md)" if e["md"] is not None else "",
                 f"[json](bench_{name}.json)" if e["json"] is not None else ""]
        files += [f"[{p}]({p})" for p in e["pngs"]]
        rows.append([name, j.get("title", "").split(" (yasgd bench")[0] or name,
                     "quick (noisy)" if j.get("quick") else ("full" if j else "?"),
                     h.get("load_avg_1min", "?"), f"{met}/{len(acc)}" if acc else "-",
                     " ".join(f for f in files if f)])
    missing = [n for n in EXPECTED if n not in found]
    lines += ["## Index", "",
              common.md_table(["bench", "what", "run", "load avg at start", "acceptance met",
                               "files"], rows, "llllll") if rows else "No bench_*.json found.", ""]
    if missing:
        lines += [f"Not in this folder (not run, or failed): {', '.join(missing)}.", ""]
    # every acceptance line
    acc_rows = acceptance_rows(found)
    if acc_rows:
        lines += ["## Acceptance lines", "",
                  common.md_table(["bench", "criterion", "measured", "verdict"], acc_rows, "llrl"),
                  ""]
    # the benchmarks themselves
    shown = set()
    for name, e in found.items():
        md = e["md"]
        if md is None:
            j = e["json"] or {}
            md = f"# {name}\n\n(no bench_{name}.md; JSON keys: {', '.join(sorted(j))})\n"
        shown.update(re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md))
        lines += [_demote(md.strip()), ""]
        extra = [p for p in e["pngs"] if p not in shown]
        for p in extra:
            lines += [f"![{p}]({p})", ""]
            shown.add(p)
    others = sorted(os.path.basename(p) for p in glob.glob(os.path.join(out_dir, "*.png"))
                    if os.path.basename(p) not in shown)
    if others:
        lines += ["## Other plots in this folder", ""] + [f"- [{p}]({p})" for p in others] + [""]
    return "\n".join(lines)


def write(out_dir: str, found: Optional[Dict[str, Dict[str, object]]] = None) -> str:
    found = collect(out_dir) if found is None else found
    hw = common.hardware()
    path = os.path.join(out_dir, "SUMMARY.md")
    os.makedirs(out_dir, exist_ok=True)
    outputs.write_text(path, render(out_dir, found, hw))
    return path


def stale(out_dir: str) -> bool:
    """Whether ``DIR/SUMMARY.md`` differs, from its index on (what the records make; above
    it: when and on what it was generated), from what the bench_*.json/.md in DIR make
    now. A folder without one has nothing to disagree with."""
    path = os.path.join(out_dir, "SUMMARY.md")
    if not os.path.lexists(path):
        return False
    old = read_text(path)
    new = render(out_dir, collect(out_dir), {})
    return old[old.find("## Index"):] != new[new.find("## Index"):]


def main(argv: List[str] = None) -> int:
    ap = usage.Parser(prog="python -m yasgd.bench.summary",
                      description="Collect every bench_*.json/bench_*.md in a folder into "
                                  "its SUMMARY.md: this machine, an index, every acceptance "
                                  "line, then each benchmark's report (`make bench`).")
    ap.add_argument("--out", default="results", metavar="DIR",
                    help="folder holding bench_*.json/.md (default: %(default)s)")
    args = ap.parse_args(argv)
    if not os.path.isdir(args.out):
        return ap.fail(f"--out: {args.out} is not a folder")
    problem = outputs.file_problem(os.path.join(args.out, "SUMMARY.md"))
    if problem:                 # a folder or a pipe there: said before anything is read
        return ap.fail(f"--out: cannot write SUMMARY.md: {problem}")
    try:
        found = collect(args.out)
    except RecordError as e:
        return ap.fail(e)
    path = write(args.out, found)
    n = len(found)
    print(f"wrote {path} ({n} benchmark{'s' if n != 1 else ''})")
    return 0


if __name__ == "__main__":
    sys.exit(usage.run(main))
