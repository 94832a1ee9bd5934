"""Which MXNet 1.9.1 CUDA wheel carries GPU code for which compute capability.

The table (``yasgd/mxnet_cuda_wheels.json``) was read from the wheels themselves:
``python -m yasgd.wheelarch inspect WHEEL... --cuobjdump PATH --out FILE`` unpacks each
wheel's ``mxnet/libmxnet.so`` and lists its fat binaries with ``cuobjdump --list-elf``
(SASS: one ``sm_XY`` cubin per kernel file and architecture) and ``--list-ptx`` (PTX,
``compute_XY``). ``python -m yasgd.wheelarch describe 9.0`` prints what a preflight says.

The rule (:func:`match`) is NVIDIA's, CUDA C++ Programming Guide, "Binary Compatibility"
and "PTX Compatibility" (restated in the Hopper Compatibility Guide, "Application
Compatibility on Hopper Architecture"): a cubin built for compute capability X.y runs on
a GPU of capability X.z with z >= y only (same major: sm_80 runs 8.0 and 8.6, never 9.0;
an arch-specific ``sm_90a`` cubin only 9.0); PTX for ``compute_XY`` is JIT-compiled by the
driver for any GPU of capability >= X.Y (``compute_90a``: only 9.0). No MXNet import here.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from typing import Dict, Iterable, List, Optional, Tuple

from yasgd import outputs, usage

TABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mxnet_cuda_wheels.json")
LIBRARY = "mxnet/libmxnet.so"
#: the GPUs the documents and the preflight name, with their compute capability
GPUS = (("V100", "7.0"), ("A100", "8.0"), ("H100", "9.0"), ("H200", "9.0"))
#: ``ELF file    1: libmxnet.1.sm_50.cubin`` / ``PTX file    1: k.1.sm_90.ptx``
LINE = re.compile(r"^(ELF|PTX) file\s+\d+:\s+\S*?\.?(sm_\d+[a-z]?)\.(cubin|ptx)\s*$")
ARCH = re.compile(r"^(?:sm|compute)_(\d+)(\d)([a-z]?)$")


def parse_listing(text: str) -> Tuple[List[str], List[str]]:
    """(sorted SASS archs ``sm_XY``, sorted PTX archs ``compute_XY``) of cuobjdump's
    ``--list-elf`` / ``--list-ptx`` output; lines that are not a listing are ignored."""
    sass, ptx = set(), set()
    for line in text.splitlines():
        m = LINE.match(line.strip())
        if m and m.group(1) == "ELF":
            sass.add(m.group(2))
        elif m:
            ptx.add("compute_" + m.group(2)[3:])
    return sorted(sass, key=arch_key), sorted(ptx, key=arch_key)


def arch_key(arch: str) -> Tuple[int, int, str]:
    m = ARCH.match(arch)
    if not m:
        raise ValueError(f"not a GPU architecture: {arch!r}")
    return int(m.group(1)), int(m.group(2)), m.group(3)


def capability(cc: str) -> Tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\.(\d)\s*", str(cc))
    if not m:
        raise ValueError(f"compute capability {cc!r}: expected MAJOR.MINOR, e.g. 9.0")
    return int(m.group(1)), int(m.group(2))


def match(entry: dict, cc: str) -> Optional[str]:
    """How a GPU of capability ``cc`` runs the wheel (``"SASS sm_80"``, ``"PTX compute_80
    (JIT)"``; SASS first, as the driver), or None when the wheel has no code for it."""
    major, minor = capability(cc)
    for a in sorted(entry.get("sass", []), key=arch_key, reverse=True):
        x, y, suffix = arch_key(a)
        if x == major and (y == minor if suffix == "a" else y <= minor):
            return f"SASS {a}"
    for a in sorted(entry.get("ptx", []), key=arch_key, reverse=True):
        x, y, suffix = arch_key(a)
        if ((x, y) == (major, minor) if suffix == "a" else
                (x == major and y <= minor) if suffix == "f" else (x, y) <= (major, minor)):
            return f"PTX {a} (JIT)"
    return None


def runs(wheel_entry: dict, cc: str) -> bool:
    """Whether the wheel's ``libmxnet.so`` has kernels a GPU of capability ``cc`` runs."""
    return match(wheel_entry, cc) is not None


def load_table(path: str = TABLE) -> dict:
    with open(path) as f:
        return json.load(f)


def wheels_for(cc: str, table: Optional[dict] = None) -> List[str]:
    """The wheel names (``mxnet-cu112==1.9.1``) whose binary runs on capability ``cc``."""
    table = table if table is not None else load_table()
    return [w["name"] for w in table["wheels"] if runs(w, cc)]


def describe(cc: str, table: Optional[dict] = None) -> str:
    """One line for the user: which wheels lack kernels for ``cc`` and which run it."""
    table = table if table is not None else load_table()
    good, bad = [], []
    for w in table["wheels"]:
        how = match(w, cc)
        if how:
            good.append(f"{w['name']} ({how})")
        else:
            ptx = f"PTX {', '.join(w['ptx'])}" if w["ptx"] else "no PTX"
            sass = w["sass"] or ["no SASS"]
            span = sass[0] + (f"..{sass[-1]}" if len(sass) > 1 else "")
            bad.append(f"{w['name']} ({span}, {ptx})")
    parts = [f"no kernels in {', '.join(bad)}"] if bad else []
    parts.append("wheels that run it: " + (", ".join(good) or "none"))
    return f"compute capability {'.'.join(map(str, capability(cc)))}: " + "; ".join(parts)


def render_block(rec: object = None, table: Optional[dict] = None) -> str:
    """The ``mxnet-cuda-wheels`` block of docs/cluster.md (:mod:`yasgd.bench.report`)."""
    table = table if table is not None else load_table()
    head = ["wheel", "SASS (cubin)", "PTX"] + [f"{g} ({cc})" for g, cc in GPUS]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for w in table["wheels"]:
        runs_on = [f"yes ({h})" if h else "**no**" for h in (match(w, cc) for _, cc in GPUS)]
        rows.append("| " + " | ".join([f"`{w['name']}`", ", ".join(w["sass"]),
                                        ", ".join(w["ptx"]) or "none"] + runs_on) + " |")
    c = table["cuobjdump"]
    return "\n".join(rows + ["", f"Read with cuobjdump {c['version']} (`{c['package']}`: "
                             "`--list-elf`, `--list-ptx`)", f"from each wheel's `{LIBRARY}`."])


# -- the inspection that wrote the table ---------------------------------------------------
#: what an earlier ``inspect --out`` looks like (file_problem replaces no other file)
OURS = (lambda head: head.startswith(b'{\n "cuobjdump": {'),
        "a table written by python -m yasgd.wheelarch inspect")


def check_wheel(path: str) -> None:
    """ValueError naming ``path`` unless :func:`inspect_wheel` can read it: a zip file named
    ``DIST-VERSION-...`` that holds ``mxnet/libmxnet.so``."""
    if not os.path.isfile(path):
        raise ValueError(f"wheel {path}: " + ("not a regular file" if os.path.exists(path)
                                              else "no such file"))
    if len(os.path.basename(path).split("-")) < 2:
        raise ValueError(f"wheel {path}: not a wheel's name (DIST-VERSION-...whl)")
    try:
        with zipfile.ZipFile(path) as z:
            if LIBRARY not in z.namelist():
                raise ValueError(f"wheel {path} holds no {LIBRARY}")
    except zipfile.BadZipFile:
        raise ValueError(f"wheel {path}: not a zip file, so not a wheel") from None
    except OSError as e:
        raise ValueError(f"wheel {path}: {e.strerror or e}") from None


def _cuobjdump(tool: str, args: List[str]) -> str:
    try:
        p = subprocess.run([tool] + args, capture_output=True, text=True)
    except OSError as e:
        raise RuntimeError(f"--cuobjdump {tool}: {e.strerror or e}") from None
    if p.returncode != 0:
        raise RuntimeError(f"{tool} {' '.join(args)}: exit {p.returncode}: {p.stderr.strip()}")
    return p.stdout


def inspect_wheel(path: str, tool: str, workdir: str) -> Dict[str, object]:
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            sha.update(chunk)
    base = os.path.basename(path)
    dist, version = base.split("-")[:2]
    with zipfile.ZipFile(path) as z:
        lib = z.extract(LIBRARY, workdir)
    try:
        sass, _ = parse_listing(_cuobjdump(tool, ["--list-elf", lib]))
        _, ptx = parse_listing(_cuobjdump(tool, ["--list-ptx", lib]))
        lib_bytes = os.path.getsize(lib)
    finally:
        os.remove(lib)
    return {"name": f"{dist.replace('_', '-')}=={version}", "file": base,
            "size_bytes": os.path.getsize(path), "sha256": sha.hexdigest(),
            "library": LIBRARY, "library_bytes": lib_bytes, "sass": sass, "ptx": ptx}


def inspect(wheels: Iterable[str], tool: str, package: str = "") -> dict:
    m = re.search(r"release [\d.]+, V([\d.]+)", _cuobjdump(tool, ["--version"]))
    workdir = tempfile.mkdtemp(prefix="wheelarch-")
    try:
        entries = [inspect_wheel(w, tool, workdir) for w in wheels]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    version = m.group(1) if m else "unknown"
    return {"cuobjdump": {"version": version,
                          "package": package or f"nvidia-cuda-cuobjdump=={version}"},
            "rule": "SASS sm_XY runs X.z for z >= Y (same major); PTX compute_XY runs any "
                    "capability >= X.Y (driver JIT); 'a' suffix: exactly X.Y",
            "wheels": entries}


def main(argv: Optional[List[str]] = None) -> int:
    ap = usage.Parser(prog="python -m yasgd.wheelarch", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="command")
    i = sub.add_parser("inspect", help="read the GPU architectures of MXNet CUDA wheels",
                       description="List the GPU architectures each MXNet CUDA wheel's "
                                   "libmxnet.so carries code for (cuobjdump --list-elf), as "
                                   "the JSON of yasgd/mxnet_cuda_wheels.json.")
    i.add_argument("wheels", nargs="+", metavar="WHEEL", help="MXNet CUDA wheel files (.whl)")
    i.add_argument("--cuobjdump", default="cuobjdump", metavar="PATH",
                   help="the CUDA toolkit's cuobjdump (default: %(default)s on PATH)")
    i.add_argument("--package", default="", help="where cuobjdump came from, recorded in the "
                   "JSON (default: none)")
    i.add_argument("--out", default="-", metavar="FILE",
                   help="write the JSON here (default: -, standard output)")
    d = sub.add_parser("describe", help="which wheels run on a compute capability",
                       description="Name the MXNet 1.9.1 CUDA wheels with GPU code for each "
                                   "compute capability given (from yasgd/mxnet_cuda_wheels.json).")
    d.add_argument("cc", nargs="+", metavar="CC", help="compute capabilities, e.g. 7.0 8.0 9.0")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "describe":
            lines = [describe(cc) for cc in args.cc]    # every capability checked first
            print("\n".join(lines))
            return 0
        # what the user named, before any tool runs: each wheel, then the file --out replaces
        for w in args.wheels:
            check_wheel(w)
        if not args.out:
            raise ValueError("--out needs a file name (or - for stdout)")
        problem = outputs.file_problem(args.out, *OURS) if args.out != "-" else None
        if problem:
            raise ValueError(f"--out {args.out}: {problem}")
        text = json.dumps(inspect(args.wheels, args.cuobjdump, args.package), indent=1) + "\n"
        if args.out == "-":
            sys.stdout.write(text)
        else:
            outputs.write_text(args.out, text)
    except (ValueError, KeyError, OSError, RuntimeError, zipfile.BadZipFile) as e:
        # a bad capability, a missing or damaged wheel, an --out that is not ours to replace,
        # no cuobjdump: one line, status 2
        return usage.error(f"wheelarch {args.cmd}", e)
    return 0


if __name__ == "__main__":
    sys.exit(usage.run(main))
