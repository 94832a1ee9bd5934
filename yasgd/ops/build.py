"""Compile yasgd's MXNet operator library (yasgd/ops/yasgd_ops.cc -> libyasgd_ops.so).

    python -m yasgd.ops.build [--force] [--quiet]

Idempotent: nothing is done when the .so is newer than every input (yasgd_ops.cc, this
file, and the installed wheel's ``mxnet/include/mxnet/lib_api.h`` and
``mxnet/src/lib_api.cc``), so ``make install`` re-runs it in well under a second.
The command is ``g++ -shared -fPIC -std=c++11 -O3 -fopenmp -ffp-contract=off
-Wl,-Bsymbolic -Wl,--version-script=<exports> -march=x86-64-v2`` (x86-64-v2, not -march=native: the .so may be copied to another x86
host; the hot loops carry an AVX2 clone picked at load time), compiled together with
the wheel's own ``lib_api.cc`` against ``-I <site-packages>/mxnet/include``. The result
is written to a temporary file and renamed into place, so a concurrent reader (another
rank) never loads a half-written library.

Symbols: the library exports ONLY lib_api's C entry points (``_opRegSize``,
``_opCallFCompute``, ..., ``initialize``: the ``MX_INT_RET``/``MX_VOID_RET`` functions of
``lib_api.cc``, found by :func:`exported_symbols`) through a linker version script, and is
linked with ``-Bsymbolic``; every C++ symbol (``mxnet::ext::CustomOp``, ``MXTensor``,
``Registry<...>``, template instances) is local and bound inside the library. Why:
``libmxnet.so`` contains its own copy of the same ``mxnet::ext`` classes, compiled by
GCC 4.8 with the pre-C++11 ``std::string`` (8 bytes, copy-on-write; ours are 32 bytes),
and Horovod loads its MXNet extension -- and with it ``libmxnet.so`` -- ``RTLD_GLOBAL``.
With default visibility, the dynamic linker then binds the library's own references
(``CustomOp::CustomOp``, ``MXTensor::setTensor``, ``Registry::~Registry``, vtables) to
libmxnet's incompatible copies: a bus error in ``mx.library.load`` or heap corruption
(``free(): invalid pointer``) in the first ``_opCallFCompute`` -- but only in processes
that imported ``horovod.mxnet`` first, i.e. real training, never the unit tests.

Without g++ it prints a warning and exits 0: ``yasgd.ops`` then falls back to MXNet's
built-in operators. A compiler error exits 1.
"""
import argparse
import importlib.util
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile

from yasgd.ops.paths import LIBRARY, SOURCE  # noqa: E402 -- one definition of both paths

CXX_FLAGS = ["-shared", "-fPIC", "-std=c++11", "-O3", "-fopenmp", "-ffp-contract=off",
             "-Wl,-Bsymbolic"]
#: lib_api.cc's C entry points: ``MX_INT_RET _opRegSize() {`` etc.
_ENTRY_RE = re.compile(r"^MX_(?:INT|VOID)_RET\s+(\w+)\s*\(", re.M)


def mxnet_dir():
    """The installed mxnet package directory, found without importing mxnet (slow)."""
    spec = importlib.util.find_spec("mxnet")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("mxnet is not installed in this interpreter")
    return list(spec.submodule_search_locations)[0]


def inputs():
    """Every file whose change requires a rebuild."""
    mx = mxnet_dir()
    return [SOURCE, os.path.abspath(__file__),
            os.path.join(mx, "include", "mxnet", "lib_api.h"),
            os.path.join(mx, "src", "lib_api.cc")]


def is_stale(library=LIBRARY):
    """True when the library is missing or older than any of its inputs."""
    if not os.path.exists(library):
        return True
    built = os.path.getmtime(library)
    return any(os.path.getmtime(p) > built for p in inputs())


def exported_symbols(lib_api_cc):
    """The C functions MXNet looks up in a library: lib_api.cc's entry points + initialize."""
    with open(lib_api_cc) as f:
        names = _ENTRY_RE.findall(f.read())
    if "_opCallFCompute" not in names or "_opRegSize" not in names:
        raise RuntimeError("found no MX_INT_RET entry points in %s (lib_api changed?)"
                           % lib_api_cc)
    return sorted(set(names)) + ["initialize"]


def version_script(path, lib_api_cc):
    """Write a linker version script: export the C entry points, everything else local."""
    with open(path, "w") as f:
        f.write("{\n  global:\n")
        f.writelines("    %s;\n" % n for n in exported_symbols(lib_api_cc))
        f.write("  local:\n    *;\n};\n")
    return path


def arch_flags(cxx):
    """-march=x86-64-v2 on x86-64 (SSE4.2, portable); older g++ gets the same via -m."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return []
    probe = subprocess.run([cxx, "-march=x86-64-v2", "-E", "-x", "c++", os.devnull],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return ["-march=x86-64-v2"] if probe.returncode == 0 else ["-msse4.2", "-mpopcnt"]


def build(force=False, quiet=False, library=LIBRARY):
    """Compile the library if stale (or ``force``). Returns its path, or None without g++."""
    say = (lambda *a: None) if quiet else (lambda *a: print("[yasgd.ops.build]", *a))
    if not force and not is_stale(library):
        say("up to date:", library)
        return library
    cxx = os.environ.get("CXX") or shutil.which("g++")
    if not cxx or not shutil.which(cxx):
        print("[yasgd.ops.build] warning: g++ not found; the operator library is not "
              "built and yasgd.ops falls back to MXNet's built-in operators",
              file=sys.stderr)
        return None
    mx = mxnet_dir()
    lib_api_cc = os.path.join(mx, "src", "lib_api.cc")
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=os.path.dirname(library))
    os.close(fd)
    fd, vscript = tempfile.mkstemp(suffix=".map", prefix="yasgd_ops_")
    os.close(fd)
    try:
        version_script(vscript, lib_api_cc)
        cmd = ([cxx] + CXX_FLAGS + ["-Wl,--version-script=" + vscript] + arch_flags(cxx) +
               ["-I", os.path.join(mx, "include"), SOURCE, lib_api_cc, "-o", tmp])
        say(" ".join(cmd))
        subprocess.run(cmd, check=True)
        os.chmod(tmp, 0o755)
        os.replace(tmp, library)
    finally:
        for p in (tmp, vscript):
            if os.path.exists(p):
                os.unlink(p)
    say("built:", library)
    return library


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m yasgd.ops.build", description=__doc__.split("\n")[0])
    ap.add_argument("--force", action="store_true", help="rebuild even if up to date")
    ap.add_argument("--quiet", action="store_true", help="print only warnings and errors")
    args = ap.parse_args(argv)
    try:
        build(force=args.force, quiet=args.quiet)
    except subprocess.CalledProcessError as e:
        print("[yasgd.ops.build] error: compilation failed (exit %d)" % e.returncode,
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
