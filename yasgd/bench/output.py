"""What a benchmark writes: Markdown tables, acceptance lines, JSON, the report pair
``bench_<name>.json`` / ``bench_<name>.md`` and PNG bar charts.

:func:`write_results` writes the records, the setup, the notes, the acceptance lines and
the machine (:func:`yasgd.bench.machine.hardware`) into both files;
:mod:`yasgd.bench.summary` collects them into ``SUMMARY.md``. Every file is written
through :mod:`yasgd.outputs`; a bench writes its plots and its pair inside one
``outputs.together()``, so that a stop leaves its old results or its new ones.
"""
from __future__ import annotations

import json
import os
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from yasgd import UsageError, outputs
from yasgd.bench import record_shape
from yasgd.bench.machine import hardware, hardware_line


def md_table(headers: Sequence[str], rows: Iterable[Sequence[object]],
             align: Optional[str] = None) -> str:
    """A Markdown table; ``align`` one letter per column: l (left) or r (right)."""
    align = align or ("l" + "r" * (len(headers) - 1))
    out = ["| " + " | ".join(headers) + " |",
           "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    for row in rows:
        out.append("| " + " | ".join("" if c is None else str(c) for c in row) + " |")
    return "\n".join(out)


def fmt(x: Optional[float], digits: int = 1) -> str:
    if x is None:
        return "n/a"
    return f"{x:,.{digits}f}"


def acceptance(criterion: str, value: Optional[float], threshold: Optional[float],
               higher_is_better: bool = True, unit: str = "x",
               count: bool = False, strict: bool = False) -> Dict[str, object]:
    """One acceptance line: ``value`` against ``threshold`` (met or not, never hidden; not
    judged while either is unknown); ``strict``: the value must pass the threshold, not
    reach it; ``count``: both are whole numbers of things, shown as "value of threshold"."""
    if value is None or threshold is None:
        met = None
    elif higher_is_better:
        met = value > threshold if strict else value >= threshold
    else:
        met = value < threshold if strict else value <= threshold
    line = {"criterion": criterion, "value": None if value is None else round(value, 3),
            "threshold": threshold, "unit": unit, "met": met}
    if count:
        line["count"] = True
    return line


def acceptance_value(a: Dict[str, object]) -> str:
    """Two decimals, three when the verdict hinges on the third; counts as "n of m"."""
    v, t = float(a["value"]), float(a.get("threshold") or 0)
    if a.get("count"):
        return f"{v:.0f} of {t:.0f}"
    return f"{v:.3f}" if abs(v - t) < 0.01 else f"{v:.2f}"


def acceptance_table(lines: Sequence[Dict[str, object]]) -> str:
    rows = []
    for a in lines:
        val = "n/a" if a["value"] is None else f"{acceptance_value(a)}{a.get('unit', '')}"
        met = {True: "met", False: "**not met**", None: "n/a"}[a["met"]]
        rows.append([a["criterion"], val, met])
    return md_table(["acceptance", "measured", "verdict"], rows, "lrl")


def write_results(out_dir: str, name: str, records: List[Dict[str, object]],
                  markdown_table: str, notes: Sequence[str] = (), title: Optional[str] = None,
                  setup: Optional[Dict[str, object]] = None, quick: bool = False,
                  hw: Optional[Dict[str, object]] = None,
                  acceptance_lines: Sequence[Dict[str, object]] = (),
                  plots: Sequence[str] = (), extra: Optional[Dict[str, object]] = None,
                  intro: str = "") -> Dict[str, str]:
    """Write ``bench_<name>.json`` and ``bench_<name>.md`` into ``out_dir``.

    records: one dict per measured row (the JSON's "records"); markdown_table: the
    table as text; notes: sentences under the table; plots: PNG paths (linked, relative
    to out_dir). Returns {"json": path, "md": path}.
    """
    os.makedirs(out_dir, exist_ok=True)
    hw = dict(hw or hardware())
    hw["load_avg_1min_end"] = round(os.getloadavg()[0], 2)
    title = title or f"yasgd bench {name}"
    report = {"bench": name, "title": title, "quick": bool(quick), "hardware": hw,
              "setup": setup or {}, "records": records, "notes": list(notes),
              "acceptance": list(acceptance_lines),
              "plots": [os.path.basename(p) for p in plots]}
    if extra:
        report.update(extra)
    jpath = os.path.join(out_dir, f"bench_{name}.json")
    lines = [f"# {title}", ""]
    if quick:
        lines += ["> **--quick smoke run**: few repetitions, numbers are noisy; not for quoting "
                  "as results.", ""]
    if intro:
        lines += [intro, ""]
    lines += [markdown_table, ""]
    if acceptance_lines:
        lines += [acceptance_table(acceptance_lines), ""]
    for n in notes:
        lines += [f"- {n}"]
    if notes:
        lines.append("")
    lines += [hardware_line(hw), ""]
    for p in plots:
        base = os.path.basename(p)
        lines += [f"![{base}]({base})", ""]
    mpath = os.path.join(out_dir, f"bench_{name}.md")
    with outputs.together():
        outputs.write_json(jpath, report, default=str)
        outputs.write_text(mpath, "\n".join(lines))
    return {"json": jpath, "md": mpath}


STUDY_RUNS = "study_runs"   # a training study's folder under --out: runs' folders, _work/
STUDY_CACHE = "runs_cache"  # its cache under --out, unless --cache names another


def study_folders(out_dir: str, cache: Optional[str]) -> List[Tuple[str, str]]:
    """(what, path) for each folder a training study makes: its runs' folder, its cache."""
    return [("bench --out: the runs' folder", os.path.join(out_dir, STUDY_RUNS)),
            ("bench --cache", cache) if cache is not None else
            ("bench --out: the run cache", os.path.join(out_dir, STUDY_CACHE))]


def check_paths(name: str, out_dir: str, plots: Sequence[str],
                folders: Sequence[Tuple[str, str]] = ()) -> None:
    """Before any work: UsageError (one line) naming the first output of bench ``name``
    that cannot be written, of its report pair and ``plots`` under ``out_dir`` (a folder,
    a pipe or an unwritable file at one of their names), and of ``folders`` ((what, path):
    the folders a training bench makes)."""
    if os.path.isdir(out_dir):      # else it is made, empty (outputs.check_dir said it can be)
        for base in (f"bench_{name}.json", f"bench_{name}.md", *plots):
            problem = outputs.file_problem(os.path.join(out_dir, base))
            if problem:
                raise UsageError(f"bench --out {out_dir}: cannot write {base}: {problem}")
    for what, path in folders:
        outputs.check_dir(path, what)


def bar_chart(path: str, labels: Sequence[str], values: Sequence[float], xlabel: str,
              title: str, ref: Optional[float] = None, ref_label: str = "",
              colors: Optional[Sequence[str]] = None, annotate: str = "{:.1f}") -> str:
    """A horizontal bar chart (PNG, matplotlib Agg); returns ``path``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    n = len(labels)
    fig, ax = plt.subplots(figsize=(10, 0.42 * n + 1.6))
    ys = list(range(n))[::-1]
    ax.barh(ys, values, color=colors or "#4C72B0")
    ax.set_yticks(ys)
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=10)
    vmax = max([v for v in values if v is not None] + [ref or 0])
    for y, v in zip(ys, values):
        ax.text(v + vmax * 0.01, y, annotate.format(v), va="center", fontsize=7)
    if ref is not None:
        ax.axvline(ref, color="#C44E52", linestyle="--", linewidth=1)
        if ref_label:
            ax.text(ref, n - 0.4, " " + ref_label, color="#C44E52", fontsize=7, va="top")
    ax.set_xlim(0, vmax * 1.15)
    fig.tight_layout()
    outputs.save_figure(fig, path, dpi=110)
    plt.close(fig)
    return path


#: the largest JSON file a bench reads back (a run's cache entry, the record at ``--out``):
#: far above what a bench writes, far below what would exhaust the memory
MAX_JSON_BYTES = record_shape.MAX_BYTES


def read_json(path: str) -> Dict[str, object]:
    """The JSON of the file ``path``: OSError where it cannot be read; ValueError where it
    is no regular file (a pipe would block the read for good, a device never end it), is
    larger than :data:`MAX_JSON_BYTES`, or is not JSON (nested deeper than the parser's
    recursion goes included)."""
    problem = outputs.not_whole(path, MAX_JSON_BYTES)
    if problem:
        raise ValueError(problem)
    with open(path, "rb") as f:
        data = f.read(MAX_JSON_BYTES + 1)
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("JSON nested deeper than the parser goes") from None


def write_text(path: str, text: str) -> None:
    outputs.write_text(path, text)


def write_json(path: str, obj: object) -> None:
    outputs.write_json(path, obj, default=str)


def say(msg: str) -> None:
    print(msg, flush=True)
