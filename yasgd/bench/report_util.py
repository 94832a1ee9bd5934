"""The records behind the generated blocks (:class:`Records`) and the small formatting
helpers every renderer of :mod:`yasgd.bench.report` shares."""
from __future__ import annotations

import json
import os
import re
import textwrap
from typing import Dict, List, Optional, Tuple

from yasgd.bench import common, summary

REPO = common.REPO_ROOT
DEFAULT_RESULTS = os.path.join(REPO, "examples", "results")
#: The Markdown files that may hold generated blocks (relative to the repository).
DOC_GLOBS = ("README.md", "docs/*.md")
BEGIN = re.compile(r"<!-- yasgd:begin ([a-z0-9-]+) -->")
BLOCK = re.compile(r"(<!-- yasgd:begin ([a-z0-9-]+) -->\n)(.*?)(<!-- yasgd:end \2 -->)", re.S)


class Records:
    """The recorded results, loaded on first use."""

    def __init__(self, results_dir: str = DEFAULT_RESULTS):
        self.dir = results_dir
        self._cache: Dict[str, object] = {}

    def path(self, name: str) -> str:
        p = os.path.join(self.dir, name)
        return p if os.path.exists(p) else os.path.join(DEFAULT_RESULTS, name)

    def json(self, name: str) -> dict:
        if name not in self._cache:
            with open(self.path(name)) as f:
                self._cache[name] = json.load(f)
        return self._cache[name]

    def bench(self, name: str) -> dict:
        return self.json(f"bench_{name}.json")

    def text(self, name: str) -> Optional[str]:
        p = self.path(name)
        if not os.path.exists(p):
            return None
        with open(p) as f:
            return f.read()

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


def _rec(d: dict, key: str, value: str, **match) -> dict:
    for r in d["records"]:
        if r.get(key) == value and all(r.get(k) == v for k, v in match.items()):
            return r
    raise KeyError(f"{d.get('bench')}: no record with {key}={value!r} {match}")


def _range(r: dict) -> str:
    s = r["samples_ms"]
    return f"{min(s):.0f}-{max(s):.0f}"


def _x(a: float, b: float, digits: int = 2) -> str:
    return f"{a / b:.{digits}f}x"
